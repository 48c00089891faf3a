"""A publish's OK must not wait for the next fsync when the ticker runs between the command
and the group commit (found by bench/secure.py: replies stalled for --sync-timeout)."""

from __future__ import annotations

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import AsyncWire, pub


async def test_ok_is_sent_when_the_ticker_runs_before_the_commit(nsqd: NsqdServer) -> None:
    wire = await AsyncWire.connect(nsqd.tcp_port)
    await wire.send(pub("race", b"warm-up"))
    assert await wire.read_frame() == (0, b"OK")
    (conn,) = nsqd.connections
    conn.data_received(pub("race", b"x"))  # the command runs; its commit is scheduled
    nsqd._tick(1)  # the ticker's flush comes first and finds the ack not yet done
    assert await wire.read_frame(timeout=1.0) == (0, b"OK")  # not after --sync-timeout (2 s)
