"""``GET /metrics`` on nsqd and nsqlookupd: Prometheus' own text parser reads it, labels name
the topic and channel, and the counters move with the traffic.
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from nsqpy.lookupd.app import NsqLookupd, NsqLookupdOptions
from nsqpy.metrics.exposition import Family, render
from nsqpy.nsqd.server import NsqdServer
from nsqpy.options import NsqdOptions
from nsqpy.testing import AsyncWire

from .conftest import requeue_one

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(http: aiohttp.ClientSession, port: int) -> tuple[dict[str, str], Samples]:
    """(family name -> type, (sample name, labels) -> value), through prometheus_client."""
    async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await resp.text()
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return types, samples


def at(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def test_nsqd_metrics_move_with_traffic(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    nsqd = NsqdServer(
        NsqdOptions(
            tcp_address="127.0.0.1:0",
            http_address="127.0.0.1:0",
            data_path=str(tmp_path),
            broadcast_address="127.0.0.1",
        )
    )
    await nsqd.start()
    try:
        base = f"http://127.0.0.1:{nsqd.http_port}"
        types, before = await scrape(http, nsqd.http_port)
        assert types["nsqd_topic_messages"] == "counter"
        assert types["nsqd_channel_depth"] == "gauge"
        assert at(before, "nsqd_topic_messages_total", topic="orders") == 0
        async with http.post(f"{base}/mpub?topic=orders", data=b"a\nbb\nccc") as resp:
            assert resp.status == 200
        wire = await requeue_one(nsqd.tcp_port)
        await wire.read_frame()  # the same message or the next: keep it in flight
        async with http.post(f"{base}/pub?topic=orders", data=b"dddd") as resp:
            assert resp.status == 200
        _, after = await scrape(http, nsqd.http_port)
        topic = {"topic": "orders"}
        channel = {"topic": "orders", "channel": "billing"}
        assert at(after, "nsqd_topic_messages_total", **topic) == 4
        assert at(after, "nsqd_topic_message_bytes_total", **topic) == 10
        assert at(after, "nsqd_channel_requeued_total", **channel) == 1
        assert at(after, "nsqd_channel_messages_total", **channel) >= 2
        assert at(after, "nsqd_channel_in_flight", **channel) == 1
        assert at(after, "nsqd_channel_clients", **channel) == 1
        assert at(after, "nsqd_channel_depth", **channel) == 3
        assert at(after, "nsqd_topics") == 1 and at(after, "nsqd_clients") == 1
        assert at(after, "nsqd_healthy") == 1
        assert at(after, "nsqd_info", version="1.3.0", broadcast_address="127.0.0.1") == 1
        pubs = at(after, "nsqd_http_requests_total", path="/pub", code="200")
        assert pubs == at(before, "nsqd_http_requests_total", path="/pub", code="200") + 1
        assert at(after, "nsqd_http_requests_total", path="/metrics", code="200") >= 1
        async with http.get(f"{base}/no/such/path?x=%zz") as resp:
            assert resp.status == 404
        _, last = await scrape(http, nsqd.http_port)
        assert at(last, "nsqd_http_requests_total", path="unmatched", code="404") == 1
    finally:
        await nsqd.stop()


async def test_lookupd_metrics_move_with_traffic(http: aiohttp.ClientSession) -> None:
    lookupd = NsqLookupd(
        NsqLookupdOptions(
            tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", broadcast_address="127.0.0.1"
        )
    )
    await lookupd.start()
    try:
        _, before = await scrape(http, lookupd.http_port)
        assert at(before, "nsqlookupd_producers") == 0
        wire = await AsyncWire.connect(lookupd.tcp_port, magic=False)
        body = json.dumps(
            {"tcp_port": 1, "http_port": 2, "version": "1.3.0", "broadcast_address": "a"}
        ).encode()
        await wire.send(b"  V1IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        await wire.send(b"REGISTER orders billing\nREGISTER orders audit\nPING\n")
        replies = b""
        while replies.count(b"OK") < 3:
            replies += await wire.reader.read(65536)
        async with http.get(f"http://127.0.0.1:{lookupd.http_port}/lookup?topic=orders") as r:
            assert r.status == 200
        types, after = await scrape(http, lookupd.http_port)
        assert types["nsqlookupd_tcp_commands"] == "counter"
        assert at(after, "nsqlookupd_tcp_commands_total", command="REGISTER") == 2
        assert at(after, "nsqlookupd_tcp_commands_total", command="IDENTIFY") == 1
        assert at(after, "nsqlookupd_tcp_commands_total", command="PING") == 1
        assert at(after, "nsqlookupd_producers") == 1
        assert at(after, "nsqlookupd_topic_producers", topic="orders") == 1
        assert at(after, "nsqlookupd_channels") == 2 and at(after, "nsqlookupd_topics") == 1
        assert at(after, "nsqlookupd_http_requests_total", path="/lookup", code="200") == 1
    finally:
        await lookupd.stop()


def test_escaping_survives_the_prometheus_parser() -> None:
    family = Family("x", "gauge", "help with \\ and\nnewline").add(1.5, name='a"b\\c\nd')
    counter = Family("y", "counter", "c").add(3)
    (parsed_x, parsed_y) = text_string_to_metric_families(render([family, counter]))
    assert parsed_x.documentation == "help with \\ and\nnewline"
    assert parsed_x.samples[0].labels == {"name": 'a"b\\c\nd'} and parsed_x.samples[0].value == 1.5
    assert (parsed_y.name, parsed_y.type, parsed_y.samples[0].name) == ("y", "counter", "y_total")


def test_a_histogram_is_read_by_prometheus_own_parser() -> None:
    family = Family("h", "histogram", "a histogram").add_histogram(
        (0.1, 1.0), [2, 3], 1.25, 4, call="put"
    )
    (parsed,) = text_string_to_metric_families(render([family]))
    assert (parsed.name, parsed.type) == ("h", "histogram")
    got = {(x.name, x.labels.get("le", "")): x.value for x in parsed.samples}
    assert got == {("h_bucket", "0.1"): 2, ("h_bucket", "1.0"): 3, ("h_bucket", "+Inf"): 4,
                   ("h_sum", ""): 1.25, ("h_count", ""): 4}  # fmt: skip
    assert all(x.labels["call"] == "put" for x in parsed.samples)
