"""#ephemeral topics and channels, and the topic/channel name rules (SPEC 1.9)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import (
    AsyncWire,
    FakeClock,
    eventually,
    mpub,
    nsqd_options,
    pub,
    publisher,
    read_message,
    subscriber,
)

ERR = 1


@pytest.fixture
async def small(tmp_path: Path, clock: FakeClock) -> AsyncIterator[NsqdServer]:
    server = NsqdServer(nsqd_options(tmp_path, mem_queue_size=5), clock=clock)
    await server.start()
    yield server
    await server.stop()


async def http_post(server: NsqdServer, path: str, body: bytes = b"") -> tuple[int, bytes]:
    url = f"http://127.0.0.1:{server.http_port}{path}"
    async with aiohttp.ClientSession() as session, session.post(url, data=body) as resp:
        return resp.status, await resp.read()


async def stats(server: NsqdServer) -> dict[str, Any]:
    url = f"http://127.0.0.1:{server.http_port}/stats?format=json"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        doc: dict[str, object] = json.loads(await resp.read())
        return doc


def topic_names(doc: dict[str, Any]) -> list[str]:
    return [t["topic_name"] for t in doc["topics"]]


async def test_ephemeral_topic_stays_in_memory_and_is_gone_after_restart(
    tmp_path: Path, clock: FakeClock
) -> None:
    server = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await server.start()
    p = await publisher(server.tcp_port)
    await p.send(pub("mem#ephemeral", b"gone") + pub("disk", b"kept"))
    assert [await p.read_frame() for _ in range(2)] == [(0, b"OK"), (0, b"OK")]
    assert topic_names(await stats(server)) == ["disk", "mem#ephemeral"]
    topics_dir = tmp_path / "data" / "topics"
    assert sorted(p.name for p in topics_dir.iterdir()) == ["topic-disk"]
    await server.stop()
    assert "mem#ephemeral" not in (tmp_path / "data" / "nsqd.dat").read_text()

    again = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await again.start()
    try:
        assert topic_names(await stats(again)) == ["disk"]
        s = await subscriber(again.tcp_port, "mem#ephemeral", "c")
        with pytest.raises(TimeoutError):
            await s.read_frame(timeout=0.2)
    finally:
        await again.stop()


async def test_ephemeral_topic_goes_away_with_its_last_channel(nsqd: NsqdServer) -> None:
    a = await subscriber(nsqd.tcp_port, "t#ephemeral", "durable")
    b = await subscriber(nsqd.tcp_port, "t#ephemeral", "tmp#ephemeral")
    topic = nsqd.broker.topics["t#ephemeral"]
    await b.close()  # the ephemeral channel goes with its last client, the topic stays
    await eventually(lambda: "tmp#ephemeral" not in topic.channels)
    assert "t#ephemeral" in nsqd.broker.topics
    status, _ = await http_post(nsqd, "/channel/delete?topic=t%23ephemeral&channel=durable")
    assert status == 200
    await a.expect_closed()
    assert "t#ephemeral" not in nsqd.broker.topics
    assert topic.deleted


async def test_ephemeral_topic_holds_at_most_mem_queue_size(small: NsqdServer) -> None:
    p = await publisher(small.tcp_port)
    await p.send(mpub("e#ephemeral", [b"%d" % i for i in range(8)]))
    assert await p.read_frame() == (0, b"OK")
    (topic,) = (await stats(small))["topics"]
    assert (topic["depth"], topic["message_count"]) == (5, 8)
    s = await subscriber(small.tcp_port, "e#ephemeral", "c")
    # NSQ keeps what fits in the memory queue and drops the overflow (the newest).
    assert [(await read_message(s))[3] for _ in range(5)] == [b"0", b"1", b"2", b"3", b"4"]
    with pytest.raises(TimeoutError):
        await s.read_frame(timeout=0.2)


async def test_ephemeral_topic_channels_keep_the_first_and_drop_the_newest(
    small: NsqdServer,
) -> None:
    stuck = await subscriber(small.tcp_port, "e#ephemeral", "stuck", rdy=0)
    busy = await subscriber(small.tcp_port, "e#ephemeral", "busy", rdy=1)
    p = await publisher(small.tcp_port)
    for i in range(12):  # one at a time, more than --mem-queue-size=5
        await p.send(pub("e#ephemeral", b"%d" % i))
        assert await p.read_frame() == (0, b"OK")
        _, _, msg_id, body = await read_message(busy)
        assert body == b"%d" % i
        await busy.send(b"FIN " + msg_id + b"\n")
    topic = small.broker.topics["e#ephemeral"]
    # The topic forgot what its channels took; the stuck channel holds 5, not 12.
    assert topic.log.high_watermark - topic.log.low_watermark == 0
    stuck_channel = topic.channels["stuck"]
    assert stuck_channel.depth == 5 and stuck_channel.message_count == 12
    assert stuck_channel.dropped_count == 7
    await stuck.send(b"RDY 10\n")
    assert [(await read_message(stuck))[3] for _ in range(5)] == [b"0", b"1", b"2", b"3", b"4"]
    with pytest.raises(TimeoutError):
        await stuck.read_frame(timeout=0.2)
    (doc,) = [t for t in (await stats(small))["topics"] if t["topic_name"] == "e#ephemeral"]
    counts = {c["channel_name"]: c["message_count"] for c in doc["channels"]}
    assert counts == {"busy": 12, "stuck": 12}


async def test_ephemeral_topic_burst_beyond_mem_queue_size_keeps_the_first(
    small: NsqdServer,
) -> None:
    s = await subscriber(small.tcp_port, "burst#ephemeral", "c", rdy=0)
    p = await publisher(small.tcp_port)
    await p.send(mpub("burst#ephemeral", [b"%d" % i for i in range(8)]))
    assert await p.read_frame() == (0, b"OK")
    await p.send(pub("burst#ephemeral", b"late"))
    assert await p.read_frame() == (0, b"OK")
    await s.send(b"RDY 10\n")
    assert [(await read_message(s))[3] for _ in range(5)] == [b"0", b"1", b"2", b"3", b"4"]
    with pytest.raises(TimeoutError):
        await s.read_frame(timeout=0.2)


async def test_ephemeral_channel_of_a_durable_topic_is_bounded(small: NsqdServer) -> None:
    slow = await subscriber(small.tcp_port, "d", "slow#ephemeral", rdy=0)
    durable = await subscriber(small.tcp_port, "d", "all", rdy=0)
    p = await publisher(small.tcp_port)
    await p.send(mpub("d", [b"%d" % i for i in range(8)]))
    assert await p.read_frame() == (0, b"OK")
    channels = {c["channel_name"]: c for c in (await stats(small))["topics"][0]["channels"]}
    assert (channels["slow#ephemeral"]["depth"], channels["slow#ephemeral"]["message_count"]) == (
        5,
        8,
    )
    assert (channels["all"]["depth"], channels["all"]["message_count"]) == (8, 8)
    await slow.send(b"RDY 10\n")
    got = [(await read_message(slow))[3] for _ in range(5)]
    assert got == [b"0", b"1", b"2", b"3", b"4"]
    with pytest.raises(TimeoutError):
        await slow.read_frame(timeout=0.2)
    # Room again: the next message is taken.
    await p.send(pub("d", b"8"))
    assert await p.read_frame() == (0, b"OK")
    assert (await read_message(slow))[3] == b"8"
    await durable.send(b"RDY 20\n")
    assert [(await read_message(durable))[3] for _ in range(9)] == [b"%d" % i for i in range(9)]
    assert small.broker.topics["d"].channels["slow#ephemeral"].dropped_count == 3


VALID = ["a" * 64, "a" * 54 + "#ephemeral", "a.b_c-D9", "-", "..", "x#ephemeral"]
INVALID = ["a" * 65, "a" * 55 + "#ephemeral", "a:b", "a#eph", "#ephemeral", "a/b", "t\u00e9",
           "a#ephemeral#ephemeral", "a#ephemeralx", "a*", ""]  # fmt: skip


@pytest.mark.parametrize("name", VALID)
async def test_valid_names_on_tcp_and_http(nsqd: NsqdServer, name: str) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(pub(name, b"x"))
    assert await p.read_frame() == (0, b"OK")
    s = await AsyncWire.connect(nsqd.tcp_port)
    await s.send(f"SUB {name} {name}\n".encode())
    assert await s.read_frame() == (0, b"OK")
    assert (await http_post(nsqd, f"/pub?topic={quote(name)}", b"y"))[0] == 200
    await http_post(nsqd, "/topic/create?topic=ok")
    assert await http_post(nsqd, f"/channel/create?topic=ok&channel={quote(name)}") == (200, b"")
    assert name in nsqd.broker.topics and name in nsqd.broker.topics["ok"].channels


@pytest.mark.parametrize("name", INVALID)
async def test_invalid_names_on_tcp_and_http(nsqd: NsqdServer, name: str) -> None:
    raw = name.encode()
    if raw:
        wire = await AsyncWire.connect(nsqd.tcp_port)
        await wire.send(pub(name, b"x"))
        ftype, data = await wire.read_frame()
        assert ftype == ERR and data.startswith(b"E_BAD_TOPIC PUB topic name"), data
        await wire.expect_closed()
        wire = await AsyncWire.connect(nsqd.tcp_port)
        await wire.send(b"SUB ok " + raw + b"\n")
        ftype, data = await wire.read_frame()
        assert ftype == ERR and data.startswith(b"E_BAD_CHANNEL SUB channel name"), data
        await wire.expect_closed()
    q = quote(name)
    assert await http_post(nsqd, f"/pub?topic={q}", b"x") == (400, b'{"message":"INVALID_TOPIC"}')
    assert await http_post(nsqd, f"/topic/create?topic={q}") == (
        400,
        b'{"message":"INVALID_TOPIC"}',
    )
    await http_post(nsqd, "/topic/create?topic=ok")
    assert await http_post(nsqd, f"/channel/create?topic=ok&channel={q}") == (
        400,
        b'{"message":"INVALID_ARG_CHANNEL"}',
    )
    assert await http_post(nsqd, f"/channel/create?topic={q}&channel=c") == (
        400,
        b'{"message":"INVALID_ARG_TOPIC"}',
    )
    assert set(nsqd.broker.topics) <= {"ok"}
