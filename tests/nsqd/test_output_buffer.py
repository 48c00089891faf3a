"""Output buffering (output_buffer_size / output_buffer_timeout) and write backpressure."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from nsqpy.nsqd.flow import WRITE_HIGH_WATER
from nsqpy.nsqd.server import NsqdServer
from nsqpy.nsqd.tcp import V2Connection
from nsqpy.testing import (
    AsyncWire,
    FakeClock,
    eventually,
    identify,
    mpub,
    pub,
    publisher,
    read_message,
)

MSG_FRAME = 4 + 4 + 8 + 2 + 16  # size, type, timestamp, attempts, id: then the body


class SpyTransport:
    """Counts the writes of a connection (everything else goes to the real transport)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.writes: list[list[bytes]] = []

    def writelines(self, data: Iterable[bytes]) -> None:
        frames = list(data)
        self.writes.append(frames)
        self.real.writelines(frames)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def connection_of(nsqd: NsqdServer, client_id: str) -> V2Connection:
    (conn,) = [c for c in nsqd.connections if c.client.client_id == client_id]
    return conn


async def buffered_subscriber(
    nsqd: NsqdServer, name: str, fields: Mapping[str, object], rdy: int
) -> tuple[AsyncWire, SpyTransport]:
    wire = await AsyncWire.connect(nsqd.tcp_port)
    # (heartbeats every 60 s: none in the 30 s these tests move the clock)
    await wire.send(identify({"client_id": name, "heartbeat_interval": 60000, **fields}))
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(b"SUB t c\n")
    assert await wire.read_frame() == (0, b"OK")
    conn = connection_of(nsqd, name)
    spy = SpyTransport(conn.transport)
    conn.transport = spy  # type: ignore[assignment]
    await wire.send(b"RDY %d\n" % rdy)
    await eventually(lambda: conn.client.ready_count == rdy)
    return wire, spy


async def publish(nsqd: NsqdServer, bodies: list[bytes]) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(mpub("t", bodies))
    assert await p.read_frame() == (0, b"OK")


async def test_messages_wait_for_the_timeout_then_go_in_one_write(
    nsqd: NsqdServer, clock: FakeClock
) -> None:
    wire, spy = await buffered_subscriber(nsqd, "slow", {"output_buffer_timeout": 30000}, 10)
    await publish(nsqd, [b"a", b"b", b"c"])
    with pytest.raises(TimeoutError):  # RDY 10, 3 in flight: still ready, so they wait
        await wire.read_frame(timeout=0.3)
    assert spy.writes == []
    clock.advance_ms(29_999)
    with pytest.raises(TimeoutError):
        await wire.read_frame(timeout=0.2)
    clock.advance_ms(1)  # the output buffer timeout, by the server's clock
    assert [(await read_message(wire))[3] for _ in range(3)] == [b"a", b"b", b"c"]
    assert [len(w) for w in spy.writes] == [3]


async def test_a_full_buffer_is_written_at_once(nsqd: NsqdServer, clock: FakeClock) -> None:
    fields = {"output_buffer_size": 1024, "output_buffer_timeout": 30000}
    wire, spy = await buffered_subscriber(nsqd, "sized", fields, 100)
    body = b"x" * 100  # a 134-byte frame: 8 of them pass 1024 bytes
    await publish(nsqd, [body] * 30)
    got = [await read_message(wire) for _ in range(24)]
    assert len(got) == 24
    with pytest.raises(TimeoutError):  # the 6 left wait for the timeout
        await wire.read_frame(timeout=0.3)
    assert [len(w) for w in spy.writes] == [8, 8, 8]
    assert all(sum(map(len, w)) == 8 * (MSG_FRAME + 100) for w in spy.writes)
    clock.advance_ms(30_000)
    assert len([await read_message(wire) for _ in range(6)]) == 6
    assert [len(w) for w in spy.writes] == [8, 8, 8, 6]


async def test_a_response_flushes_the_messages_before_it(nsqd: NsqdServer) -> None:
    wire, spy = await buffered_subscriber(nsqd, "mixed", {"output_buffer_timeout": 30000}, 10)
    await publish(nsqd, [b"1", b"2"])
    with pytest.raises(TimeoutError):
        await wire.read_frame(timeout=0.3)
    await wire.send(pub("elsewhere", b"x"))  # its OK goes at once, with what was buffered
    frames = [await wire.read_frame() for _ in range(3)]
    assert [f[0] for f in frames] == [2, 2, 0] and frames[2] == (0, b"OK")
    assert [len(w) for w in spy.writes] == [3]


async def test_a_client_that_stops_being_ready_is_flushed_at_once(nsqd: NsqdServer) -> None:
    wire, spy = await buffered_subscriber(nsqd, "full", {"output_buffer_timeout": 30000}, 2)
    await publish(nsqd, [b"1", b"2", b"3"])  # RDY 2: the window is full after two
    assert [(await read_message(wire))[3] for _ in range(2)] == [b"1", b"2"]
    assert [len(w) for w in spy.writes] == [2]


async def test_unbuffered_clients_get_each_turn_written(nsqd: NsqdServer) -> None:
    wire, spy = await buffered_subscriber(nsqd, "none", {"output_buffer_size": -1}, 10)
    await publish(nsqd, [b"1"])
    assert (await read_message(wire))[3] == b"1"  # no clock moved: it was not held
    assert [len(w) for w in spy.writes] == [1]


async def test_a_client_that_never_reads_is_skipped_with_a_bounded_buffer(
    nsqd: NsqdServer,
) -> None:
    stuck = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(stuck, ("127.0.0.1", nsqd.tcp_port))
    try:
        ident = b'{"client_id":"stuck"}'
        hello = b"  V2IDENTIFY\n" + struct.pack(">i", len(ident)) + ident + b"SUB big c\nRDY 2500\n"
        await loop.sock_sendall(stuck, hello)
        await eventually(lambda: any(c.client.client_id == "stuck" for c in nsqd.connections))
        conn = connection_of(nsqd, "stuck")
        await eventually(lambda: conn.client.ready_count == 2500)
        sock = conn.transport.get_extra_info("socket")  # type: ignore[union-attr]
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        reader = await AsyncWire.connect(nsqd.tcp_port)
        await reader.send(b"SUB big c\nRDY 2500\n")
        assert await reader.read_frame() == (0, b"OK")

        body = b"m" * 1000
        n = 2000  # 2 MB: far more than the stuck client's kernel and transport buffers
        p = await publisher(nsqd.tcp_port)
        for _ in range(0, n, 200):
            await p.send(mpub("big", [body] * 200))
            assert await p.read_frame() == (0, b"OK")
        channel = nsqd.broker.topics["big"].channels["c"]
        await eventually(lambda: conn.client.write_paused)
        stuck_count = conn.client.in_flight_count
        assert 0 < stuck_count < n // 2
        got = 0
        while got < n - stuck_count:
            _, _, msg_id, _ = await read_message(reader)
            await reader.send(b"FIN " + msg_id + b"\n")
            got += 1
        # The stuck client's bytes stayed bounded; it took no more once its buffer was full.
        assert conn.transport is not None
        assert conn.transport.get_write_buffer_size() <= WRITE_HIGH_WATER + 16384 + 1100
        assert conn.client.in_flight_count == stuck_count
        assert channel.depth == 0
        # Once it reads again, it drains and is sent messages again.
        drained = 0
        while not (drained and not conn.client.write_paused):
            drained += len(await loop.sock_recv(stuck, 1 << 16))
        await publish_more(nsqd, p, body)
        await eventually(lambda: conn.client.in_flight_count > stuck_count)
    finally:
        stuck.close()


async def publish_more(nsqd: NsqdServer, p: AsyncWire, body: bytes) -> None:
    await p.send(mpub("big", [body] * 10))
    assert await p.read_frame() == (0, b"OK")
