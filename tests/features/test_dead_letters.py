"""Dead letters: after a channel's last attempt a message goes to ``<topic>.dead`` with its story."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from nsqpy.spark.wire import decode_chunk
from nsqpy.testing import (
    FakeClock,
    NsqdServers,
    WireClient,
    eventually,
    http_get,
    http_request,
    nsqd_process,
    pub,
    publish,
    read_message,
    subscriber,
    wait_for,
)

from .conftest import Http

LONG = "t" * 60  # "<60 chars>.dead" is longer than NSQ's 64-character limit


async def test_requeued_and_timed_out_messages_go_to_the_dead_letter_topic(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    sub = await subscriber(nsqd.tcp_port, "orders", "billing", rdy=1, msg_timeout_ms=1000)
    audit = await subscriber(nsqd.tcp_port, "orders", "audit", rdy=10)
    status, doc = await http.post(
        "/channel/setmaxattempts?topic=orders&channel=billing&max_attempts=2"
    )
    assert (status, doc) == (200, {"max_attempts": 2, "dead_letter_topic": "orders.dead"})

    await publish(nsqd.tcp_port, pub("orders", b"a"))
    first = await read_message(sub)
    assert first.attempts == 1 and first.body == b"a"
    await sub.send(b"REQ " + first.id + b" 0\n")
    again = await read_message(sub)
    assert (again.attempts, again.id) == (2, first.id)
    await sub.send(b"REQ " + first.id + b" 60000\n")  # the last attempt: a delay changes nothing

    await publish(nsqd.tcp_port, pub("orders", b"b"))
    b1 = await read_message(sub)
    assert (b1.attempts, b1.body) == (1, b"b")
    clock.advance_ms(1500)  # the 1 s message timeout passes: requeued by the ticker
    b2 = await read_message(sub)
    assert (b2.attempts, b2.id) == (2, b1.id)
    clock.advance_ms(1500)  # timed out on its last attempt

    async def two_dead() -> bool:
        return bool((await http.channel("orders", "billing")).get("dead_letter_count") == 2)

    await eventually(two_dead, what="two dead letters")
    await http.settled("orders", "billing")
    billing = await http.channel("orders", "billing")
    assert (billing["deferred_count"], billing["requeue_count"], billing["timeout_count"]) == (
        0,
        2,
        2,
    )
    assert (billing["max_attempts"], billing["dead_letter_topic"]) == (2, "orders.dead")
    assert nsqd.broker.topics["orders"].channels["billing"].cursor.confirmed == 2

    dead = nsqd.broker.topics["orders.dead"]
    records = dead.log.read(0, 10)
    assert [r.body for r in records] == [b"a", b"b"]
    headers = [json.loads(r.headers) for r in records]
    assert headers[0] == {
        "dead_letter_reason": "requeued",
        "dead_letter_attempts": "2",
        "dead_letter_topic": "orders",
        "dead_letter_channel": "billing",
        "dead_letter_id": first.id.decode(),
        "dead_letter_timestamp": str(FakeClock().now),
    }
    assert (headers[1]["dead_letter_reason"], headers[1]["dead_letter_attempts"]) == (
        "timeout",
        "2",
    )
    reader = await subscriber(nsqd.tcp_port, "orders.dead", "inspect")
    got = [await read_message(reader) for _ in range(2)]
    assert [(m.attempts, m.body) for m in got] == [(1, b"a"), (1, b"b")]
    # Another channel of the topic keeps NSQ's behaviour.
    assert [(await read_message(audit)).body for _ in range(2)] == [b"a", b"b"]
    assert "dead_letter_count" not in await http.channel("orders", "audit")


async def test_the_flag_default_and_a_channel_setting_survive_a_restart(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start(max_attempts=1, dead_letter_suffix="_dlq")
    http = Http(session, nsqd)
    c = await subscriber(nsqd.tcp_port, "t", "c", rdy=1)
    c2 = await subscriber(nsqd.tcp_port, "t", "c2", rdy=1)
    assert (await http.post("/channel/setmaxattempts?topic=t&channel=c2&max_attempts=0"))[0] == 200
    await publish(nsqd.tcp_port, pub("t", b"x"))
    _, _, msg_id, _ = await read_message(c)
    await c.send(b"REQ " + msg_id + b" 0\n")  # attempt 1 of 1: dead
    _, _, msg_id2, _ = await read_message(c2)
    await c2.send(b"REQ " + msg_id2 + b" 0\n")  # no limit on c2
    assert (await read_message(c2)).attempts == 2
    await http.settled("t", "c")
    assert (await http.channel("t", "c"))["dead_letter_count"] == 1

    nsqd = await nsqd_servers.restart(nsqd, max_attempts=1, dead_letter_suffix="_dlq")
    http = Http(session, nsqd)
    assert (await http.channel("t", "c"))["max_attempts"] == 1
    c2 = await subscriber(nsqd.tcp_port, "t", "c2", rdy=1)
    _, attempts, msg_id2, _ = await read_message(c2)
    await c2.send(b"REQ " + msg_id2 + b" 0\n")
    assert (await read_message(c2)).attempts == attempts + 1  # still requeued: the 0 was kept
    # The dead-letter topic kept the message; its channels do not chain dead letters.
    dlq = await subscriber(nsqd.tcp_port, "t_dlq", "ops", rdy=1)
    _, attempts, dead_id, body = await read_message(dlq)
    assert (attempts, body) == (1, b"x")
    await dlq.send(b"REQ " + dead_id + b" 0\n")
    assert (await read_message(dlq))[1:3] == (2, dead_id)
    assert "t_dlq_dlq" not in nsqd.broker.topics


async def test_bad_settings_are_refused_and_change_nothing(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    await subscriber(nsqd.tcp_port, "d", "c", rdy=0)
    await subscriber(nsqd.tcp_port, LONG, "c", rdy=0)
    base = "/channel/setmaxattempts?topic=d&channel=c"
    cases = [
        (base, 400, "INVALID_MAX_ATTEMPTS"),
        (base + "&max_attempts=", 400, "INVALID_MAX_ATTEMPTS"),
        (base + "&max_attempts=abc", 400, "INVALID_MAX_ATTEMPTS"),
        (base + "&max_attempts=-1", 400, "INVALID_MAX_ATTEMPTS"),
        (base + "&max_attempts=1.5", 400, "INVALID_MAX_ATTEMPTS"),
        (base + "&max_attempts=65536", 400, "INVALID_MAX_ATTEMPTS"),
        (base + "&max_attempts=3&dead_letter_topic=bad!", 400, "INVALID_DEAD_LETTER_TOPIC"),
        (base + "&max_attempts=3&dead_letter_topic=d", 400, "INVALID_DEAD_LETTER_TOPIC"),
        (
            f"/channel/setmaxattempts?topic={LONG}&channel=c&max_attempts=3",
            400,
            "INVALID_DEAD_LETTER_TOPIC",
        ),
        ("/channel/setmaxattempts?topic=d&max_attempts=3", 400, "MISSING_ARG_CHANNEL"),
        ("/channel/setmaxattempts?topic=d&channel=zz&max_attempts=3", 404, "CHANNEL_NOT_FOUND"),
        ("/channel/setmaxattempts?topic=zz&channel=c&max_attempts=3", 404, "TOPIC_NOT_FOUND"),
    ]
    for path, status, code in cases:
        assert await http.post(path) == (status, {"message": code}), path
    assert not (nsqd.broker.data_path / "features.json").exists()
    assert nsqd.broker.topics["d"].channels["c"].policy.max_attempts == 0
    status, doc = await http.post(
        f"/channel/setmaxattempts?topic={LONG}&channel=c&max_attempts=3&dead_letter_topic=short"
    )
    assert (status, doc) == (200, {"max_attempts": 3, "dead_letter_topic": "short"})


def test_dead_letters_of_a_real_nsqd_survive_its_restart(tmp_path: Path) -> None:
    with nsqd_process(tmp_path / "data", "--max-attempts=2") as nsqd:
        c = WireClient(nsqd.tcp_port)
        c.send(b"  V2")
        c.send(pub("jobs", b"poison"))
        assert c.read_frame() == (0, b"OK")
        c.send(b"SUB jobs w\nRDY 1\n")
        assert c.read_frame() == (0, b"OK")
        for attempt in (1, 2):
            ftype, data = c.read_frame()
            assert ftype == 2 and data[8:10] == attempt.to_bytes(2, "big")
            c.send(b"REQ " + data[10:26] + b" 0\n")
        wait_for(lambda: channel(nsqd.http, "jobs", "w").get("dead_letter_count") == 1)
        c.close()
        nsqd.stop()
        nsqd.start()
        assert channel(nsqd.http, "jobs", "w")["depth"] == 0
        _, raw, _ = http_get(f"{nsqd.http}/stats?format=json&topic=jobs.dead")
        (dead,) = json.loads(raw)["topics"]
        assert (dead["depth"], dead["message_count"]) == (1, 0)  # buffered for its first channel
        status, body, _ = http_request("GET", f"{nsqd.http}/log/read?topic=jobs.dead&offset=0")
        assert status == 200
        chunk = decode_chunk(body)
        assert chunk.count == 1 and chunk.bodies.to_pylist() == [b"poison"]
        headers = json.loads(chunk.headers.to_pylist()[0])
        assert (headers["dead_letter_reason"], headers["dead_letter_attempts"]) == ("requeued", "2")


def channel(base: str, topic: str, name: str) -> dict[str, object]:
    status, raw, _ = http_get(f"{base}/stats?format=json&topic={topic}&channel={name}")
    assert status == 200
    (tdoc,) = json.loads(raw)["topics"]
    return tdoc["channels"][0]  # type: ignore[no-any-return]


async def test_deleting_a_channel_or_topic_forgets_its_settings(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    assert (await http.post("/topic/create?topic=gone"))[0] == 200
    assert (await http.post("/channel/create?topic=gone&channel=c"))[0] == 200
    assert (await http.post("/channel/setmaxattempts?topic=gone&channel=c&max_attempts=3"))[
        0
    ] == 200
    assert (await http.post("/topic/setttl?topic=gone&ttl=1m"))[0] == 200
    saved = nsqd.broker.data_path / "features.json"
    assert json.loads(saved.read_bytes())["topics"]["gone"]["channels"]["c"]["max_attempts"] == 3
    assert (await http.post("/channel/delete?topic=gone&channel=c"))[0] == 200
    assert json.loads(saved.read_bytes())["topics"]["gone"]["channels"] == {}
    assert (await http.post("/channel/create?topic=gone&channel=c"))[0] == 200
    assert "max_attempts" not in await http.channel("gone", "c")
    assert (await http.post("/topic/delete?topic=gone"))[0] == 200
    assert json.loads(saved.read_bytes())["topics"] == {}
