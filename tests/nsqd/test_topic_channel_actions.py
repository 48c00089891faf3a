"""Delete, pause and empty of topics and channels, seen by connected clients (SPEC 2.2, 9)."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import (
    FakeClock,
    cursor_path,
    mpub,
    nsqd_options,
    pub,
    publisher,
    read_message,
    subscriber,
)

from .conftest import post

ERR = 1


async def topic_stats(http: tuple[aiohttp.ClientSession, str], topic: str) -> dict[str, object]:
    session, base = http
    async with session.get(f"{base}/stats?format=json&topic={topic}") as resp:
        (doc,) = json.loads(await resp.read())["topics"]
        return doc  # type: ignore[no-any-return]


async def test_channel_delete_closes_its_clients_only(
    http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer
) -> None:
    gone1 = await subscriber(nsqd.tcp_port, "cd", "gone")
    gone2 = await subscriber(nsqd.tcp_port, "cd", "gone")
    stays = await subscriber(nsqd.tcp_port, "cd", "stays")
    cursor = cursor_path(nsqd.broker.data_path, "cd", "gone")
    assert cursor.exists()
    assert await post(http, "/channel/delete?topic=cd&channel=gone") == (200, b"")
    await gone1.expect_closed()
    await gone2.expect_closed()
    assert not cursor.exists()
    assert await post(http, "/pub?topic=cd", b"after") == (200, b"OK")
    assert (await read_message(stays))[3] == b"after"
    assert await post(http, "/channel/delete?topic=cd&channel=gone") == (
        404,
        b'{"message":"CHANNEL_NOT_FOUND"}',
    )


async def test_topic_delete_closes_subscribers_and_drops_its_data(
    http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer
) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(mpub("td", [b"old1", b"old2"]))
    assert await p.read_frame() == (0, b"OK")
    a = await subscriber(nsqd.tcp_port, "td", "a", rdy=0)
    b = await subscriber(nsqd.tcp_port, "td", "b", rdy=0)
    topic_dir = nsqd.broker.data_path / "topics" / "topic-td"
    assert topic_dir.exists()
    assert await post(http, "/topic/delete?topic=td") == (200, b"")
    await a.expect_closed()
    await b.expect_closed()
    # Only the offset reservation stays behind (the topic made again goes on above it).
    left = sorted(str(f.relative_to(topic_dir)) for f in topic_dir.rglob("*") if f.is_file())
    assert left == ["p0/reserved"] and "td" not in nsqd.broker.topics
    assert '"td"' not in (nsqd.broker.data_path / "nsqd.dat").read_text()
    # The producer's connection stays; publishing again makes a new, empty topic.
    await p.send(pub("td", b"new"))
    assert await p.read_frame() == (0, b"OK")
    c = await subscriber(nsqd.tcp_port, "td", "a")
    assert (await read_message(c))[3] == b"new"
    assert await post(http, "/topic/delete?topic=nope") == (404, b'{"message":"TOPIC_NOT_FOUND"}')


async def test_topic_pause_holds_new_messages_for_every_channel(
    http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer
) -> None:
    one = await subscriber(nsqd.tcp_port, "tp", "one", rdy=0)
    two = await subscriber(nsqd.tcp_port, "tp", "two", rdy=0)
    assert await post(http, "/pub?topic=tp", b"before") == (200, b"OK")
    assert await post(http, "/topic/pause?topic=tp") == (200, b"")
    assert await post(http, "/mpub?topic=tp", b"held1\nheld2") == (200, b"OK")
    doc = await topic_stats(http, "tp")
    assert (doc["paused"], doc["depth"]) == (True, 2)
    assert [c["depth"] for c in doc["channels"]] == [1, 1]  # type: ignore[attr-defined]
    await one.send(b"RDY 10\n")
    await two.send(b"RDY 10\n")
    # What the channels had before the pause still flows; what came after is held.
    assert (await read_message(one))[3] == b"before"
    assert (await read_message(two))[3] == b"before"
    for wire in (one, two):
        with pytest.raises(TimeoutError):
            await wire.read_frame(timeout=0.2)
    late = await subscriber(nsqd.tcp_port, "tp", "late")  # a new channel also gets the held ones
    assert await post(http, "/topic/unpause?topic=tp") == (200, b"")
    for wire in (one, two, late):
        assert [(await read_message(wire))[3] for _ in range(2)] == [b"held1", b"held2"]
    doc = await topic_stats(http, "tp")
    assert (doc["paused"], doc["depth"]) == (False, 0)
    assert [c["message_count"] for c in doc["channels"]] == [2, 3, 3]  # type: ignore[attr-defined]


async def test_topic_pause_and_what_it_holds_survive_a_restart(
    tmp_path: Path, clock: FakeClock
) -> None:
    server = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await server.start()
    await subscriber(server.tcp_port, "tr", "c", rdy=0)
    p = await publisher(server.tcp_port)
    await p.send(pub("tr", b"before"))
    assert await p.read_frame() == (0, b"OK")
    server.broker.topics["tr"].pause()
    await p.send(pub("tr", b"held"))
    assert await p.read_frame() == (0, b"OK")
    server.broker.save_metadata()
    await server.stop()
    again = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await again.start()
    try:
        topic = again.broker.topics["tr"]
        assert topic.paused and topic.depth == 1
        s = await subscriber(again.tcp_port, "tr", "c")
        assert (await read_message(s))[3] == b"before"
        with pytest.raises(TimeoutError):
            await s.read_frame(timeout=0.2)
        topic.unpause()
        again.broker.pump([topic])
        again.after_change()
        assert (await read_message(s))[3] == b"held"
    finally:
        await again.stop()


async def test_channel_empty_drops_backlog_and_in_flight(
    http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer
) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(mpub("ce", [b"%d" % i for i in range(5)]))
    assert await p.read_frame() == (0, b"OK")
    s = await subscriber(nsqd.tcp_port, "ce", "c", rdy=2)
    ids = [(await read_message(s))[2] for _ in range(2)]
    doc = await topic_stats(http, "ce")
    assert [(c["depth"], c["in_flight_count"]) for c in doc["channels"]] == [(3, 2)]  # type: ignore[attr-defined]
    assert await post(http, "/channel/empty?topic=ce&channel=c") == (200, b"")
    doc = await topic_stats(http, "ce")
    channel = doc["channels"][0]  # type: ignore[index]
    assert (
        channel["depth"],
        channel["in_flight_count"],
        channel["clients"][0]["in_flight_count"],
    ) == (0, 0, 0)
    await s.send(b"FIN " + ids[0] + b"\n")
    ftype, data = await s.read_frame()
    assert ftype == ERR and data.startswith(b"E_FIN_FAILED")
    # The client's RDY window is open again: new messages flow.
    await p.send(mpub("ce", [b"n1", b"n2"]))
    assert await p.read_frame() == (0, b"OK")
    assert [(await read_message(s))[3] for _ in range(2)] == [b"n1", b"n2"]


async def test_topic_empty_drops_what_the_topic_holds(
    http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer
) -> None:
    assert await post(http, "/mpub?topic=te", b"a\nb\nc") == (200, b"OK")
    assert (await topic_stats(http, "te"))["depth"] == 3
    assert await post(http, "/topic/empty?topic=te") == (200, b"")
    assert (await topic_stats(http, "te"))["depth"] == 0
    assert await post(http, "/pub?topic=te", b"d") == (200, b"OK")
    s = await subscriber(nsqd.tcp_port, "te", "first")
    assert (await read_message(s))[3] == b"d"  # the first channel gets only what came after
    with pytest.raises(TimeoutError):
        await s.read_frame(timeout=0.2)
    # With channels, emptying the topic leaves the channels' messages alone...
    await s.send(b"RDY 0\n")
    assert await post(http, "/pub?topic=te", b"e") == (200, b"OK")
    assert await post(http, "/topic/empty?topic=te") == (200, b"")
    # ...but drops what a pause holds at the topic.
    assert await post(http, "/topic/pause?topic=te") == (200, b"")
    assert await post(http, "/pub?topic=te", b"held") == (200, b"OK")
    assert await post(http, "/topic/empty?topic=te") == (200, b"")
    assert await post(http, "/topic/unpause?topic=te") == (200, b"")
    await s.send(b"RDY 10\n")
    got = []
    while True:
        try:
            got.append((await s.read_frame(timeout=0.3))[1][26:])
        except TimeoutError:
            break
    assert got == [b"e"]
    assert await post(http, "/topic/empty?topic=bad!") == (400, b'{"message":"INVALID_TOPIC"}')
    assert await post(http, "/topic/empty?topic=nope") == (404, b'{"message":"TOPIC_NOT_FOUND"}')
    assert await post(http, "/topic/empty") == (400, b'{"message":"MISSING_ARG_TOPIC"}')


async def test_a_bad_topic_name_is_invalid_topic_on_topic_routes_and_invalid_arg_topic_on_channel_ones(
    http: tuple[aiohttp.ClientSession, str],
) -> None:
    assert await post(http, "/topic/create?topic=bad!") == (400, b'{"message":"INVALID_TOPIC"}')
    for route in ("/channel/create", "/channel/delete", "/channel/empty", "/channel/pause"):
        assert await post(http, f"{route}?topic=bad!&channel=c") == (
            400,
            b'{"message":"INVALID_ARG_TOPIC"}',
        ), route
    assert await post(http, "/channel/create?channel=c") == (
        400,
        b'{"message":"MISSING_ARG_TOPIC"}',
    )
