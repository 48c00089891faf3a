"""e2e_processing_latency: collected only when percentiles are set, over a sliding window."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from nsqpy.broker.e2e import LatencyWindow, latency_result
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import (
    FakeClock,
    eventually,
    nsqd_options,
    pub,
    publisher,
    read_message,
    subscriber,
)

MS = 1_000_000
WINDOW = 10 * 60_000 * MS  # the default --e2e-processing-latency-window-time


def test_percentiles_over_the_window_and_the_window_slides() -> None:
    now = 0
    window = LatencyWindow(WINDOW, [0.5, 0.99], now)
    for ms in range(1, 101):
        window.insert(ms * MS, now)
    result = latency_result([window], [0.5, 0.99], now)
    assert result["count"] == 100
    percentiles = result["percentiles"]
    assert isinstance(percentiles, list)
    (p99, p50) = percentiles
    assert p99["quantile"] == 0.99 and abs(p99["value"] - 99 * MS) <= 0.01 * 99 * MS
    assert p50["quantile"] == 0.5 and abs(p50["value"] - 50 * MS) <= 0.01 * 50 * MS
    now += WINDOW // 2 + 1  # one half later: the old half still counts
    window.insert(7 * MS, now)
    assert latency_result([window], [0.5], now)["count"] == 101
    now += WINDOW // 2  # one more: the first hundred have left the window
    result = latency_result([window], [0.5], now)
    assert result == {"count": 1, "percentiles": [{"quantile": 0.5, "value": 7.0 * MS}]}
    now += WINDOW * 5  # a long idle time empties it
    assert latency_result([window], [0.5], now)["count"] == 0


def test_memory_is_bounded_by_the_latency_range_not_the_rate() -> None:
    window = LatencyWindow(WINDOW, [0.9], 0)
    for i in range(200_000):
        window.insert((i * 7919) % (3600 * 1000 * MS), 0)  # up to an hour, 200k samples
    assert window.buckets() < 3000
    assert latency_result([window], [0.9], 0)["count"] == 200_000


def test_no_percentiles_means_nothing_is_collected() -> None:
    assert latency_result([], [], 0) == {"count": 0, "percentiles": None}


async def stats(server: NsqdServer) -> dict[str, Any]:
    url = f"http://127.0.0.1:{server.http_port}/stats?format=json"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        doc: dict[str, object] = json.loads(await resp.read())
        return doc


async def finish_one(server: NsqdServer, clock: FakeClock, after_ms: int) -> None:
    s = await subscriber(server.tcp_port, "t", "c", rdy=1)
    p = await publisher(server.tcp_port)
    await p.send(pub("t", b"x"))
    assert await p.read_frame() == (0, b"OK")
    _, _, msg_id, _ = await read_message(s)
    clock.advance_ms(after_ms)
    await s.send(b"FIN " + msg_id + b"\n")
    channel = server.broker.topics["t"].channels["c"]
    await eventually(lambda: channel.finish_count == 1)


async def test_stats_report_the_window_with_a_fake_clock(tmp_path: Path, clock: FakeClock) -> None:
    opts = nsqd_options(
        tmp_path,
        e2e_processing_latency_percentiles=[0.5, 0.99],
        e2e_processing_latency_window_time_ms=60_000,
    )
    server = NsqdServer(opts, clock=clock)
    await server.start()
    try:
        await finish_one(server, clock, 250)
        (topic,) = (await stats(server))["topics"]
        want = {
            "count": 1,
            "percentiles": [
                {"quantile": 0.99, "value": 250.0 * MS},
                {"quantile": 0.5, "value": 250.0 * MS},
            ],
        }
        assert topic["channels"][0]["e2e_processing_latency"] == want
        assert topic["e2e_processing_latency"] == want
        clock.advance_ms(60_001)  # a whole window later: gone
        (topic,) = (await stats(server))["topics"]
        assert topic["channels"][0]["e2e_processing_latency"]["count"] == 0
    finally:
        await server.stop()


async def test_without_percentiles_channels_keep_no_samples(
    tmp_path: Path, clock: FakeClock
) -> None:
    server = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await server.start()
    try:
        await finish_one(server, clock, 5)
        assert server.broker.topics["t"].channels["c"].e2e is None
        (topic,) = (await stats(server))["topics"]
        none = {"count": 0, "percentiles": None}
        assert topic["e2e_processing_latency"] == none
        assert topic["channels"][0]["e2e_processing_latency"] == none
    finally:
        await server.stop()
