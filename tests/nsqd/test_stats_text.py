"""/stats text form, byte for byte as nsqd 1.3.0's printStats and ClientV2Stats.String()."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from nsqpy.broker.stats import go_duration, stats_text
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import identify, mpub, publisher

START = 1_700_000_000  # 2023-11-14T22:13:20Z
S = 1_000_000_000


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def client(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "client_id": "not-shown", "hostname": "", "version": "V2", "remote_address": "",
        "state": 3, "ready_count": 0, "in_flight_count": 0, "message_count": 0,
        "finish_count": 0, "requeue_count": 0, "connect_ts": START, "sample_rate": 0,
        "deflate": False, "snappy": False, "user_agent": "",
    }  # fmt: skip
    base.update(fields)
    return base


def latency(*values: float) -> dict[str, object]:
    pcts = [{"quantile": q, "value": v} for q, v in zip((0.99, 0.5), values, strict=False)]
    return {"count": len(values), "percentiles": pcts or None}


def channel(
    name: str, paused: bool, clients: list[dict[str, object]], **counts: int
) -> dict[str, object]:
    doc: dict[str, object] = {
        "channel_name": name, "depth": 0, "backend_depth": 0, "in_flight_count": 0,
        "deferred_count": 0, "message_count": 0, "requeue_count": 0, "timeout_count": 0,
        "client_count": len(clients), "clients": clients, "paused": paused,
        "e2e_processing_latency": latency(1.5 * S, 2_500_000.0),
    }  # fmt: skip
    doc.update(counts)
    return doc


DOC: dict[str, Any] = {
    "version": "1.3.0",
    "health": "OK",
    "start_time": START,
    "topics": [
        {
            "topic_name": "orders",
            "channels": [
                channel(
                    "audit", False,
                    [client(hostname="worker-1", remote_address="127.0.0.1:50001",
                            user_agent="pynsq/0.9.1", ready_count=5, in_flight_count=1,
                            message_count=1, connect_ts=START + 60)],
                    depth=2, backend_depth=2, in_flight_count=1, message_count=3,
                ),
                channel("slow", True, [], depth=3, backend_depth=3, message_count=3,
                        requeue_count=12, timeout_count=7, deferred_count=1),
            ],
            "depth": 0, "backend_depth": 0, "message_count": 3, "message_bytes": 9,
            "paused": False, "e2e_processing_latency": latency(1.5 * S, 2_500_000.0),
        },
        {
            "topic_name": "held", "channels": [], "depth": 4, "backend_depth": 4,
            "message_count": 4, "message_bytes": 4, "paused": True,
            "e2e_processing_latency": {"count": 0, "percentiles": None},
        },
    ],
    "producers": [
        client(hostname="pub-host", remote_address="10.0.0.2:4000", user_agent="go-nsq/1.1.0",
               pub_counts=[{"topic": "orders", "count": 3}])
    ],
}  # fmt: skip

GOLDEN = """\
nsqd v1.3.0 (nsqpy)
start_time 2023-11-14T22:13:20Z
uptime 1h2m3.500000001s

Health: OK

Topics:
   [orders         ] depth: 0     be-depth: 0     msgs: 3        e2e%: 1.5s, 2.5ms
      [audit                    ] depth: 2     be-depth: 2     inflt: 1    def: 0    re-q: 0     timeout: 0     msgs: 3        e2e%: 1.5s, 2.5ms
        [V2 worker-1:50001 pynsq/0.9.1] state: 3 inflt: 1    rdy: 5    fin: 0        re-q: 0        msgs: 1        connected: 1h1m3s
   *P [slow                     ] depth: 3     be-depth: 3     inflt: 0    def: 1    re-q: 12    timeout: 7     msgs: 3        e2e%: 1.5s, 2.5ms

*P [held           ] depth: 4     be-depth: 4     msgs: 4        e2e%:\x20

Producers:
   [V2 pub-host:4000 go-nsq/1.1.0] msgs: 3        topics: orders=3 connected: 1h2m3s
"""


def test_text_is_printstats_byte_for_byte(utc: None) -> None:
    now_ns = START * S + 3723 * S + 500_000_001
    assert stats_text(DOC, now_ns=now_ns, start_ns=START * S) == GOLDEN


def test_short_ids_are_padded_and_an_empty_daemon_says_none(utc: None) -> None:
    doc = dict(DOC, topics=[], producers=None, memory={"heap_objects": 7})
    doc["topics"] = [
        dict(
            DOC["topics"][1],
            channels=[
                channel(
                    "c", False, [client(hostname="h", remote_address="1.2.3.4:5", user_agent="u")]
                )
            ],
        )
    ]
    text = stats_text(doc, now_ns=START * S + 59 * S, start_ns=START * S)
    assert "uptime 59s\n" in text
    assert "\nMemory:\n   heap_objects             \t7\n" in text
    ident = "h:5 u" + " " * 16  # %-21s
    assert (
        f"        [V2 {ident}] state: 3 inflt: 0    rdy: 0    fin: 0        re-q: 0        msgs: 0        connected: 59s\n"
        in text
    )
    assert text.endswith("\nProducers: None\n")
    assert "Topics: None" not in text


def test_go_duration() -> None:
    cases = {
        0: "0s", 1: "1ns", 999: "999ns", 1_500: "1.5\u00b5s", 2_000_000: "2ms",
        2_500_000: "2.5ms", S: "1s", 59 * S: "59s", 60 * S: "1m0s", 90 * S + S // 4: "1m30.25s",
        3600 * S: "1h0m0s", 7205 * S + 1: "2h0m5.000000001s", -S: "-1s",
    }  # fmt: skip
    assert {ns: go_duration(ns) for ns in cases} == cases


async def test_a_new_channel_counts_what_the_topic_buffered(nsqd: NsqdServer) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(identify({"hostname": "my-host", "client_id": "my-id"}))
    assert await p.read_frame() == (0, b"OK")
    await p.send(mpub("buffered", [b"a", b"b", b"c"]))
    assert await p.read_frame() == (0, b"OK")
    base = f"http://127.0.0.1:{nsqd.http_port}"
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/channel/create?topic=buffered&channel=c") as resp:
            assert resp.status == 200
        async with session.get(f"{base}/stats?format=json&topic=buffered") as resp:
            (topic,) = json.loads(await resp.read())["topics"]
        async with session.get(f"{base}/stats") as resp:
            text = (await resp.read()).decode()
    (chan,) = topic["channels"]
    assert (chan["message_count"], chan["depth"]) == (3, 3)
    assert "   [V2 my-host:" in text and "my-id" not in text
