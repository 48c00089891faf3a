"""A topic's message TTL and maximum depth (refuse with NSQ's errors, or drop the oldest)."""

from __future__ import annotations

import json

import aiohttp

from nsqpy.testing import (
    AsyncWire,
    FakeClock,
    NsqdServers,
    dpub,
    mpub,
    pub,
    publish,
    read_message,
    subscriber,
)

from .conftest import ERR, Http, read_bodies


async def test_messages_past_their_ttl_are_confirmed_without_delivery(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    sub = await subscriber(nsqd.tcp_port, "e", "c", rdy=0)
    assert await http.post("/topic/setttl?topic=e&ttl=1s") == (200, {"ttl_ms": 1000})
    await publish(nsqd.tcp_port, mpub("e", [b"a", b"b", b"c"]))
    clock.advance_ms(2000)
    await publish(nsqd.tcp_port, pub("e", b"fresh"), dpub("e", 5000, b"deferred"))
    await sub.send(b"RDY 10\n")
    assert await read_bodies(sub, 1) == [b"fresh"]  # a, b, c expired
    await http.settled("e", "c")
    assert (await http.channel("e", "c"))["expired_count"] == 3
    clock.advance_ms(5500)  # the DPUB'd message is due half a second ago: within its TTL
    assert await read_bodies(sub, 1) == [b"deferred"]

    await sub.send(b"RDY 0\n")
    await publish(nsqd.tcp_port, dpub("e", 1000, b"missed"))
    await http.settled("e", "c")
    clock.advance_ms(3000)  # due 2 s ago, nobody ready: past its TTL when pulled
    await sub.send(b"RDY 10\n")
    await publish(nsqd.tcp_port, pub("e", b"last"))
    assert await read_bodies(sub, 1) == [b"last"]
    await http.settled("e", "c")
    nsqd.broker.scan()  # a timer pass pulls the due entry: expired, not delivered
    doc = await http.channel("e", "c")
    assert (doc["expired_count"], doc["deferred_count"]) == (4, 0)
    topic = await http.topic("e")
    assert (topic["ttl_ms"], topic["expired_count"]) == (1000, 4)


async def test_the_ttl_sweep_needs_no_consumer_and_the_ttl_survives_a_restart(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    assert (await http.post("/topic/create?topic=s"))[0] == 200
    assert (await http.post("/channel/create?topic=s&channel=c"))[0] == 200
    assert await http.post("/topic/setttl?topic=s&ttl=500") == (200, {"ttl_ms": 500})
    await publish(nsqd.tcp_port, mpub("s", [b"1", b"2", b"3"]))
    clock.advance_ms(400)
    await publish(nsqd.tcp_port, pub("s", b"4"))
    clock.advance_ms(200)
    nsqd.broker.housekeeping()
    doc = await http.channel("s", "c")
    assert (doc["depth"], doc["expired_count"]) == (1, 3)

    nsqd = await nsqd_servers.restart(nsqd)
    http = Http(session, nsqd)
    assert (await http.topic("s"))["ttl_ms"] == 500
    clock.advance_ms(1000)
    nsqd.broker.housekeeping()
    assert (await http.channel("s", "c"))["depth"] == 0
    assert await http.post("/topic/setttl?topic=s&ttl=0") == (200, {"ttl_ms": 0})
    await publish(nsqd.tcp_port, pub("s", b"5"))
    clock.advance_ms(3_600_000)
    nsqd.broker.housekeeping()
    assert (await http.channel("s", "c"))["depth"] == 1  # no TTL any more


async def test_a_full_topic_refuses_publishes_as_nsq_fails_them(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    sub = await subscriber(nsqd.tcp_port, "q", "c", rdy=0)
    assert await http.post("/topic/setmaxdepth?topic=q&max_depth=3") == (
        200,
        {"max_depth": 3, "policy": "refuse"},
    )
    await publish(nsqd.tcp_port, mpub("q", [b"1", b"2"]), pub("q", b"3"))
    wire = await AsyncWire.connect(nsqd.tcp_port)
    await wire.send(pub("q", b"4"))
    assert await wire.read_frame() == (
        ERR,
        b"E_PUB_FAILED PUB failed topic q is full: depth 3 + 1 > max depth 3",
    )
    await wire.expect_closed()
    assert await http.post("/pub?topic=q", b"4") == (503, {"message": "EXITING"})
    assert await http.post("/mpub?topic=q", b"4\n5") == (503, {"message": "EXITING"})
    await sub.send(b"RDY 1\n")
    _, _, msg_id, body = await read_message(sub)
    await sub.send(b"RDY 0\nFIN " + msg_id + b"\n")
    assert body == b"1"
    await http.settled("q", "c", depth=2)
    wire = await AsyncWire.connect(nsqd.tcp_port)
    await wire.send(mpub("q", [b"4", b"5"]))  # 2 + 2 > 3: the whole MPUB is refused
    assert (await wire.read_frame())[1].startswith(b"E_MPUB_FAILED MPUB failed topic q is full")
    await publish(nsqd.tcp_port, pub("q", b"4"))
    assert (await http.channel("q", "c"))["depth"] == 3
    assert (await http.topic("q"))["message_count"] == 4


async def test_drop_oldest_keeps_the_newest_messages(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    assert (await http.post("/topic/create?topic=d"))[0] == 200
    assert await http.post("/topic/setmaxdepth?topic=d&max_depth=3&policy=drop_oldest") == (
        200,
        {"max_depth": 3, "policy": "drop_oldest"},
    )
    await publish(nsqd.tcp_port, mpub("d", [b"m%d" % i for i in range(5)]))
    topic = await http.topic("d")
    assert (topic["depth"], topic["depth_dropped_count"]) == (3, 2)
    sub = await subscriber(nsqd.tcp_port, "d", "c", rdy=0)
    await http.settled("d", "c", depth=3)
    await publish(nsqd.tcp_port, pub("d", b"m5"), mpub("d", [b"m6", b"m7"]))
    doc = await http.channel("d", "c")
    assert (doc["depth"], doc["depth_dropped_count"]) == (3, 3)
    await sub.send(b"RDY 10\n")
    assert await read_bodies(sub, 3) == [b"m5", b"m6", b"m7"]
    await publish(nsqd.tcp_port, mpub("d", [b"n%d" % i for i in range(5)]))  # itself too many
    assert await read_bodies(sub, 3) == [b"n2", b"n3", b"n4"]
    await http.settled("d", "c")
    assert (await http.channel("d", "c"))["depth_dropped_count"] == 5


async def test_bad_ttls_and_depths_are_refused_and_change_nothing(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    assert (await http.post("/topic/create?topic=b"))[0] == 200
    cases = [
        ("/topic/setttl?topic=b", 400, "MISSING_ARG_TTL"),
        ("/topic/setttl?topic=b&ttl=", 400, "INVALID_TTL"),
        ("/topic/setttl?topic=b&ttl=abc", 400, "INVALID_TTL"),
        ("/topic/setttl?topic=b&ttl=-1", 400, "INVALID_TTL"),
        ("/topic/setttl?topic=b&ttl=-5s", 400, "INVALID_TTL"),
        ("/topic/setttl?topic=b&ttl=1.5", 400, "INVALID_TTL"),
        ("/topic/setttl?topic=b&ttl=90000h", 400, "INVALID_TTL"),
        ("/topic/setttl?topic=b&ttl=99999999999999999999999", 400, "INVALID_TTL"),
        ("/topic/setttl?topic=nope&ttl=1s", 404, "TOPIC_NOT_FOUND"),
        ("/topic/setttl?ttl=1s", 400, "MISSING_ARG_TOPIC"),
        ("/topic/setmaxdepth?topic=b", 400, "INVALID_MAX_DEPTH"),
        ("/topic/setmaxdepth?topic=b&max_depth=x", 400, "INVALID_MAX_DEPTH"),
        ("/topic/setmaxdepth?topic=b&max_depth=-3", 400, "INVALID_MAX_DEPTH"),
        ("/topic/setmaxdepth?topic=b&max_depth=3&policy=drop", 400, "INVALID_DEPTH_POLICY"),
        ("/topic/setmaxdepth?topic=b!&max_depth=3", 400, "INVALID_ARG_TOPIC"),
    ]
    for path, status, code in cases:
        assert await http.post(path) == (status, {"message": code}), path
    assert not (nsqd.broker.data_path / "features.json").exists()
    assert "ttl_ms" not in await http.topic("b")
    assert await http.post("/topic/setttl?topic=b&ttl=1h30m") == (200, {"ttl_ms": 5_400_000})
    # An ephemeral topic's settings are kept in memory only, as the topic itself.
    await subscriber(nsqd.tcp_port, "x#ephemeral", "c", rdy=0)
    assert (await http.post("/topic/setttl?topic=x%23ephemeral&ttl=5s"))[0] == 200
    assert (await http.topic("x#ephemeral"))["ttl_ms"] == 5000
    saved = json.loads((nsqd.broker.data_path / "features.json").read_bytes())
    assert list(saved["topics"]) == ["b"]
