"""Consumer against scripted nsqds: SUB/RDY, FIN/REQ, backoff, give-up, touch, discovery, close."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from nsqpy.client import Consumer, IdentifyOptions, Message
from nsqpy.client.rdy import RdyMode
from nsqpy.testing import eventually

from .client_fakes import FakeConn, FakeLookupd, FakeNsqd, peer

MID = b"0123456789abcdef"


def mid(i: int) -> bytes:
    return b"%016x" % i


async def ok(msg: Message) -> None:
    return None


def consumer(
    addresses: list[str], handler: Callable[[Message], Awaitable[None]] = ok, **kw: object
) -> Consumer:
    return Consumer("t", "c", handler, nsqd_tcp_addresses=addresses, **kw)  # type: ignore[arg-type]


async def test_subscribes_and_splits_max_in_flight_over_connections(
    fake_nsqds: list[FakeNsqd],
) -> None:
    async with consumer([s.address for s in fake_nsqds], max_in_flight=10) as c:
        peers = [(await s.wait_conns(1))[0] for s in fake_nsqds]
        for p in peers:
            await p.wait_for(lambda p=p: p.rdy_history)  # type: ignore[misc]
        assert [(x.verb, x.params) for x in peers[0].commands[1:2]] == [("SUB", ["t", "c"])]
        assert sum(p.rdy for p in peers) == 10
        assert sorted(p.rdy for p in peers) == [3, 3, 4]
        assert all(p.identify["feature_negotiation"] is True for p in peers)
        assert len(c.connections) == 3


async def test_return_fins_and_raise_reqs_with_delay_times_attempts(fake_nsqd: FakeNsqd) -> None:
    async def handler(msg: Message) -> None:
        if msg.body == b"bad":
            raise RuntimeError("boom")

    async with consumer(
        [fake_nsqd.address], handler, max_in_flight=5, requeue_delay=2.0, max_backoff_duration=0
    ):
        (p,) = await fake_nsqd.wait_conns(1)
        await p.wait_for(lambda: p.rdy == 5)
        p.send_message(mid(1), b"good")
        p.send_message(mid(2), b"bad", attempts=3)
        await p.wait_for(lambda: p.verbs("FIN") and p.verbs("REQ"))
    assert [x.params for x in p.verbs("FIN")] == [[mid(1).decode()]]
    assert [x.params for x in p.verbs("REQ")] == [[mid(2).decode(), "6000"]]


async def test_manual_finish_and_requeue_are_sent_once(fake_nsqd: FakeNsqd) -> None:
    async def handler(msg: Message) -> None:
        msg.requeue(0.25, backoff=False)
        msg.finish()  # ignored: already answered

    async with consumer([fake_nsqd.address], handler) as c:
        (p,) = await fake_nsqd.wait_conns(1)
        await p.wait_for(lambda: p.rdy == 1)
        p.send_message(MID, b"x")
        await p.wait_for(lambda: p.verbs("REQ"))
        assert c.backoff_level == 0
    assert [x.params for x in p.verbs("REQ")] == [[MID.decode(), "250"]]
    assert p.verbs("FIN") == []


async def test_backoff_pauses_all_then_tests_one_then_resumes(fake_nsqds: list[FakeNsqd]) -> None:
    fail = True

    async def handler(msg: Message) -> None:
        if fail:
            raise RuntimeError("downstream unavailable")

    c = consumer(
        [s.address for s in fake_nsqds[:2]],
        handler,
        max_in_flight=4,
        backoff_multiplier=0.05,
        requeue_delay=0,
    )
    async with c:
        peers = [(await s.wait_conns(1))[0] for s in fake_nsqds[:2]]
        for p in peers:
            await p.wait_for(lambda p=p: p.rdy == 2)  # type: ignore[misc]
        peers[0].send_message(mid(1), b"x")
        # failure: RDY 0 everywhere, then after 50 ms RDY 1 on exactly one connection
        await eventually(lambda: all(0 in p.rdy_history for p in peers))
        await eventually(lambda: sum(p.rdy for p in peers) == 1)
        assert c.rdy_mode is RdyMode.TESTING and c.backoff_level == 1
        tester = next(p for p in peers if p.rdy == 1)
        fail = False
        tester.send_message(mid(2), b"y")
        await eventually(lambda: [p.rdy for p in peers] == [2, 2])
        assert c.rdy_mode is RdyMode.NORMAL and c.backoff_level == 0
        assert [x.params[0] for x in tester.verbs("FIN")] == [mid(2).decode()]


async def test_messages_past_max_attempts_go_to_the_give_up_hook(fake_nsqd: FakeNsqd) -> None:
    handled: list[bytes] = []
    given_up: list[tuple[bytes, int]] = []

    async def handler(msg: Message) -> None:
        handled.append(msg.body)

    async def give_up(msg: Message) -> None:
        given_up.append((msg.body, msg.attempts))

    async with consumer(
        [fake_nsqd.address], handler, max_attempts=5, on_give_up=give_up, max_in_flight=2
    ) as c:
        (p,) = await fake_nsqd.wait_conns(1)
        await p.wait_for(lambda: p.rdy == 2)
        p.send_message(mid(1), b"fifth", attempts=5)
        p.send_message(mid(2), b"sixth", attempts=6)
        await p.wait_for(lambda: len(p.verbs("FIN")) == 2)
        assert c.stats.given_up == 1
    assert handled == [b"fifth"]
    assert given_up == [(b"sixth", 6)]


async def test_auto_touch_touches_every_half_msg_timeout(fake_nsqd: FakeNsqd) -> None:
    fake_nsqd.identify_reply = {"max_rdy_count": 2500, "msg_timeout": 1000}
    release = asyncio.Event()

    async def slow(msg: Message) -> None:
        await release.wait()

    async with consumer([fake_nsqd.address], slow, auto_touch=True):
        (p,) = await fake_nsqd.wait_conns(1)
        await p.wait_for(lambda: p.rdy == 1)
        p.send_message(MID, b"slow")
        await p.wait_for(lambda: len(p.verbs("TOUCH")) >= 2, timeout=5)
        release.set()
        await p.wait_for(lambda: p.verbs("FIN"))
    touches = p.verbs("TOUCH")
    assert touches[1].at - touches[0].at >= 0.45
    assert all(t.params == [MID.decode()] for t in touches)


async def test_fewer_in_flight_than_connections_rotates_rdy_to_every_connection(
    fake_nsqds: list[FakeNsqd],
) -> None:
    c = consumer(
        [s.address for s in fake_nsqds],
        max_in_flight=1,
        rdy_redistribute_interval=0.05,
        low_rdy_idle_timeout=0.1,
    )
    async with c:
        peers = [(await s.wait_conns(1))[0] for s in fake_nsqds]
        await eventually(lambda: all(1 in p.rdy_history for p in peers))
        # never more than one grant outstanding at a time
        assert sum(p.rdy for p in peers) <= 1


async def test_discovers_nsqd_through_lookupd_round_robin(
    fake_nsqds: list[FakeNsqd], fake_lookupd: FakeLookupd
) -> None:
    other = await FakeLookupd().start()
    fake_lookupd.producers["t"] = [peer(fake_nsqds[0].port), peer(fake_nsqds[1].port)]
    other.producers["t"] = [peer(fake_nsqds[1].port)]
    c = Consumer(
        "t",
        "c",
        ok,
        lookupd_http_addresses=[fake_lookupd.address, f"http://{other.address}/lookup"],
        lookupd_poll_interval=0.05,
        max_in_flight=4,
    )
    try:
        async with c:
            await fake_nsqds[0].wait_conns(1)
            await fake_nsqds[1].wait_conns(1)
            other.producers["t"].append(peer(fake_nsqds[2].port))
            await fake_nsqds[2].wait_conns(1)
            await eventually(lambda: len(c.connections) == 3)
            assert fake_lookupd.queries and other.queries
            assert set(fake_lookupd.queries + other.queries) == {"t"}
            # nothing is connected twice
            assert [len(s.conns) for s in fake_nsqds] == [1, 1, 1]
    finally:
        await other.stop()


async def test_direct_addresses_are_reconnected(fake_nsqd: FakeNsqd) -> None:
    async with consumer([fake_nsqd.address], reconnect_interval=0.05) as c:
        (first,) = await fake_nsqd.wait_conns(1)
        first.writer.close()
        await eventually(lambda: len(fake_nsqd.conns) == 2 and len(c.connections) == 1)
        second = fake_nsqd.conns[1]
        await second.wait_for(lambda: second.rdy == 1)


async def test_close_sends_cls_and_waits_for_running_handlers(fake_nsqd: FakeNsqd) -> None:
    started = asyncio.Event()
    done: list[bytes] = []

    async def handler(msg: Message) -> None:
        started.set()
        await asyncio.sleep(0.1)
        done.append(msg.body)

    c = consumer([fake_nsqd.address], handler)
    await c.start()
    (p,) = await fake_nsqd.wait_conns(1)
    await p.wait_for(lambda: p.rdy == 1)
    p.send_message(MID, b"x")
    await started.wait()
    await c.close()
    assert done == [b"x"]
    verbs = [x.verb for x in p.commands]
    assert verbs.index("CLS") < verbs.index("FIN")
    assert p.closed.is_set() or await _closed(p)


async def _closed(p: FakeConn) -> bool:
    await asyncio.wait_for(p.closed.wait(), 5)
    return True


async def test_identify_options_reach_the_server(fake_nsqd: FakeNsqd) -> None:
    opts = IdentifyOptions(client_id="worker-1", heartbeat_interval=2, sample_rate=10)
    async with consumer([fake_nsqd.address], identify=opts):
        (p,) = await fake_nsqd.wait_conns(1)
        await p.wait_for(lambda: p.verbs("SUB"))
    assert p.identify["client_id"] == "worker-1"
    assert p.identify["heartbeat_interval"] == 2000
    assert p.identify["sample_rate"] == 10


async def test_a_refused_sub_raises_its_error_code_and_is_not_kept(fake_nsqd: FakeNsqd) -> None:
    from nsqpy.errors import SubFailed

    fake_nsqd.errors["SUB"] = [b"E_SUB_FAILED SUB failed: too many consumers"]
    c = consumer([fake_nsqd.address], reconnect_interval=60)
    try:
        try:
            await c.connect_to_nsqd(fake_nsqd.address)
        except SubFailed as err:
            assert err.code == "E_SUB_FAILED" and err.fatal
            assert "too many consumers" in str(err)
        else:
            raise AssertionError("SUB error not raised")
        assert c.connections == []
    finally:
        await c.close()


async def test_a_silent_server_is_dropped_after_two_heartbeat_intervals(
    fake_nsqd: FakeNsqd,
) -> None:
    async with consumer([fake_nsqd.address], identify=IdentifyOptions(heartbeat_interval=1)) as c:
        (p,) = await fake_nsqd.wait_conns(1)
        conn = c.connections[0]
        # the fake never sends heartbeats: the client gives up between 2 and 3 s
        await asyncio.wait_for(conn.wait_closed(), 4)
        assert c.connections == []
        await asyncio.wait_for(p.closed.wait(), 2)
