"""An fsync due while the partition's last one is still running starts as soon as that one
ends, not at the ticker's next turn: under --sync-every=1 each publish is fsynced at once,
one after the other, however they overlap. A log deleted meanwhile ends the chain."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from nsqpy.broker.partition import Partition
from nsqpy.nsqd.server import NsqdServer
from nsqpy.storage import PartitionLog
from nsqpy.storage import log as log_module
from nsqpy.testing import AsyncWire, eventually, nsqd_options, pub

HOUR_MS = 3_600_000


@asynccontextmanager
async def overlapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[NsqdServer, threading.Event]]:
    """An nsqd under --sync-every=1 (its ticker, which also starts due fsyncs, never turns)
    that took two PUBs to ``t``: the fsync of the first holds at the gate it yields until
    the second is in, so the second is due an fsync while that one runs."""
    entered, gate = threading.Event(), threading.Event()
    real = log_module.fsync_segment

    def held(fd: int) -> None:
        entered.set()
        gate.wait(10)
        real(fd)

    monkeypatch.setattr(log_module, "fsync_segment", held)
    opts = nsqd_options(tmp_path, sync_every=1, sync_timeout_ms=HOUR_MS,
                        queue_scan_interval_ms=HOUR_MS)  # fmt: skip
    server = NsqdServer(opts)
    await server.start()
    try:
        wire = await AsyncWire.connect(server.tcp_port)
        await wire.send(pub("t", b"a"))
        assert await wire.read_frame() == (0, b"OK")
        await eventually(entered.is_set, 5)  # its fsync runs (held)
        await wire.send(pub("t", b"b"))
        assert await wire.read_frame() == (0, b"OK")
        yield server, gate
    finally:
        gate.set()
        await asyncio.wait_for(server.stop(), 10)


async def test_a_publish_due_an_fsync_while_one_runs_gets_its_own_when_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with overlapping(tmp_path, monkeypatch) as (server, gate):
        log = server.broker.topics["t"].partitions[0].log
        assert isinstance(log, PartitionLog)
        assert (log.flushed_offset, log.durable_offset) == (2, 0)
        gate.set()
        await eventually(lambda: log.durable_offset == 2, 5)


async def test_a_topic_deleted_while_its_fsync_runs_ends_the_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log is closed once the running fsync ends: what was flushed meanwhile is never
    fsynced, and no fsync is started for it again (a closed log's sync does nothing, and
    taking that for a success looped on the event loop, and the server never stopped)."""
    async with overlapping(tmp_path, monkeypatch) as (server, gate):
        started: list[str] = []
        start_sync = server._start_sync

        def counted(part: Partition) -> None:
            started.append(part.name)
            if len(started) <= 100:  # (a loop is cut short, so that a failing test ends)
                start_sync(part)

        monkeypatch.setattr(server, "_start_sync", counted)
        threading.Timer(0.2, gate.set).start()  # (the delete waits for the running fsync)
        assert server.broker.delete_topic("t")
        await asyncio.sleep(0.3)
        assert len(started) <= 2, len(started)
