"""``nsqd.dat`` is written by the ticker in a worker thread: its fsyncs (the file's and
its directory's) never stop the event loop. A disk slow to fsync (another process writing
much) would otherwise hold every client, and in a cluster the etcd lease's keep-alive,
for as long as each fsync takes."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import AsyncWire, eventually, nsqd_options, pub


async def test_the_event_loop_answers_while_the_metadata_fsync_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, gate = threading.Event(), threading.Event()
    timed_out: list[str] = []  # (the gate gave up: nothing else ran meanwhile)
    real = os.fsync

    def held(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("nsqd.dat.tmp"):
            entered.set()
            if not gate.wait(5):
                timed_out.append(threading.current_thread().name)
        real(fd)

    monkeypatch.setattr(os, "fsync", held)
    server = NsqdServer(nsqd_options(tmp_path, queue_scan_interval_ms=20))
    await server.start()
    try:
        wire = await AsyncWire.connect(server.tcp_port)
        await wire.send(pub("created", b"a"))  # a new topic: nsqd.dat is owed a write
        assert await wire.read_frame() == (0, b"OK")
        await eventually(entered.is_set, 5)  # the ticker's write is in its fsync, held
        await wire.send(pub("another", b"b"))
        assert await asyncio.wait_for(wire.read_frame(), 2) == (0, b"OK")
        assert "another" in server.broker.topics
        assert timed_out == []  # (answered while the fsync was held)
        gate.set()
        saved = server.broker.data_path / "nsqd.dat"

        def names() -> list[str]:
            return sorted(t["name"] for t in json.loads(saved.read_bytes())["topics"])

        await eventually(lambda: saved.exists() and names() == ["another", "created"], 5)
        assert server.broker.healthy
    finally:
        gate.set()
        await asyncio.wait_for(server.stop(), 10)
