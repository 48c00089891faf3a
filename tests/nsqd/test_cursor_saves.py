"""Periodic cursor saves: their fsyncs run in worker threads, never on the event loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.storage import CursorFile, CursorState
from nsqpy.storage import cursor as cursor_module
from nsqpy.testing import (
    FakeClock,
    cursor_path,
    eventually,
    mpub,
    nsqd_options,
    publisher,
    read_message,
    subscriber,
)


def saved_confirmed(path: Path) -> int:
    try:
        return CursorState.from_bytes(path.read_bytes()).confirmed
    except (OSError, ValueError):
        return -1


async def test_periodic_cursor_saves_fsync_off_the_event_loop(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.get_ident()
    fsyncs: list[int] = []
    real = cursor_module.fsync_file

    def spy(fd: int) -> None:
        fsyncs.append(threading.get_ident())
        real(fd)

    monkeypatch.setattr(cursor_module, "fsync_file", spy)
    server = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await server.start()
    try:
        s = await subscriber(server.tcp_port, "t", "c", rdy=10)  # (created: saved at once)
        fsyncs.clear()
        p = await publisher(server.tcp_port)
        await p.send(mpub("t", [b"%d" % i for i in range(5)]))
        assert await p.read_frame() == (0, b"OK")
        for _ in range(5):
            _, _, msg_id, _ = await read_message(s)
            await s.send(b"FIN " + msg_id + b"\n")
        channel = server.broker.topics["t"].channels["c"]
        await eventually(lambda: channel.cursor.confirmed == 5)
        path = cursor_path(tmp_path / "data", "t", "c")
        assert saved_confirmed(path) == 0  # not due yet: 5 FINs, no time passed
        clock.advance_ms(1000)
        await asyncio.sleep(0.1)
        assert saved_confirmed(path) == 0  # the interval is --sync-timeout: 2s as in NSQ
        clock.advance_ms(1000)
        await eventually(lambda: saved_confirmed(path) == 5)
        assert fsyncs and loop_thread not in fsyncs, "cursor fsyncs ran on the event loop"
    finally:
        await server.stop()
    assert saved_confirmed(path) == 5


def test_an_older_snapshot_never_overwrites_a_newer_one(tmp_path: Path) -> None:
    cf = CursorFile(tmp_path / "c.cursor")
    older = cf.snapshot(CursorState(3))
    newer = cf.snapshot(CursorState(5))
    assert cf.write(newer) and not cf.write(older)
    assert cf.load() == CursorState(5)
    late = cf.snapshot(CursorState(9))
    cf.remove()  # the channel was deleted while a write was still queued
    assert not cf.write(late)
    assert not cf.path.exists()


async def test_cursor_saves_follow_sync_every(tmp_path: Path, clock: FakeClock) -> None:
    server = NsqdServer(nsqd_options(tmp_path, sync_every=3, sync_timeout_ms=60_000), clock=clock)
    await server.start()
    try:
        s = await subscriber(server.tcp_port, "t", "c", rdy=10)
        p = await publisher(server.tcp_port)
        await p.send(mpub("t", [b"%d" % i for i in range(5)]))
        assert await p.read_frame() == (0, b"OK")
        ids = [(await read_message(s))[2] for _ in range(5)]
        path = cursor_path(tmp_path / "data", "t", "c")
        await s.send(b"FIN " + ids[0] + b"\nFIN " + ids[1] + b"\n")
        await asyncio.sleep(0.1)
        assert saved_confirmed(path) == 0  # two confirmations: not due
        await s.send(b"FIN " + ids[2] + b"\n")
        await eventually(lambda: saved_confirmed(path) == 3)  # the third: saved, no time passed
    finally:
        await server.stop()
