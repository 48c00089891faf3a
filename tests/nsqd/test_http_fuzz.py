"""A bounded, seeded fuzz of nsqd's HTTP API: every answer is NSQ's, nothing is lost.

300 requests mix the real routes with unknown paths, every method, query strings with bad
percent-escapes, ``;`` separators, repeated and huge arguments, and random bodies. Each
answer must be a well-formed V1 success or error with one of nsqd's statuses and codes,
never a 500 and never a dropped connection; a topic published before the run (and never
named by it) still delivers every message afterwards.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import unquote

import aiohttp
import pytest
from yarl import URL

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import FakeClock, mpub, nsqd_options, publisher, read_message, subscriber

V1 = "nsq; version=1.0"
STATUSES = {200, 400, 404, 405, 413}
CODES = {
    "METHOD_NOT_ALLOWED", "NOT_FOUND", "INVALID_REQUEST", "MISSING_ARG_TOPIC", "INVALID_TOPIC",
    "INVALID_ARG_TOPIC", "MISSING_ARG_CHANNEL", "INVALID_ARG_CHANNEL", "TOPIC_NOT_FOUND",
    "CHANNEL_NOT_FOUND", "MSG_EMPTY", "MSG_TOO_BIG", "BODY_TOO_BIG", "BAD_BODY", "BAD_MESSAGE",
    "INVALID_DEFER", "INVALID_OPTION", "INVALID_VALUE",
}  # fmt: skip
ROUTES = {  # path -> its method in nsqd's route table (None: no such route)
    "/ping": "GET", "/info": "GET", "/stats": "GET", "/pub": "POST", "/mpub": "POST",
    "/topic/create": "POST", "/topic/delete": "POST", "/topic/empty": "POST",
    "/topic/pause": "POST", "/topic/unpause": "POST", "/channel/create": "POST",
    "/channel/delete": "POST", "/channel/empty": "POST", "/channel/pause": "POST",
    "/channel/unpause": "POST", "/config/log_level": "GET", "/config/max_msg_size": "GET",
    "/config/nope": "PUT", "/debug/freememory": "POST", "/nothing": None, "/topic": None,
    "/channel/x": None, "/config": None, "/pub/more": None, "/%70ing": "GET",
}  # fmt: skip
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH"]
KEYS = ["topic", "channel", "defer", "binary", "format", "include_clients", "include_mem", "x"]
PROTECTED = "keep"


def random_value(rng: random.Random) -> str:
    kind = rng.randrange(9)
    if kind == 0:
        return rng.choice(["fz", "fz2", "fz#ephemeral", "c", "c#ephemeral", "a" * 64])
    if kind == 1:
        return rng.choice(["bad!", "a" * 65, "", "%zz", "%4", "%", "a%2", "%c3%a9", "%e9"])
    if kind == 2:
        return str(rng.choice([0, 1, -1, 3600000, 3600001, 2**63, rng.randrange(-(10**6), 10**6)]))
    if kind == 3:
        return rng.choice(["true", "false", "0", "1", "json", "text", "TRUE", "yes"])
    if kind == 4:
        return "a" * rng.choice([1000, 20_000, 100_000])  # huge values
    if kind == 5:
        return "".join(rng.choice("%+&=;?/abc09") for _ in range(rng.randrange(1, 12)))
    if kind == 6:
        return "%" + "".join(rng.choice("0123456789abcdefgXYZ") for _ in range(2))
    return "".join(chr(rng.randrange(33, 127)) for _ in range(rng.randrange(0, 20)))


def random_query(rng: random.Random) -> str:
    pairs = []
    if rng.random() < 0.5:
        pairs.append(f"topic={rng.choice(['fz', 'fz2', 'fz#ephemeral'])}")
        if rng.random() < 0.5:
            pairs.append(f"channel={rng.choice(['c', 'c#ephemeral'])}")
    for _ in range(rng.randrange(0, 5)):
        key = rng.choice(KEYS) if rng.random() < 0.85 else random_value(rng)
        value = random_value(rng).replace(PROTECTED, "kee")
        pairs.append(f"{key}={value}" if rng.random() < 0.9 else key)
        if rng.random() < 0.2:
            pairs.append(pairs[-1])  # repeated argument
    sep = ";" if rng.random() < 0.05 else "&"
    return sep.join(pairs)


def random_body(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return b""
    if kind == 1:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
    if kind == 2:
        return b"\n".join(b"m%d" % i for i in range(rng.randrange(0, 20))) + rng.choice(
            [b"", b"\n"]
        )
    if kind == 3:
        n = rng.randrange(-2, 5)
        return struct.pack(">i", n) + b"".join(
            struct.pack(">i", rng.randrange(-1, 8)) + b"abcdefg"[: rng.randrange(0, 8)]
            for _ in range(max(n, 0))
        )
    if kind == 4:
        return b"x" * rng.choice([999, 1000, 1001, 9999, 10_001])  # around the limits
    return json.dumps(rng.choice(["debug", ["a"], "loud", 5])).encode()


def check(method: str, path: str, status: int, body: bytes, headers: dict[str, str]) -> None:
    where = f"{method} {path[:200]} -> {status} {body[:200]!r}"
    assert status in STATUSES, where
    route = unquote(path.split("?")[0])  # the router matches the decoded path
    if route == "/ping" and method == "GET":  # /ping and /debug/* are not V1 responses
        assert (status, body) == (200, b"OK"), where
        return
    if route == "/debug/freememory" and method == "POST":
        assert (status, body) == (200, b""), where
        return
    assert headers.get("X-NSQ-Content-Type") == V1, where
    if status != 200:
        assert headers.get("Content-Type") == "application/json; charset=utf-8", where
        doc = json.loads(body)
        assert set(doc) == {"message"} and doc["message"] in CODES, where
    elif headers.get("Content-Type", "").startswith("application/json"):
        json.loads(body)


@pytest.fixture
async def small(tmp_path: Path, clock: FakeClock) -> AsyncIterator[NsqdServer]:
    server = NsqdServer(
        nsqd_options(tmp_path, max_msg_size=1000, max_body_size=10_000), clock=clock
    )
    await server.start()
    yield server
    await server.stop()


@pytest.mark.slow
async def test_http_fuzz_gets_nsq_answers_and_loses_nothing(small: NsqdServer) -> None:
    rng = random.Random(20240601)
    bodies = [b"keep-%d" % i for i in range(20)]
    p = await publisher(small.tcp_port)
    await p.send(mpub(PROTECTED, bodies))
    assert await p.read_frame() == (0, b"OK")
    base = f"http://127.0.0.1:{small.http_port}"
    seen: dict[int, int] = {}
    codes: set[str] = set()
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            path = rng.choice(list(ROUTES))
            method = ROUTES[path] or "GET"
            if rng.random() < 0.3:
                method = rng.choice(METHODS)
            if method == "PUT" and path.startswith("/config/") and rng.random() < 0.5:
                path = "/config/nsqlookupd_tcp_addresses_x"  # never point nsqd at a lookupd
            query = random_query(rng)
            target = f"{path}?{query}" if query or rng.random() < 0.3 else path
            body = random_body(rng)
            url = URL(base + target, encoded=True)
            async with session.request(method, url, data=body) as resp:
                got = await resp.read()
                check(method, target, resp.status, got, dict(resp.headers))
                seen[resp.status] = seen.get(resp.status, 0) + 1
                if resp.status != 200:
                    codes.add(json.loads(got)["message"])
    assert set(seen) == STATUSES, seen  # the run reached every kind of answer...
    assert len(codes) >= 10, codes  # ...and most of nsqd's error codes
    assert small.broker.healthy
    wire = await subscriber(small.tcp_port, PROTECTED, "after", rdy=50)
    assert [(await read_message(wire))[3] for _ in range(len(bodies))] == bodies
