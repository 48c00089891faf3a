"""--sync-always through the server: a PUB's OK comes only after the fsync that covers it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.storage import log as log_module
from nsqpy.testing import FakeClock, eventually, mpub, nsqd_options, pub, publisher


class FsyncGate:
    """Stands in for the segment fsync: records each call and holds it until opened."""

    def __init__(self) -> None:
        self.calls = 0
        self.done = 0
        self.open = threading.Event()

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if not self.open.wait(30):
            raise TimeoutError("fsync gate never opened")
        self.done += 1


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[FsyncGate]:
    gate = FsyncGate()
    monkeypatch.setattr(log_module, "fsync_segment", gate)
    yield gate
    gate.open.set()


async def test_ok_waits_for_the_covering_fsync(
    tmp_path: Path, clock: FakeClock, gate: FsyncGate
) -> None:
    server = NsqdServer(nsqd_options(tmp_path, sync_always=True), clock=clock)
    await server.start()
    try:
        p = await publisher(server.tcp_port)
        await p.send(pub("t", b"only after fsync"))
        await eventually(lambda: gate.calls == 1)  # the fsync is running (in a worker thread)
        with pytest.raises(TimeoutError):
            await p.read_frame(timeout=0.3)  # ... and the OK waits for it
        topic = server.broker.topics["t"]
        assert topic.log.flushed_offset == 1 and topic.log.durable_offset == 0
        # Meanwhile the loop is free: another publish is taken (and waits its own turn).
        await p.send(mpub("t", [b"a", b"b"]))
        await eventually(lambda: topic.log.flushed_offset == 3)
        gate.open.set()
        assert await p.read_frame() == (0, b"OK")
        assert await p.read_frame() == (0, b"OK")
        assert topic.log.durable_offset == 3 and gate.done >= 2
    finally:
        gate.open.set()
        await server.stop()


async def test_without_sync_always_ok_comes_after_the_write(
    tmp_path: Path, clock: FakeClock, gate: FsyncGate
) -> None:
    server = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await server.start()
    try:
        p = await publisher(server.tcp_port)
        await p.send(pub("t", b"written, not yet synced"))
        assert await p.read_frame() == (0, b"OK")
        assert gate.done == 0
    finally:
        gate.open.set()
        await server.stop()
