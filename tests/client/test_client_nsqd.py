"""The client against nsqpy's real nsqd, in-process on 127.0.0.1:0 (several servers at once)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nsqpy.client import Consumer, Message, Producer
from nsqpy.errors import BadTopic
from nsqpy.nsqd.server import NsqdServer
from nsqpy.options import NsqdOptions
from nsqpy.testing import FakeClock, eventually


def opts(path: Path, port: int = 0) -> NsqdOptions:
    return NsqdOptions(
        tcp_address=f"127.0.0.1:{port}",
        http_address="127.0.0.1:0",
        data_path=str(path),
        broadcast_address="127.0.0.1",
        queue_scan_interval_ms=10,
    )


@pytest.fixture
async def nsqds(tmp_path: Path) -> AsyncIterator[list[NsqdServer]]:
    servers = []
    for i in range(3):
        (tmp_path / str(i)).mkdir()
        server = NsqdServer(opts(tmp_path / str(i)))
        await server.start()
        servers.append(server)
    yield servers
    for server in servers:
        await server.stop()


def addr(server: NsqdServer) -> str:
    return f"127.0.0.1:{server.tcp_port}"


async def test_publish_n_consume_exactly_n_over_three_nsqd(nsqds: list[NsqdServer]) -> None:
    n = 300
    got: list[bytes] = []

    async def handler(msg: Message) -> None:
        got.append(msg.body)

    async with Producer([addr(s) for s in nsqds]) as producer:
        await asyncio.gather(*(producer.pub("events", b"m%d" % i) for i in range(n - 100)))
        await producer.mpub("events", [b"m%d" % i for i in range(n - 100, n)])
    async with Consumer(
        "events", "all", handler, nsqd_tcp_addresses=[addr(s) for s in nsqds], max_in_flight=30
    ) as consumer:
        await eventually(lambda: len(got) >= n)
        assert consumer.stats.finished >= n
    assert sorted(got) == sorted(b"m%d" % i for i in range(n))


async def test_max_in_flight_below_connections_starves_no_nsqd(nsqds: list[NsqdServer]) -> None:
    got: list[bytes] = []

    async def handler(msg: Message) -> None:
        got.append(msg.body)

    for i, s in enumerate(nsqds):
        async with Producer(addr(s)) as producer:
            await producer.mpub("low", [b"%d-%d" % (i, j) for j in range(5)])
    async with Consumer(
        "low",
        "c",
        handler,
        nsqd_tcp_addresses=[addr(s) for s in nsqds],
        max_in_flight=1,
        rdy_redistribute_interval=0.05,
        low_rdy_idle_timeout=0.1,
        low_rdy_timeout=0.3,
    ):
        await eventually(lambda: len(got) == 15)
    assert {b.split(b"-")[0] for b in got} == {b"0", b"1", b"2"}


async def test_requeue_counts_attempts_then_gives_up(nsqds: list[NsqdServer]) -> None:
    attempts: list[int] = []
    given_up: list[int] = []

    async def handler(msg: Message) -> None:
        attempts.append(msg.attempts)
        raise RuntimeError("always fails")

    def give_up(msg: Message) -> None:
        given_up.append(msg.attempts)

    async with Producer(addr(nsqds[0])) as producer:
        await producer.pub("poison", b"x")
    async with Consumer(
        "poison",
        "c",
        handler,
        nsqd_tcp_addresses=[addr(nsqds[0])],
        max_attempts=3,
        on_give_up=give_up,
        requeue_delay=0.0,
        backoff_multiplier=0.01,
    ):
        await eventually(lambda: given_up)
    assert attempts == [1, 2, 3]
    assert given_up == [4]


async def test_auto_touch_keeps_a_slow_message_in_flight(tmp_path: Path, clock: FakeClock) -> None:
    """nsqd's clock moves only when the test says, 0.8 s at a time once nsqd read what the
    consumer sent last (its TOUCH), 2.4 s in all: more than the 1 s msg_timeout, so only
    the touches keep the message in flight (a real clock left half a timeout of margin
    between touches, which a loaded machine's pause could eat)."""
    from nsqpy.client import IdentifyOptions

    server = NsqdServer(opts(tmp_path), clock=clock)
    await server.start()
    seen: list[int] = []
    done = asyncio.Event()

    async def slow(msg: Message) -> None:
        seen.append(msg.attempts)
        await done.wait()  # longer than msg_timeout (nsqd's): only TOUCH keeps it ours

    try:
        async with Producer(addr(server)) as producer:
            await producer.pub("slow", b"x")
        consumer = Consumer(
            "slow",
            "c",
            slow,
            nsqd_tcp_addresses=[addr(server)],
            auto_touch=True,
            identify=IdentifyOptions(msg_timeout=1.0),
        )
        async with consumer:
            await eventually(lambda: seen)
            (conn,) = [c for c in server.connections if c.client.channel is not None]
            for _ in range(3):
                await eventually(lambda: conn.last_recv == clock(), what="nsqd read a TOUCH")
                clock.advance_ms(800)  # 800 ms after it: within the touched timeout
            done.set()
            await eventually(lambda: consumer.stats.finished == 1)
        assert seen == [1]
        assert server.broker.topics["slow"].channels["c"].timeout_count == 0
    finally:
        await server.stop()


async def test_producer_reconnects_after_nsqd_restarts(tmp_path: Path) -> None:
    server = NsqdServer(opts(tmp_path))
    await server.start()
    port = server.tcp_port
    producer = Producer(f"127.0.0.1:{port}", retry_interval=0.01)
    try:
        await producer.pub("t", b"before")
        with pytest.raises(BadTopic):
            await producer.pub("bad topic", b"x")
        await server.stop()
        server = NsqdServer(opts(tmp_path, port))
        await server.start()
        async with asyncio.timeout(10):
            while True:
                try:
                    await producer.pub("t", b"after")
                    break
                except ConnectionError:
                    await asyncio.sleep(0.01)
    finally:
        await producer.close()
    got: list[bytes] = []

    async def handler(msg: Message) -> None:
        got.append(msg.body)

    async with Consumer("t", "c", handler, nsqd_tcp_addresses=[f"127.0.0.1:{port}"]):
        await eventually(lambda: b"after" in got and b"before" in got)
    await server.stop()
