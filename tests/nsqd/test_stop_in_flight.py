"""Stopping nsqd while publishes wait for a commit that cannot come (in-process, loopback).

A cluster leader answers a publish once every ISR member has it (``Partition.commit_bound``);
a node being stopped ends its replication, so what was still waiting is never committed.
Here the bound is pinned (``commit_bound = 0``: nothing more is committed), which is what a
leader whose followers stopped acknowledging looks like, without a cluster. ``stop`` must
end within its grace and answer every such publish with an error ("exiting"): over HTTP
(aiohttp's shutdown used to wait 60 s for the handler, whose acknowledgement was only
resolved after it) and over TCP (the connection used to close with no answer); never OK
for what is not committed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from nsqpy.errors import PubFailed
from nsqpy.nsqd import server as server_module
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import AsyncWire, FakeClock, eventually, nsqd_options, pub

GRACE = 0.3  # STOP_GRACE in these tests


@pytest.fixture
async def leader(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[NsqdServer]:
    """A started nsqd whose topic ``t`` commits nothing more (stopped by the test)."""
    monkeypatch.setattr(server_module, "STOP_GRACE", GRACE, raising=False)
    server = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await server.start()
    topic = server.broker.topic("t")
    topic.partitions[0].commit_bound = 0
    try:
        yield server
    finally:
        if server._tcp_server is not None and server._tcp_server.is_serving():
            await asyncio.wait_for(server.stop(), 30)


def appended(server: NsqdServer) -> int:
    """Messages of topic ``t`` written to its log (committed or not)."""
    return server.broker.topics["t"].partitions[0].log.flushed_offset


async def timed_stop(server: NsqdServer, limit: float) -> float:
    started = time.monotonic()
    try:
        await asyncio.wait_for(server.stop(), limit)
    except TimeoutError:
        raise AssertionError(f"nsqd did not stop within {limit}s") from None
    return time.monotonic() - started


async def test_stop_answers_an_http_publish_waiting_for_its_commit(leader: NsqdServer) -> None:
    url = f"http://127.0.0.1:{leader.http_port}/pub?topic=t"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def publish() -> tuple[int, bytes]:
            async with session.post(url, data=b"m") as resp:
                return resp.status, await resp.read()

        answer = asyncio.create_task(publish())
        await eventually(lambda: appended(leader) >= 1, 10, what="the publish appended")
        assert not answer.done()  # waiting for a commit that does not come
        took = await timed_stop(leader, GRACE + 5)
        assert await asyncio.wait_for(answer, 5) == (503, b'{"message":"EXITING"}')
    assert took >= GRACE  # the grace was given to the commit


async def test_stop_answers_a_tcp_publish_waiting_for_its_commit(leader: NsqdServer) -> None:
    wire = await AsyncWire.connect(leader.tcp_port)
    await wire.send(pub("t", b"m"))
    await eventually(lambda: appended(leader) >= 1, 10, what="the publish appended")
    assert await wire.frame_within(0.05) is None  # waiting for a commit that does not come
    await timed_stop(leader, GRACE + 5)
    assert await wire.read_frame() == (1, b"E_PUB_FAILED PUB failed exiting")
    await wire.expect_closed()


async def test_stop_answers_ok_what_is_committed_in_its_grace(leader: NsqdServer) -> None:
    """A publish whose commit comes during the grace (the ISR acknowledged it) is OK."""
    wire = await AsyncWire.connect(leader.tcp_port)
    await wire.send(pub("t", b"m"))
    await eventually(lambda: appended(leader) >= 1, 10, what="the publish appended")
    stopping = asyncio.create_task(leader.stop())
    await eventually(lambda: _held(leader), 5, what="stop began")
    part = leader.broker.topics["t"].partitions[0]
    part.commit_bound = 1  # the ISR has it now
    leader.replicated(part)
    assert await wire.read_frame() == (0, b"OK")
    await asyncio.wait_for(stopping, GRACE + 5)


def _held(server: NsqdServer) -> bool:
    """The server stopped taking commands (``stop`` began)."""
    return all(conn._held for conn in server.connections)


async def test_a_publish_after_the_grace_is_refused_at_once(leader: NsqdServer) -> None:
    """Past the grace nothing waits for a commit: a publish (here an HTTP handler that was
    reading its body meanwhile) is refused at once rather than left waiting."""
    topic = leader.broker.topics["t"]
    await timed_stop(leader, GRACE + 5)
    with pytest.raises(PubFailed, match="exiting"):
        await asyncio.wait_for(leader.publish_and_wait(topic, [b"late"], 0, PubFailed), 1)


async def test_a_slow_stop_logs_once_where_its_tasks_wait(
    leader: NsqdServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A stop still running after ``STOP_REPORT_AFTER`` logs one warning naming each task
    and where it waits, so a stop that hangs says on what; a quick stop logs nothing."""
    # (a grace well beyond the report: a process held off the CPU for a moment past the
    # grace would find the publishes answered by the time the report's timer runs)
    monkeypatch.setattr(server_module, "STOP_GRACE", 2.0)
    monkeypatch.setattr(server_module, "STOP_REPORT_AFTER", GRACE / 3)
    wire = await AsyncWire.connect(leader.tcp_port)
    await wire.send(pub("t", b"m"))
    await eventually(lambda: appended(leader) >= 1, 10, what="the publish appended")
    with caplog.at_level("WARNING", logger="nsqpy.nsqd"):
        await timed_stop(leader, 2.0 + 5)  # (the grace waits for the commit)
    reports = [r.getMessage() for r in caplog.records if "still stopping" in r.getMessage()]
    assert len(reports) == 1, reports
    assert "_answer_publishes" in reports[0] and "server.py:" in reports[0]


async def test_a_quick_stop_logs_no_report(
    nsqd: NsqdServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(server_module, "STOP_REPORT_AFTER", 5.0)
    with caplog.at_level("WARNING", logger="nsqpy.nsqd"):
        await timed_stop(nsqd, 5)
    assert not [r for r in caplog.records if "still stopping" in r.getMessage()]
    await asyncio.sleep(0)  # (the report's timer was cancelled with the stop)
