"""The tasks nsqd starts without awaiting them are held, their failures logged, and none
outlives a stop: ``BackgroundTasks`` itself, and the lookupd client's peers dropped by a
change of ``--lookupd-tcp-address`` (in-process, loopback; the lookupd address is a free
port nobody listens on, so its peer keeps reconnecting until stopped)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from nsqpy.daemon import BackgroundTasks
from nsqpy.nsqd.lookup import LookupClient
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import eventually, free_ports

log = logging.getLogger("nsqpy.test")


async def test_a_task_is_held_until_it_ends_and_its_failure_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = BackgroundTasks(log, "test")
    gate = asyncio.Event()

    async def fails() -> None:
        await gate.wait()
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="nsqpy.test"):
        task = tasks.spawn(fails())
        assert len(tasks) == 1
        gate.set()
        await eventually(lambda: len(tasks) == 0, 5, what="the task ended")
        assert task.done()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "fails" in lines[0] and "boom" in lines[0], lines


async def test_close_cancels_and_awaits_what_still_runs() -> None:
    tasks = BackgroundTasks(log, "test")
    ended: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append("forever")

    tasks.spawn(forever())
    await asyncio.sleep(0)  # (it starts)
    await asyncio.wait_for(tasks.close(), 5)
    assert ended == ["forever"] and len(tasks) == 0


async def test_a_dropped_lookupd_peer_is_stopped_and_not_held(nsqd: NsqdServer) -> None:
    client = LookupClient(nsqd)
    address = f"127.0.0.1:{free_ports(1)[0]}"
    client.set_addresses([address])
    peer = client.peers[address]
    client.set_addresses([])
    await eventually(lambda: peer._task is not None and peer._task.done(), 5, what="peer stopped")
    await eventually(lambda: len(client._tasks) == 0, 5, what="its stop ended")
    await client.stop()


async def test_stop_waits_for_a_peer_being_dropped(nsqd: NsqdServer) -> None:
    """A peer dropped just before ``stop`` is stopped by the time ``stop`` returns (it used
    to be stopped by a task nobody held, perhaps after, perhaps never)."""
    client = LookupClient(nsqd)
    address = f"127.0.0.1:{free_ports(1)[0]}"
    client.set_addresses([address])
    peer = client.peers[address]
    client.set_addresses([])
    await client.stop()
    assert peer._task is not None and peer._task.done()
