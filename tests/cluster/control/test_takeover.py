"""A lookupd that etcd already names as the coordinator, but whose takeover is not done
(it holds the lock and has yet to read its revision back), waits for its takeover before
it answers a write: it used to forward the write to the coordinator etcd names, itself,
and answer 503 MISSING_COORDINATOR. A real nsqlookupd (in process) on the session's etcd,
its campaign held in that window by the test. The wait is bounded, happens once per
request (never again for the request forwarded to itself), and only while a campaign of
its own is under way: a lock key under its name on a lease not its own (a restart before
the old lease ran out) is answered 503 at once."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import aiohttp
import pytest

from nsqpy.cluster import etcd as etcd_module
from nsqpy.cluster.coordinator import Coordinator
from nsqpy.cluster.etcd import Etcd
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import CoordinatorInfo
from nsqpy.lookupd import cluster as lookupd_cluster
from nsqpy.lookupd.app import NsqLookupd
from nsqpy.lookupd.cluster import lookupd_id
from nsqpy.testing import eventually
from nsqpy.testing.etcd import EtcdCluster

from .conftest import bounded, cluster_lookupd


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch, keys: Keys) -> asyncio.Event:
    """Until set, a create of this cluster's coordinator key that succeeded returns only
    when the event is set: the lock is taken (etcd names its holder), the holder does not
    know it yet."""
    gate = asyncio.Event()
    create = etcd_module.Etcd.create

    async def holding(self: etcd_module.Etcd, key: str, value: bytes, lease: object = None) -> bool:
        made = await create(self, key, value, lease)  # type: ignore[arg-type]
        if made and key == keys.coordinator:
            await gate.wait()
        return made

    monkeypatch.setattr(etcd_module.Etcd, "create", holding)
    return gate


def named_itself(daemon: NsqLookupd) -> Callable[[], bool]:
    def check() -> bool:
        cluster = daemon.cluster
        assert cluster is not None and cluster.view is not None and cluster.me is not None
        named = cluster.view.coordinator
        return named is not None and named.id == cluster.me.id and not cluster.leading

    return check


async def delete(port: int, topic: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{port}/topic/delete?topic={topic}"
        async with http.post(url) as resp:
            return resp.status, await resp.text()


async def test_a_write_during_its_own_takeover_waits_for_it(
    held: asyncio.Event, lookupd: NsqLookupd
) -> None:
    await eventually(named_itself(lookupd), 10, what="etcd names the lookupd, not yet leading")
    answer = asyncio.ensure_future(delete(lookupd.http_port, "nope"))
    await asyncio.sleep(0.3)
    assert not answer.done(), f"answered during the takeover: {answer.result()}"
    held.set()
    status, body = await asyncio.wait_for(answer, 10)
    assert status == 404 and "TOPIC_NOT_FOUND" in body, (status, body)


async def test_a_takeover_that_does_not_come_is_waited_for_once_and_a_bounded_time(
    monkeypatch: pytest.MonkeyPatch, held: asyncio.Event, lookupd: NsqLookupd
) -> None:
    monkeypatch.setattr(lookupd_cluster, "TAKEOVER_WAIT_S", 0.5)
    waits: list[float] = []
    takeover = Coordinator.takeover

    async def counted(self: Coordinator, timeout: float) -> bool:
        waits.append(timeout)
        return await takeover(self, timeout)

    monkeypatch.setattr(Coordinator, "takeover", counted)
    await eventually(named_itself(lookupd), 10, what="etcd names the lookupd, not yet leading")
    try:
        status, body = await asyncio.wait_for(delete(lookupd.http_port, "nope"), 5)
        assert status == 503 and "MISSING_COORDINATOR" in body, (status, body)
        assert waits == [0.5], "waited again for the request forwarded to itself"
    finally:
        held.set()
    await eventually(lambda: lookupd.cluster is not None and lookupd.cluster.leading, 10)
    assert await delete(lookupd.http_port, "nope") == (
        404, '{"message":"TOPIC_NOT_FOUND","detail":"topic nope is not created"}')  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_a_lock_key_in_its_name_on_another_lease_is_answered_at_once(
    monkeypatch: pytest.MonkeyPatch, etcd: Etcd, etcd_single: EtcdCluster, keys: Keys
) -> None:
    """A lookupd restarted before its old lease ran out: etcd names it (the old process's
    key), its campaigns fail until that lease ends. A write then is answered 503 at once,
    not after waiting for a takeover that is not coming."""
    monkeypatch.setattr(lookupd_cluster, "TAKEOVER_WAIT_S", 30.0)
    tcp, http = free_port(), free_port()
    old = await etcd.lease(60)
    left = CoordinatorInfo(lookupd_id("127.0.0.1", tcp, http), f"127.0.0.1:{http}", "")
    assert await etcd.create(keys.coordinator, left.to_json(), old)
    daemon = cluster_lookupd(etcd_single, keys, tcp, http)
    await daemon.start()
    try:
        await eventually(named_itself(daemon), 10, what="etcd names the lookupd")
        status, body = await asyncio.wait_for(delete(daemon.http_port, "nope"), 10)
        assert status == 503 and "MISSING_COORDINATOR" in body, (status, body)
        assert daemon.cluster is not None and not daemon.cluster.leading
    finally:
        await old.revoke()
        await bounded(daemon.stop())
