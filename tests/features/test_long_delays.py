"""Long delays: DPUB and REQ for days (``--max-req-timeout`` raised), durable, off the window."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aiohttp

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import (
    AsyncWire,
    FakeClock,
    NsqdServers,
    WireClient,
    dpub,
    http_get,
    nsqd_process,
    pub,
    publish,
    read_message,
    subscriber,
    wait_for,
)

from .conftest import DAY_MS, ERR, Http

WEEK_MS = 7 * DAY_MS


async def state(http: Http, nsqd: NsqdServer) -> tuple[int, int]:
    """(in flight, deferred) after a timer pass at the fake clock's now."""
    nsqd.broker.scan()
    doc = await http.channel("slow", "c")
    return doc["in_flight_count"], doc["deferred_count"]


async def test_dpub_and_req_for_days_with_a_fake_clock(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    # Heartbeats read the same fake clock: a client silent for the days jumped over would be
    # closed, so its timeout is set beyond them.
    nsqd = await nsqd_servers.start(max_req_timeout_ms=WEEK_MS, client_timeout_ms=10 * WEEK_MS)
    http = Http(session, nsqd)
    await publish(nsqd.tcp_port, dpub("slow", 3 * DAY_MS, b"in three days"), pub("slow", b"now"))
    sub = await subscriber(nsqd.tcp_port, "slow", "c")
    _, attempts, msg_id, body = await read_message(sub)  # the deferred one does not block it
    assert (attempts, body) == (1, b"now")
    assert nsqd.broker.topics["slow"].channels["c"].cursor.confirmed == 1  # out of the window
    await sub.send(b"REQ " + msg_id + b" %d\n" % (2 * DAY_MS))
    await http.settled("slow", "c")
    assert await state(http, nsqd) == (0, 2)

    clock.advance_ms(2 * DAY_MS - 60_000)
    assert await state(http, nsqd) == (0, 2)  # a minute early: still deferred
    clock.advance_ms(120_000)
    _, attempts, again, body = await read_message(sub)
    assert (attempts, again, body) == (2, msg_id, b"now")
    await sub.send(b"FIN " + again + b"\n")
    await http.settled("slow", "c")
    assert await state(http, nsqd) == (0, 1)
    clock.advance_ms(DAY_MS)
    _, attempts, _, body = await read_message(sub)
    assert (attempts, body) == (1, b"in three days")

    # The raised limit is the new bound: DPUB beyond it is NSQ's fatal E_INVALID, HTTP's 400.
    status, _ = await http.post(f"/pub?topic=slow&defer={3 * DAY_MS}", b"http")
    assert status == 200
    assert await http.post(f"/pub?topic=slow&defer={WEEK_MS + 1}", b"x") == (
        400,
        {"message": "INVALID_DEFER"},
    )
    wire = await AsyncWire.connect(nsqd.tcp_port)
    await wire.send(dpub("slow", WEEK_MS + 1, b"x"))
    assert await wire.read_frame() == (
        ERR,
        b"E_INVALID DPUB timeout %d out of range 0-%d" % (WEEK_MS + 1, WEEK_MS),
    )
    await wire.expect_closed()


async def test_nsq_defaults_stay_an_hour(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    wire = await AsyncWire.connect(nsqd.tcp_port)
    await wire.send(dpub("slow", 3_600_001, b"x"))
    assert await wire.read_frame() == (
        ERR,
        b"E_INVALID DPUB timeout 3600001 out of range 0-3600000",
    )
    assert await http.post("/pub?topic=slow&defer=3600001", b"x") == (
        400,
        {"message": "INVALID_DEFER"},
    )


async def test_multi_day_delays_survive_a_restart(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    # (as above: heartbeats read the fake clock, so a client silent for the days jumped
    # over would be closed before the message that came due reached it)
    limits = {"max_req_timeout_ms": WEEK_MS, "client_timeout_ms": 10 * WEEK_MS}
    nsqd = await nsqd_servers.start(**limits)
    await publish(nsqd.tcp_port, dpub("slow", 3 * DAY_MS, b"dpub"), pub("slow", b"req"))
    sub = await subscriber(nsqd.tcp_port, "slow", "c")
    _, _, msg_id, _ = await read_message(sub)
    await sub.send(b"REQ " + msg_id + b" %d\n" % (2 * DAY_MS))
    await Http(session, nsqd).settled("slow", "c")

    nsqd = await nsqd_servers.restart(nsqd, **limits)
    http = Http(session, nsqd)
    assert await state(http, nsqd) == (0, 2)
    sub = await subscriber(nsqd.tcp_port, "slow", "c")
    clock.advance_ms(2 * DAY_MS + 1)
    assert (await read_message(sub))[1::2] == (2, b"req")
    clock.advance_ms(DAY_MS)
    assert (await read_message(sub))[1::2] == (1, b"dpub")


def test_a_real_nsqd_keeps_days_long_delays_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with nsqd_process(data, "--max-req-timeout=72h") as nsqd:
        c = WireClient(nsqd.tcp_port)
        c.send(b"  V2")
        for command in (
            pub("slow", b"req-me"),
            dpub("slow", 48 * 3_600_000, b"far"),
            dpub("slow", 1500, b"soon"),
        ):
            c.send(command)
            assert c.read_frame() == (0, b"OK")
        c.send(b"SUB slow c\nRDY 5\n")
        assert c.read_frame() == (0, b"OK")
        ftype, data_ = c.read_frame()
        assert ftype == 2 and data_[26:] == b"req-me"
        c.send(b"REQ " + data_[10:26] + b" %d\n" % (48 * 3_600_000))
        wait_for(lambda: channel(nsqd.http)["deferred_count"] == 3)
        c.close()
        nsqd.stop()
        nsqd.start()
        assert channel(nsqd.http)["deferred_count"] == 3
        c = WireClient(nsqd.tcp_port, timeout=15)
        c.send(b"  V2SUB slow c\nRDY 5\n")
        assert c.read_frame() == (0, b"OK")
        ftype, data_ = c.read_frame()  # the short one comes due; the days-long ones wait
        assert ftype == 2 and data_[26:] == b"soon"
        doc = channel(nsqd.http)
        assert (doc["in_flight_count"], doc["deferred_count"]) == (1, 2)


def test_the_limit_is_bounded(tmp_path: Path) -> None:
    nsqd = Path(sys.executable).with_name("nsqd")
    done = subprocess.run(
        [str(nsqd), "--max-req-timeout=90000h", f"--data-path={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--max-req-timeout must be in [0, 3650 days]" in done.stderr


def channel(base: str) -> dict[str, int]:
    status, raw, _ = http_get(f"{base}/stats?format=json&topic=slow&channel=c")
    assert status == 200
    return json.loads(raw)["topics"][0]["channels"][0]  # type: ignore[no-any-return]
