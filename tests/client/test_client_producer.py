"""Connection and Producer against the scripted nsqd: handshake, FIFO replies, errors, failover."""

from __future__ import annotations

import asyncio

import pytest

from nsqpy import __version__
from nsqpy.client import ConnectionClosedError, IdentifyOptions, NoConnectionsError, Producer
from nsqpy.client.conn import Connection
from nsqpy.errors import (
    BadMessage,
    BadTopic,
    ConfigError,
    FinFailed,
    NotLeader,
    NotWritable,
    PubFailed,
)
from nsqpy.testing import free_ports

from .client_fakes import FakeNsqd, frame


async def test_identify_sends_negotiation_heartbeat_and_user_agent(fake_nsqd: FakeNsqd) -> None:
    opts = IdentifyOptions(hostname="box.example.com", heartbeat_interval=5, msg_timeout=30)
    fake_nsqd.identify_reply = {"max_rdy_count": 7, "msg_timeout": 30000}
    conn = await Connection.connect(fake_nsqd.address, opts)
    (peer,) = await fake_nsqd.wait_conns(1)
    assert peer.identify == {
        "client_id": "box",
        "hostname": "box.example.com",
        "user_agent": f"nsqpy/{__version__}",
        "feature_negotiation": True,
        "heartbeat_interval": 5000,
        "tls_v1": False,
        "snappy": False,
        "deflate": False,
        "deflate_level": 6,
        "msg_timeout": 30000,
    }
    assert conn.max_rdy == 7 and conn.msg_timeout == 30.0
    conn.close()
    await conn.wait_closed()


def test_identify_options_refuse_values_nsqd_would_reject() -> None:
    with pytest.raises(ConfigError):
        IdentifyOptions(heartbeat_interval=0.5)
    with pytest.raises(ConfigError):
        IdentifyOptions(msg_timeout=901)


async def test_heartbeats_are_answered_with_nop_and_do_not_consume_replies(
    fake_nsqd: FakeNsqd,
) -> None:
    conn = await Connection.connect(fake_nsqd.address, IdentifyOptions())
    (peer,) = await fake_nsqd.wait_conns(1)
    fake_nsqd.errors["PUB"] = []
    pending = conn.command(b"PUB t\n\x00\x00\x00\x01x")
    peer.send(frame(0, b"_heartbeat_"))
    assert await pending == b"OK"
    await peer.wait_for(lambda: peer.verbs("NOP"))
    conn.close()


async def test_replies_are_matched_fifo_and_non_fatal_errors_skip_the_queue(
    fake_nsqd: FakeNsqd,
) -> None:
    seen = []
    conn = await Connection.connect(
        fake_nsqd.address, IdentifyOptions(), on_error=lambda c, e: seen.append(e)
    )
    (peer,) = await fake_nsqd.wait_conns(1)
    # Take over answering: the fake answers nothing while we script frames by hand.
    fake_nsqd.answer = lambda conn, cmd: None  # type: ignore[method-assign]
    first = conn.command(b"PUB t\n\x00\x00\x00\x01a")
    second = conn.command(b"PUB t\n\x00\x00\x00\x01b")
    peer.send(frame(1, b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"))
    peer.send(frame(0, b"first"))
    peer.send(frame(0, b"second"))
    assert await first == b"first"
    assert await second == b"second"
    assert [type(e) for e in seen] == [FinFailed] and seen[0].code == "E_FIN_FAILED"
    conn.close()


async def test_a_fatal_error_fails_its_command_and_the_rest_with_connection_closed(
    fake_nsqd: FakeNsqd,
) -> None:
    async with Producer(fake_nsqd.address) as producer:
        await producer.pub("t", b"warm-up")
        fake_nsqd.errors["PUB"] = [b"E_PUB_FAILED PUB failed exiting"]
        results = await asyncio.gather(
            producer.pub("t", b"a"), producer.pub("t", b"b"), return_exceptions=True
        )
        assert isinstance(results[0], PubFailed)
        assert results[0].code == "E_PUB_FAILED" and results[0].fatal
        assert isinstance(results[1], ConnectionClosedError)
        # the next publish reconnects by itself
        await producer.pub("t", b"c")
        assert len(fake_nsqd.conns) == 2


async def test_a_non_fatal_refusal_of_a_publish_fails_it_and_the_connection_goes_on(
    fake_nsqd: FakeNsqd,
) -> None:
    """Youzan's E_FAILED_ON_NOT_LEADER and E_FAILED_ON_NOT_WRITABLE answer a publish
    without closing the connection: that publish raises, the ones after it are answered
    as before (it used to wait for ever, and every later answer with it)."""
    async with Producer(fake_nsqd.address) as producer:
        fake_nsqd.errors["PUB"] = [
            b"E_FAILED_ON_NOT_LEADER not the leader",
            b"E_FAILED_ON_NOT_WRITABLE too few in the ISR",
        ]
        results = await asyncio.gather(
            producer.pub("t", b"a"),
            producer.pub("t", b"b"),
            producer.pub("t", b"c"),
            return_exceptions=True,
        )
        assert isinstance(results[0], NotLeader) and not results[0].fatal
        assert isinstance(results[1], NotWritable)
        assert results[2] is None
        await asyncio.wait_for(producer.mpub("t", [b"d", b"e"]), 5)
        assert len(fake_nsqd.conns) == 1, "the connection stayed"


async def test_producer_sends_pub_mpub_dpub_bytes(fake_nsqd: FakeNsqd) -> None:
    async with Producer(fake_nsqd.address) as producer:
        await producer.pub("t", b"one")
        await producer.mpub("t", [b"a", b"bc"])
        await producer.dpub("t", 1.5, b"later")
    (peer,) = fake_nsqd.conns
    cmds = [(c.verb, c.params, c.body) for c in peer.commands if c.verb != "IDENTIFY"]
    assert cmds == [
        ("PUB", ["t"], b"one"),
        ("MPUB", ["t"], b"\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x02bc"),
        ("DPUB", ["t", "1500"], b"later"),
    ]


async def test_producer_checks_names_and_bodies_before_sending(fake_nsqd: FakeNsqd) -> None:
    async with Producer(fake_nsqd.address) as producer:
        with pytest.raises(BadTopic):
            await producer.pub("bad topic", b"x")
        with pytest.raises(BadMessage):
            await producer.pub("t", b"")
        with pytest.raises(BadMessage):
            await producer.mpub("t", [b"ok", b""])
    assert fake_nsqd.conns == []


async def test_producer_round_robins_and_skips_a_dead_address(
    fake_nsqds: list[FakeNsqd],
) -> None:
    dead = f"127.0.0.1:{free_ports()[0]}"
    addresses = [fake_nsqds[0].address, dead, fake_nsqds[1].address]
    async with Producer(addresses, retry_interval=60) as producer:
        for i in range(6):
            await producer.pub("t", b"%d" % i)
        got = [[c.body or b"" for c in s.conns[0].verbs("PUB")] for s in fake_nsqds[:2]]
    # 0 -> first, 1 -> dead so the next live one, 2 -> second, ...
    assert sorted(got[0] + got[1]) == [b"%d" % i for i in range(6)]
    assert len(got[0]) >= 2 and len(got[1]) >= 2


async def test_producer_raises_no_connections_when_nothing_is_reachable() -> None:
    producer = Producer([f"127.0.0.1:{port}" for port in free_ports(2)])
    with pytest.raises(NoConnectionsError, match="no nsqd reachable"):
        await producer.pub("t", b"x")
    with pytest.raises(NoConnectionsError):
        await producer.connect()
    await producer.close()


async def test_producer_reconnects_after_the_server_comes_back() -> None:
    server = await FakeNsqd().start()
    port = server.port
    producer = Producer(server.address, retry_interval=0.01)
    await producer.pub("t", b"before")
    await server.stop()
    with pytest.raises((ConnectionClosedError, NoConnectionsError)):
        async with asyncio.timeout(5):
            while True:  # until the client notices the close
                await producer.pub("t", b"lost?")
    again = await FakeNsqd().start(port)
    try:
        await producer.pub("t", b"after")
        assert [c.body for c in again.conns[0].verbs("PUB")] == [b"after"]
    finally:
        await producer.close()
        await again.stop()
