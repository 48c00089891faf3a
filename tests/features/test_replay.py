"""Replay: /channel/setoffset (Youzan's form) and ``nsqpy channel setoffset`` move a cursor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aiohttp

from nsqpy.nsqd.server import NsqdServer
from nsqpy.storage import CursorFile
from nsqpy.testing import (
    AsyncWire,
    FakeClock,
    NsqdServers,
    WireClient,
    consume,
    cursor_path,
    dpub,
    http_get,
    nsqd_process,
    pub,
    publish,
    read_message,
    subscriber,
    wait_for,
)

from .conftest import ERR, Http, read_bodies

BODIES = [b"m%d" % i for i in range(10)]


def cursor_of(nsqd: NsqdServer, topic: str, channel: str) -> tuple[int, int]:
    state = CursorFile(cursor_path(nsqd.broker.data_path, topic, channel)).load()
    assert state is not None
    return state.confirmed, state.next_read


async def test_setoffset_replays_from_an_offset_a_time_and_either_end(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    wire = await AsyncWire.connect(nsqd.tcp_port)
    for body in BODIES:  # one second apart: m4 is published at start + 4 s
        await wire.send(pub("r", body))
        assert await wire.read_frame() == (0, b"OK")
        clock.advance_ms(1000)
    await wire.send(dpub("r", 1_800_000, b"later"))  # offset 10, deferred half an hour
    assert await wire.read_frame() == (0, b"OK")
    sub = await subscriber(nsqd.tcp_port, "r", "c", rdy=20)
    assert await read_bodies(sub, 10) == BODIES
    await http.settled("r", "c")
    assert (await http.channel("r", "c"))["deferred_count"] == 1

    status, doc = await http.post("/channel/setoffset?topic=r&channel=c", b"msgcount:7")
    assert (status, doc) == (
        200,
        {"topic": "r", "channel": "c", "partitions": [{"partition": 0, "offset": 7}]},
    )
    assert cursor_of(nsqd, "r", "c") == (7, 7)  # persisted at once
    assert await read_bodies(sub, 3) == BODIES[7:]
    await http.settled("r", "c")
    start_s = FakeClock().now // 1_000_000_000
    status, doc = await http.post(
        "/channel/setoffset?topic=r&channel=c&partition=0", b"timestamp:%d" % (start_s + 4)
    )
    assert status == 200 and doc["partitions"][0]["offset"] == 4
    assert await read_bodies(sub, 6) == BODIES[4:]
    await http.settled("r", "c")
    status, doc = await http.post("/channel/setoffset?topic=r&channel=c", b"special:-2")
    assert status == 200 and doc["partitions"][0]["offset"] == 0
    assert await read_bodies(sub, 10) == BODIES
    await http.settled("r", "c")
    # The DPUB'd message was read again from the log: still one deferred entry, not two.
    assert (await http.channel("r", "c"))["deferred_count"] == 1

    await sub.send(b"RDY 0\n")
    await publish(nsqd.tcp_port, pub("r", b"unread"))
    await http.settled("r", "c", depth=1)
    status, doc = await http.post("/channel/setoffset?topic=r&channel=c", b"special:-1")
    assert status == 200 and doc["partitions"][0]["offset"] == 12
    await http.settled("r", "c", depth=0)
    assert cursor_of(nsqd, "r", "c") == (12, 12)


async def test_a_reset_drops_in_flight_messages_and_late_fins_are_unknown(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    await publish(nsqd.tcp_port, pub("f", b"a"), pub("f", b"b"), pub("f", b"c"))
    sub = await subscriber(nsqd.tcp_port, "f", "c", rdy=3)
    ids = [(await read_message(sub)).id for _ in range(3)]
    doc = await http.channel("f", "c")
    assert doc["in_flight_count"] == 3 and doc["clients"][0]["in_flight_count"] == 3

    assert (await http.post("/channel/setoffset?topic=f&channel=c", b"special:-1"))[0] == 200
    doc = await http.channel("f", "c")
    assert (doc["in_flight_count"], doc["depth"], doc["clients"][0]["in_flight_count"]) == (0, 0, 0)
    await sub.send(b"FIN " + ids[1] + b"\n")  # a late FIN: NSQ's answer for an unknown ID
    assert await sub.read_frame() == (
        ERR,
        b"E_FIN_FAILED FIN " + ids[1] + b" failed ID not in flight",
    )
    await sub.send(b"REQ " + ids[2] + b" 0\n")
    assert await sub.read_frame() == (
        ERR,
        b"E_REQ_FAILED REQ " + ids[2] + b" failed ID not in flight",
    )

    # The connection and its RDY window are intact; the cursor was not touched by them.
    channel = nsqd.broker.topics["f"].channels["c"]
    assert (channel.cursor.confirmed, channel.cursor.ranges) == (3, [])
    await publish(nsqd.tcp_port, pub("f", b"d"))
    _, attempts, msg_id, body = await read_message(sub)
    assert (attempts, body) == (1, b"d")
    await sub.send(b"FIN " + msg_id + b"\n")
    await http.settled("f", "c")
    assert channel.cursor.confirmed == 4


async def test_bad_positions_and_partitions_change_nothing(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    await publish(nsqd.tcp_port, *(pub("b", body) for body in BODIES))
    sub = await subscriber(nsqd.tcp_port, "b", "c", rdy=4)
    got = [await read_message(sub) for _ in range(4)]
    await sub.send(b"RDY 0\n")
    for _, _, msg_id, _ in got:
        await sub.send(b"FIN " + msg_id + b"\n")
    assert [body for _, _, _, body in got] == BODIES[:4]
    await http.settled("b", "c", depth=6)
    channel = nsqd.broker.topics["b"].channels["c"]
    before = (channel.cursor.confirmed, channel.cursor.next_read, cursor_of(nsqd, "b", "c"))

    base = "/channel/setoffset?topic=b&channel=c"
    cases = [
        (base, b"", 406, "MSG_EMPTY"),
        (base, b"msgcount", 400, "INVALID_POSITION"),
        (base, b"msgcount:", 400, "INVALID_POSITION"),
        (base, b"msgcount:abc", 400, "INVALID_POSITION"),
        (base, b"msgcount:-1", 400, "INVALID_POSITION"),
        (base, b"msgcount:1:2", 400, "INVALID_POSITION"),
        (base, b"msgcount:1e3", 400, "INVALID_POSITION"),
        (base, b"msgcount:99999999999999999999", 400, "INVALID_POSITION"),
        (base, b"msgcount:11", 400, "OFFSET_OUT_OF_RANGE"),
        (base, b"virtual_queue:100", 400, "OFFSET_OUT_OF_RANGE"),
        (base, b"special:0", 400, "INVALID_POSITION"),
        (base, b"timestamp:-5", 400, "INVALID_POSITION"),
        (base, b"timestamp:1700000000000", 400, "INVALID_POSITION"),  # ms, not seconds
        (base, b"\xff\xfe:\x00", 400, "INVALID_POSITION"),
        (base, b"msgcount:1" + b" " * 2000, 400, "INVALID_POSITION"),
        (base + "&partition=abc", b"msgcount:1", 400, "INVALID_ARG_PARTITION"),
        (base + "&partition=-1", b"msgcount:1", 400, "INVALID_ARG_PARTITION"),
        (base + "&partition=1", b"msgcount:1", 404, "PARTITION_NOT_FOUND"),
        (base + "&partition=99999", b"msgcount:1", 400, "INVALID_ARG_PARTITION"),
        ("/channel/setoffset?topic=b", b"msgcount:1", 400, "MISSING_ARG_CHANNEL"),
        ("/channel/setoffset?topic=b&channel=nope", b"msgcount:1", 404, "CHANNEL_NOT_FOUND"),
        ("/channel/setoffset?topic=nope&channel=c", b"msgcount:1", 404, "TOPIC_NOT_FOUND"),
        ("/channel/setoffset?topic=b!&channel=c", b"msgcount:1", 400, "INVALID_ARG_TOPIC"),
        ("/channel/setoffset?topic=b&channel=c;", b"msgcount:1", 400, "INVALID_REQUEST"),
    ]
    for path, body, status, code in cases:
        assert await http.post(path, body) == (status, {"message": code}), (path, body)
    assert await http.get(base) == (405, {"message": "METHOD_NOT_ALLOWED"})
    after = (channel.cursor.confirmed, channel.cursor.next_read, cursor_of(nsqd, "b", "c"))
    assert after == before
    await sub.send(b"RDY 20\n")
    assert await read_bodies(sub, 6) == BODIES[4:]  # delivery goes on where it was


def test_replay_over_the_cli_persists_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with nsqd_process(data) as nsqd:
        c = WireClient(nsqd.tcp_port)
        c.send(b"  V2")
        for i in range(5):
            c.send(pub("cli", b"x%d" % i))
            assert c.read_frame() == (0, b"OK")
        got = consume(nsqd.tcp_port, "cli", "c", 5)
        assert got == [b"x%d" % i for i in range(5)]
        wait_for(lambda: channel_doc(nsqd.http, "cli", "c")["in_flight_count"] == 0)
        nsqpy = [str(Path(sys.executable).with_name("nsqpy")), "channel", "setoffset"]
        where = [f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}", "--topic=cli", "--channel=c"]
        done = subprocess.run(
            [*nsqpy, *where, "--oldest"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["partitions"] == [{"partition": 0, "offset": 0}]
        bad = subprocess.run(
            [*nsqpy, *where, "--offset=77"], capture_output=True, text=True, timeout=60
        )
        assert bad.returncode == 1 and "400 OFFSET_OUT_OF_RANGE" in bad.stderr
        assert channel_doc(nsqd.http, "cli", "c")["depth"] == 5
        nsqd.stop()
        nsqd.start()
        assert channel_doc(nsqd.http, "cli", "c")["depth"] == 5
        assert consume(nsqd.tcp_port, "cli", "c", 5) == [b"x%d" % i for i in range(5)]


def channel_doc(base: str, topic: str, channel: str) -> dict[str, object]:
    status, raw, _ = http_get(f"{base}/stats?format=json&topic={topic}&channel={channel}")
    assert status == 200
    (tdoc,) = json.loads(raw)["topics"]
    return tdoc["channels"][0]  # type: ignore[no-any-return]
