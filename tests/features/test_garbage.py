"""Garbage into every new parser and HTTP route: clean 4xx answers, never a 500 or a crash."""

from __future__ import annotations

import random

import aiohttp
from hypothesis import given
from hypothesis import strategies as st

from nsqpy.broker.replay import BadPosition, Position, parse_position
from nsqpy.testing import NsqdServers, pub, publish, subscriber

from .conftest import Http

ROUTES = [
    ("POST", "/channel/setoffset"),
    ("POST", "/channel/setmaxattempts"),
    ("POST", "/topic/setttl"),
    ("POST", "/topic/setmaxdepth"),
    ("POST", "/message/trace/enable"),
    ("POST", "/message/trace/disable"),
    ("GET", "/message/trace"),
    ("POST", "/pub"),
]
KEYS = ["topic", "channel", "partition", "max_attempts", "dead_letter_topic", "ttl",
        "max_depth", "policy", "id", "trace_id", "limit", "defer"]  # fmt: skip
VALUES = ["g", "c", "", "0", "-1", "1", "65536", "1e9", "x" * 70, "%zz", "%00", "bad!",
          "18446744073709551616", "1h", "drop_oldest", "0000000000000000", "#ephemeral",
          "\u00e9", "+", ";"]  # fmt: skip


@given(st.binary(max_size=80))
def test_parse_position_takes_any_bytes(body: bytes) -> None:
    try:
        position = parse_position(body)
    except BadPosition as exc:
        assert exc.code == "INVALID_POSITION"
    else:
        assert isinstance(position, Position) and position.kind in (
            "offset",
            "timestamp",
            "special",
        )


async def test_new_routes_answer_garbage_with_clean_errors(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    await publish(nsqd.tcp_port, pub("g", b"kept"))
    await subscriber(nsqd.tcp_port, "g", "c", rdy=0)
    rng = random.Random(9)
    for _ in range(300):
        method, path = rng.choice(ROUTES)
        pairs = [f"{rng.choice(KEYS)}={rng.choice(VALUES)}" for _ in range(rng.randint(0, 5))]
        body = rng.choice([b"", b"msgcount:0", b"special:-2", b"\x00\xff", rng.randbytes(20)])
        status, doc = await http.call(method, path + "?" + "&".join(pairs), body)
        full = path == "/pub" and doc == {"message": "EXITING"}  # a max_depth set meanwhile
        assert status < 500 or full, (method, path, pairs, body, status, doc)
        if status >= 400:
            assert isinstance(doc, dict) and set(doc) == {"message"}, doc
    # The daemon still works and the channel still holds the message.
    assert (await http.get("/ping"))[0] == 200
    assert (await http.channel("g", "c"))["message_count"] >= 1
