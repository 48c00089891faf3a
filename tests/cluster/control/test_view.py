"""The watched cluster view against the session's real etcd: it follows puts and deletes,
leaves a garbage value out with one log line, and a change parses only the key that
changed (the snapshot of a large cluster is not decoded again on every report)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import pytest

from nsqpy.cluster import view as view_module
from nsqpy.cluster.etcd import Etcd
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import NodeInfo, Replicas, TopicMeta
from nsqpy.cluster.view import ClusterView
from nsqpy.testing import eventually

from .conftest import bounded


@pytest.fixture
async def view(etcd: Etcd, keys: Keys) -> AsyncIterator[ClusterView]:
    found = ClusterView(etcd, keys)
    await found.start()
    try:
        yield found
    finally:
        await bounded(found.stop())


def node(n: int) -> NodeInfo:
    return NodeInfo(f"n{n}", "h", "127.0.0.1", 4150, 4151, "127.0.0.1:4250", "1", 0)


async def test_a_change_parses_only_the_key_that_changed(
    view: ClusterView, etcd: Etcd, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[bytes] = []

    def counting(parse: Callable[[bytes], object]) -> Callable[[bytes], object]:
        def wrapped(data: bytes) -> object:
            parsed.append(data)
            return parse(data)

        return wrapped

    for kind, parse in list(view_module._PARSERS.items()):
        monkeypatch.setitem(view_module._PARSERS, kind, counting(parse))
    await etcd.put(keys.topic_meta("t"), TopicMeta(200, 1, multipart=True).to_json())
    for p in range(200):
        await etcd.put(keys.replicas("t", p), Replicas("n0", ("n0",)).to_json())
    await etcd.put(keys.node("n0"), node(0).to_json())
    await eventually(lambda: len(view.snapshot().replicas) == 200 and view.snapshot().nodes)
    assert len(parsed) >= 202
    parsed.clear()
    revision = await etcd.put(keys.replicas("t", 7), Replicas("n0", ("n0",), epoch=2).to_json())
    await eventually(lambda: view.snapshot().revision >= revision)
    assert view.snapshot().replicas[("t", 7)].value.epoch == 2
    assert len(parsed) == 1, "only the key that changed"
    await etcd.delete(keys.replicas("t", 7))
    await eventually(lambda: ("t", 7) not in view.snapshot().replicas)
    assert len(view.snapshot().replicas) == 199 and len(parsed) == 1


async def test_a_garbage_value_is_left_out_with_one_line(
    view: ClusterView, etcd: Etcd, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "nsqpy.cluster")
    await etcd.put(keys.replicas("t", 0), b"{not json")
    await etcd.put(keys.replicas("t", 1), Replicas("n0", ("n0",)).to_json())
    await eventually(lambda: ("t", 1) in view.snapshot().replicas)
    await etcd.put(keys.node("n1"), node(1).to_json())  # another change: a rebuild
    await eventually(lambda: "n1" in view.snapshot().nodes)
    await asyncio.sleep(0)
    assert ("t", 0) not in view.snapshot().replicas
    assert caplog.text.count("ignoring") == 1
