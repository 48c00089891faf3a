"""Flow control and deadlines of a connection (``nsqd.flow``): the rules, then in-process
with the server's fake clock."""

from __future__ import annotations

import struct

from nsqpy.nsqd.flow import (
    FIN_BATCH,
    WRITE_HIGH_WATER,
    connection_bytes,
    expired,
    pre_auth_budget,
)
from nsqpy.nsqd.server import NsqdServer
from nsqpy.protocol.commands import CommandParser
from nsqpy.protocol.frames import encode_response
from nsqpy.protocol.limits import MAX_LINE_LENGTH, PRE_AUTH_BODY_SIZE, Limits
from nsqpy.testing import AsyncWire, FakeClock, eventually, identify

S = 1_000_000_000


def check(now: int, heartbeat: int, *, pre_auth: int = 0, since: int = 0, stalled: int = 0,
          reading: bool = True) -> str:  # fmt: skip
    return expired(
        now, heartbeat, pre_auth_ns=pre_auth, read_since=since, stalled_since=stalled,
        reading=reading,
    )  # fmt: skip


def test_a_command_has_two_heartbeats_from_when_its_read_began() -> None:
    assert check(5 + 2 * S, S, since=5) == ""
    assert check(6 + 2 * S, S, since=5) == "no complete command within 2000ms"
    assert check(60 * S, S, reading=False) == ""  # nsqd is not reading it: not the client's fault


def test_output_unread_for_one_heartbeat_expires() -> None:
    assert check(5 + S, S, stalled=5, reading=False) == ""
    assert check(6 + S, S, stalled=5, reading=False) == "output not read for 1000ms"


def test_disabled_heartbeats_mean_no_deadline_but_before_auth() -> None:
    assert check(10**6 * S, -1, stalled=1) == ""
    assert check(60 * S, -1, pre_auth=30 * S) == ""
    assert check(61 * S, -1, pre_auth=30 * S) == "no complete command within 60000ms"


def test_the_worst_case_per_connection_is_a_sum_of_the_limits() -> None:
    small = Limits(max_body_size=1 << 20, max_msg_size=1 << 16, max_output_buffer_size=1 << 14)
    bigger_body = Limits(
        max_body_size=2 << 20, max_msg_size=1 << 16, max_output_buffer_size=1 << 14
    )
    assert connection_bytes(bigger_body) - connection_bytes(small) == 2 * (1 << 20)  # in, decoded
    assert connection_bytes(Limits()) < 12 << 20  # nsqd's defaults: under 12 MiB
    budget = pre_auth_budget(small)
    body = min(PRE_AUTH_BODY_SIZE, small.max_body_size)
    assert budget >= 4 + 2 * (MAX_LINE_LENGTH + 4 + body)  # IDENTIFY and AUTH fit
    assert pre_auth_budget(Limits()) < 256 << 10  # whatever --max-body-size is


def test_a_burst_of_fins_is_taken_a_bounded_batch_at_a_time() -> None:
    parser = CommandParser(expect_magic=False)
    parser.feed(b"FIN 0000000000000000\n" * (FIN_BATCH + 5))
    assert len(parser.take_fins(FIN_BATCH)) == FIN_BATCH
    assert len(parser.take_fins(FIN_BATCH)) == 5
    assert parser.buffered == 0


async def test_bytes_that_complete_no_command_do_not_reset_the_deadline(
    nsqd: NsqdServer, clock: FakeClock
) -> None:
    wire = await AsyncWire.connect(nsqd.tcp_port)
    wire.answer_heartbeats = False
    await wire.send(identify({"heartbeat_interval": 1000}))
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(b"PUB slow\n" + struct.pack(">i", 10) + b"x")
    (conn,) = nsqd.connections
    await eventually(lambda: conn.parser.buffered == 14)
    clock.advance_ms(1500)
    await wire.send(b"xx")  # more of the body: not a command
    await eventually(lambda: conn.parser.buffered == 16)
    clock.advance_ms(501)
    await wire.expect_closed(timeout=5)


async def test_a_throttled_connection_is_not_read_and_resumes(nsqd: NsqdServer) -> None:
    """Replies queued over the high-water mark stop the reading; written, it reads again."""
    wire = await AsyncWire.connect(nsqd.tcp_port)
    await wire.send(b"NOP\n")
    await eventually(lambda: len(nsqd.connections) == 1)
    (conn,) = nsqd.connections
    big = encode_response(b"r" * WRITE_HIGH_WATER)  # as if many replies were waiting
    conn._reply(None, big)
    assert conn._throttled
    nsqd.touch_connection(conn)
    assert conn.transport is not None and not conn.transport.is_reading()
    await eventually(lambda: not conn._throttled)  # written out (the client's buffer takes it)
    assert conn.transport.is_reading()
    await wire.send(b"PUB after\n" + struct.pack(">i", 1) + b"x")
    assert await wire.read_frame() == (0, big[8:])
    assert await wire.read_frame() == (0, b"OK")
