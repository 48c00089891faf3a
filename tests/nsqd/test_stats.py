"""/stats, /info and /config against SPEC 2.2-2.4: exact field sets, filters, text form."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from yarl import URL

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import identify, mpub, pub, publisher, read_message, subscriber

V1 = "nsq; version=1.0"
TOP = ["version", "health", "start_time", "topics", "memory", "producers"]
TOPIC = ["topic_name", "channels", "depth", "backend_depth", "message_count", "message_bytes",
         "paused", "e2e_processing_latency"]  # fmt: skip
CHANNEL = ["channel_name", "depth", "backend_depth", "in_flight_count", "deferred_count",
           "message_count", "requeue_count", "timeout_count", "client_count", "clients",
           "paused", "e2e_processing_latency"]  # fmt: skip
CLIENT_HEAD = ["client_id", "hostname", "version", "remote_address", "state", "ready_count",
               "in_flight_count", "message_count", "finish_count", "requeue_count",
               "connect_ts", "sample_rate", "deflate", "snappy", "user_agent"]  # fmt: skip
CLIENT_TLS = ["tls", "tls_cipher_suite", "tls_version", "tls_negotiated_protocol",
              "tls_negotiated_protocol_is_mutual"]  # fmt: skip
MEMORY = ["heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes",
          "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes",
          "gc_total_runs"]  # fmt: skip
INFO = ["version", "broadcast_address", "hostname", "http_port", "tcp_port", "start_time",
        "max_heartbeat_interval", "max_output_buffer_size", "max_output_buffer_timeout",
        "max_deflate_level"]  # fmt: skip


async def request(
    http: tuple[aiohttp.ClientSession, str], method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes, dict[str, str]]:
    session, base = http
    url = URL(base + path, encoded=True)  # sent as written, bad escapes included
    async with session.request(method, url, data=body) as resp:
        return resp.status, await resp.read(), dict(resp.headers)


async def stats_json(http: tuple[aiohttp.ClientSession, str], query: str = "") -> dict[str, Any]:
    status, body, headers = await request(http, "GET", "/stats?format=json" + query)
    assert status == 200 and headers["X-NSQ-Content-Type"] == V1
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    doc: dict[str, object] = json.loads(body)
    return doc


async def busy_daemon(nsqd: NsqdServer) -> None:
    """Two topics, channels with a consumer each, one producer connection."""
    p = await publisher(nsqd.tcp_port)
    await p.send(identify({"client_id": "prod", "hostname": "h", "user_agent": "ua/1"}))
    assert await p.read_frame() == (0, b"OK")
    await p.send(mpub("alpha", [b"1", b"2", b"3"]) + pub("beta", b"x"))
    assert [await p.read_frame() for _ in range(2)] == [(0, b"OK"), (0, b"OK")]
    a = await subscriber(nsqd.tcp_port, "alpha", "one", rdy=1)
    await read_message(a)
    await subscriber(nsqd.tcp_port, "alpha", "two", rdy=0)
    await subscriber(nsqd.tcp_port, "beta", "one", rdy=0)


async def test_json_fields_are_exactly_specs(
    http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer
) -> None:
    await busy_daemon(nsqd)
    doc = await stats_json(http)
    assert list(doc) == TOP
    assert doc["version"] == "1.3.0" and doc["health"] == "OK"
    assert list(doc["memory"]) == MEMORY
    topics = doc["topics"]
    assert [t["topic_name"] for t in topics] == ["alpha", "beta"]
    alpha = topics[0]
    assert list(alpha) == TOPIC
    assert (alpha["message_count"], alpha["message_bytes"], alpha["depth"]) == (3, 3, 0)
    assert alpha["e2e_processing_latency"] == {"count": 0, "percentiles": None}
    one, two = alpha["channels"]
    assert list(one) == CHANNEL and [one["channel_name"], two["channel_name"]] == ["one", "two"]
    assert (one["depth"], one["in_flight_count"], one["client_count"], one["message_count"]) == (
        2,
        1,
        1,
        3,
    )
    assert (two["depth"], two["message_count"]) == (0, 0)  # a later channel starts at the tail
    (client,) = one["clients"]
    assert list(client) == CLIENT_HEAD + CLIENT_TLS  # no auth fields, no pub_counts
    assert (
        client["version"],
        client["state"],
        client["ready_count"],
        client["in_flight_count"],
    ) == ("V2", 3, 1, 1)
    (producer,) = doc["producers"]
    assert list(producer) == [*CLIENT_HEAD, "pub_counts", *CLIENT_TLS]
    assert (producer["client_id"], producer["hostname"], producer["user_agent"]) == (
        "prod",
        "h",
        "ua/1",
    )
    assert len(producer["pub_counts"]) == 1  # nsqd 1.3.0 lists at most one topic


async def test_filters(http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer) -> None:
    await busy_daemon(nsqd)
    doc = await stats_json(http, "&topic=beta")
    assert [t["topic_name"] for t in doc["topics"]] == ["beta"]
    (producer,) = doc["producers"]
    assert producer["pub_counts"] == [{"topic": "beta", "count": 1}]
    doc = await stats_json(http, "&channel=two")  # topics without that channel are left out
    assert [
        (t["topic_name"], [c["channel_name"] for c in t["channels"]]) for t in doc["topics"]
    ] == [("alpha", ["two"])]
    doc = await stats_json(http, "&topic=missing")
    assert (doc["topics"], doc["producers"]) == (None, None)
    doc = await stats_json(http, "&include_clients=false&include_mem=false")
    assert list(doc) == ["version", "health", "start_time", "topics", "producers"]
    assert doc["producers"] is None
    assert all(c["clients"] is None for t in doc["topics"] for c in t["channels"])
    assert doc["topics"][0]["channels"][0]["client_count"] == 1
    doc = await stats_json(http, "&include_clients=bogus&include_mem=0")  # unknown -> true
    assert doc["producers"] and "memory" not in doc
    status, body, _ = await request(http, "GET", "/stats?format=json&topic=%zz")
    assert (status, json.loads(body)) == (400, {"message": "INVALID_REQUEST"})


async def test_text_format(http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer) -> None:
    status, body, _ = await request(http, "GET", "/stats")
    text = body.decode()
    assert status == 200 and "Topics: None" in text and "Producers: None" in text
    await busy_daemon(nsqd)
    assert (await request(http, "POST", "/channel/pause?topic=alpha&channel=two"))[0] == 200
    status, body, _ = await request(http, "GET", "/stats?format=text&include_mem=false")
    text = body.decode()
    lines = text.splitlines()
    assert lines[0].startswith("nsqd v1.3.0") and lines[1].startswith("start_time ")
    assert "Health: OK" in lines and "Memory:" not in text
    assert any(
        line.startswith("   [alpha          ] depth: 0     be-depth: 0     msgs: 3 ")
        for line in lines
    )
    assert any(line.startswith("      [one                      ] depth: 2     ") for line in lines)
    assert any(line.startswith("   *P [two                      ] depth: 0     ") for line in lines)
    assert any(
        line.startswith("        [V2 ") and "state: 3 inflt: 1    rdy: 1 " in line for line in lines
    )
    assert "Producers:" in lines
    # ClientV2Stats.String() names the client by its hostname, not its client_id.
    assert any(line.startswith("   [V2 h:") and "topics: " in line for line in lines)


async def test_info_fields(http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer) -> None:
    import socket

    status, body, headers = await request(http, "GET", "/info")
    info = json.loads(body)
    assert status == 200 and headers["X-NSQ-Content-Type"] == V1
    assert list(info) == INFO
    assert info["hostname"] == socket.gethostname()
    assert (info["broadcast_address"], info["tcp_port"], info["http_port"]) == (
        "127.0.0.1",
        nsqd.tcp_port,
        nsqd.http_port,
    )
    assert (info["max_heartbeat_interval"], info["max_output_buffer_timeout"]) == (
        60_000_000_000,
        30_000_000_000,
    )
    assert (info["max_output_buffer_size"], info["max_deflate_level"]) == (65536, 6)
    assert isinstance(info["start_time"], int)


async def test_config_get_and_put(
    http: tuple[aiohttp.ClientSession, str], nsqd: NsqdServer
) -> None:
    assert (await request(http, "GET", "/config/nsqlookupd_tcp_addresses"))[:2] == (200, b"[]")
    assert (await request(http, "GET", "/config/log_level"))[:2] == (200, b"2")
    assert (await request(http, "GET", "/config/max_req_timeout"))[:2] == (200, b"3600000000000")
    # A lookupd that accepts and hangs up: nsqd connects to it, nothing else.
    accepted = asyncio.Event()

    def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        writer.close()

    lookupd = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    address = f"127.0.0.1:{lookupd.sockets[0].getsockname()[1]}"
    try:
        body = json.dumps([address]).encode()
        status, reply, headers = await request(
            http, "PUT", "/config/nsqlookupd_tcp_addresses", body
        )
        assert (status, json.loads(reply)) == (200, [address])
        assert headers["Content-Type"] == "application/json; charset=utf-8"
        await asyncio.wait_for(accepted.wait(), 5)
        assert json.loads((await request(http, "GET", "/config/nsqlookupd_tcp_addresses"))[1]) == [
            address
        ]
        assert (await request(http, "PUT", "/config/nsqlookupd_tcp_addresses", b"[]"))[:2] == (
            200,
            b"[]",
        )
    finally:
        lookupd.close()
        await lookupd.wait_closed()
    for bad in (b"not json", b'"127.0.0.1:4160"', b"[1]", b'{"a": 1}'):
        status, reply, _ = await request(http, "PUT", "/config/nsqlookupd_tcp_addresses", bad)
        assert (status, json.loads(reply)) == (400, {"message": "INVALID_VALUE"}), bad
    assert (await request(http, "PUT", "/config/log_level", b"WARN"))[:2] == (200, b"3")
    assert (await request(http, "GET", "/config/log_level"))[:2] == (200, b"3")
    for bad, status in ((b"loud", 400), (b"debug\n", 400), (b"", 413)):
        got, reply, _ = await request(http, "PUT", "/config/log_level", bad)
        assert (got, json.loads(reply)) == (status, {"message": "INVALID_VALUE"}), bad
    got, reply, _ = await request(http, "PUT", "/config/max_msg_size", b"5")
    assert (got, json.loads(reply)) == (400, {"message": "INVALID_OPTION"})
    assert (await request(http, "PUT", "/config/log_level", b"info"))[:2] == (200, b"2")
