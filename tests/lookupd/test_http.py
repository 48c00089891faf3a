"""nsqlookupd's HTTP API in-process: every endpoint, its errors, garbage queries, wrong methods."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqpy.httpapi import parse_query
from nsqpy.lookupd.app import NsqLookupd
from nsqpy.lookupd.http import GO_ZERO_TIME_NS
from nsqpy.testing import FakeClock

from .helpers import Api, LookupWire, Reply

V1 = "nsq; version=1.0"
PEER_KEYS = ["remote_address", "hostname", "broadcast_address", "tcp_port", "http_port", "version"]


def assert_error(reply: Reply, status: int, code: str) -> None:
    assert (reply.status, reply.json) == (status, {"message": code})
    assert reply.headers["X-NSQ-Content-Type"] == V1
    assert reply.headers["Content-Type"].startswith("application/json")


def assert_empty_ok(reply: Reply) -> None:
    assert (reply.status, reply.body) == (200, b"")
    assert reply.headers["X-NSQ-Content-Type"] == V1


async def producer(lookupd: NsqLookupd, *commands: bytes, **info: object) -> LookupWire:
    wire = await LookupWire.identified(lookupd.tcp_port, **info)
    for command in commands:
        assert await wire.request(command) == b"OK"
    return wire


# -- read endpoints ---------------------------------------------------------------------------


async def test_ping_is_plain_text(http: Api) -> None:
    reply = await http.call("GET", "/ping")
    assert (reply.status, reply.body) == (200, b"OK")
    assert "X-NSQ-Content-Type" not in reply.headers
    assert reply.headers["Content-Type"].startswith("text/plain")


async def test_info(http: Api) -> None:
    reply = await http.call("GET", "/info")
    assert (reply.status, reply.body) == (200, b'{"version":"1.3.0"}')
    assert reply.headers["X-NSQ-Content-Type"] == V1
    assert reply.headers["Content-Type"] == "application/json; charset=utf-8"


async def test_empty_lookupd(http: Api) -> None:
    assert (await http.call("GET", "/topics")).json == {"topics": []}
    assert (await http.call("GET", "/channels?topic=t")).json == {"channels": []}
    assert (await http.call("GET", "/nodes")).json == {"producers": []}
    assert (await http.call("GET", "/debug")).json == {}
    assert_error(await http.call("GET", "/lookup?topic=t"), 404, "TOPIC_NOT_FOUND")


async def test_listlookup_of_a_lookupd_of_no_cluster_lists_none(http: Api) -> None:
    """youzan's clients ask ``/listlookup`` for the cluster's lookupds; youzan's lookupd of
    no cluster answers 200 with no data (they keep the one they asked), and so does this."""
    reply = await http.call("GET", "/listlookup")
    assert (reply.status, reply.body) == (200, b"")
    assert reply.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"


@pytest.mark.parametrize("path", ["/lookup", "/channels", "/lookup?channel=c", "/channels?Topic=t"])
async def test_topic_argument_required(http: Api, path: str) -> None:
    assert_error(await http.call("GET", path), 400, "MISSING_ARG_TOPIC")


async def test_lookup_lists_channels_and_producers(lookupd: NsqLookupd, http: Api) -> None:
    wire = await producer(lookupd, b"REGISTER t c1\n", b"REGISTER t c2\n", broadcast_address="b1")
    reply = await http.call("GET", "/lookup?topic=t")
    assert reply.status == 200 and reply.headers["X-NSQ-Content-Type"] == V1
    doc = reply.json
    assert list(doc) == ["channels", "producers"]
    assert sorted(doc["channels"]) == ["c1", "c2"]
    (peer,) = doc["producers"]
    assert list(peer) == PEER_KEYS
    assert peer == {
        "remote_address": wire.local_address,
        "hostname": "nsqd-host",
        "broadcast_address": "b1",
        "tcp_port": 4150,
        "http_port": 4151,
        "version": "1.3.0",
    }
    assert (await http.call("GET", "/topics")).json == {"topics": ["t"]}
    assert sorted((await http.call("GET", "/channels?topic=t")).json["channels"]) == ["c1", "c2"]
    # ?topic= is a present, empty topic: not found rather than missing
    assert_error(await http.call("GET", "/lookup?topic="), 404, "TOPIC_NOT_FOUND")
    assert (await http.call("GET", "/channels?topic")).json == {"channels": []}


async def test_lookup_hides_inactive_producers(
    lookupd: NsqLookupd, http: Api, clock: FakeClock
) -> None:
    wire = await producer(lookupd, b"REGISTER t\n")
    clock.advance_ms(300_001)
    assert (await http.call("GET", "/lookup?topic=t")).json == {"channels": [], "producers": []}
    assert (await http.call("GET", "/nodes")).json == {"producers": []}
    assert await wire.request(b"PING\n") == b"OK"
    assert len((await http.call("GET", "/lookup?topic=t")).json["producers"]) == 1


async def test_nodes_have_parallel_topics_and_tombstones(
    lookupd: NsqLookupd, http: Api, clock: FakeClock
) -> None:
    a = await producer(
        lookupd, b"REGISTER t1 c\n", b"REGISTER t2\n", broadcast_address="a", http_port=1
    )
    b = await producer(lookupd, b"REGISTER t1\n", broadcast_address="b", http_port=2)
    assert_empty_ok(await http.call("POST", "/topic/tombstone?topic=t1&node=a:1"))
    nodes = {n["remote_address"]: n for n in (await http.call("GET", "/nodes")).json["producers"]}
    assert list(nodes[a.local_address]) == [*PEER_KEYS, "tombstones", "topics"]
    assert nodes[a.local_address]["topics"] == ["t1", "t2"]
    assert nodes[a.local_address]["tombstones"] == [True, False]
    assert (nodes[b.local_address]["topics"], nodes[b.local_address]["tombstones"]) == (
        ["t1"],
        [False],
    )
    lookup = (await http.call("GET", "/lookup?topic=t1")).json
    assert [p["broadcast_address"] for p in lookup["producers"]] == ["b"]
    clock.advance_ms(45_000)
    lookup = (await http.call("GET", "/lookup?topic=t1")).json
    assert sorted(p["broadcast_address"] for p in lookup["producers"]) == ["a", "b"]


async def test_debug_shows_every_registration(
    lookupd: NsqLookupd, http: Api, clock: FakeClock
) -> None:
    wire = await producer(lookupd, b"REGISTER t c\n")
    assert_empty_ok(await http.call("POST", "/topic/create?topic=empty"))
    assert_empty_ok(await http.call("POST", "/topic/tombstone?topic=t&node=10.0.0.1:4151"))
    doc = (await http.call("GET", "/debug")).json
    assert list(doc) == ["channel:t:c", "client::", "topic:t:"]  # sorted; empty ones absent
    entry = {
        "broadcast_address": "10.0.0.1",
        "hostname": "nsqd-host",
        "http_port": 4151,
        "id": wire.local_address,
        "last_update": clock.now,
        "tcp_port": 4150,
        "tombstoned": False,
        "tombstoned_at": GO_ZERO_TIME_NS,
        "version": "1.3.0",
    }
    assert doc["client::"] == [entry] and list(doc["client::"][0]) == sorted(entry)
    assert doc["channel:t:c"] == [entry]
    assert doc["topic:t:"] == [{**entry, "tombstoned": True, "tombstoned_at": clock.now}]


# -- write endpoints ------------------------------------------------------------------------


async def test_topic_create_and_delete(http: Api) -> None:
    assert_error(await http.call("POST", "/topic/create"), 400, "MISSING_ARG_TOPIC")
    assert_error(await http.call("POST", "/topic/create?topic="), 400, "INVALID_ARG_TOPIC")
    assert_error(await http.call("POST", "/topic/create?topic=a+b"), 400, "INVALID_ARG_TOPIC")
    assert_error(
        await http.call("POST", "/topic/create?topic=" + "x" * 65), 400, "INVALID_ARG_TOPIC"
    )
    assert_empty_ok(await http.call("POST", "/topic/create?topic=t", body=b"topic=ignored"))
    assert_empty_ok(await http.call("POST", "/topic/create?topic=t"))
    assert (await http.call("GET", "/topics")).json == {"topics": ["t"]}
    assert (await http.call("GET", "/lookup?topic=t")).json == {"channels": [], "producers": []}
    assert_empty_ok(await http.call("POST", "/channel/create?topic=t&channel=c"))
    assert_error(await http.call("POST", "/topic/delete"), 400, "MISSING_ARG_TOPIC")
    assert_empty_ok(await http.call("POST", "/topic/delete?topic=not!valid"))  # not validated
    assert_empty_ok(await http.call("POST", "/topic/delete?topic=t"))
    assert (await http.call("GET", "/topics")).json == {"topics": []}
    assert (await http.call("GET", "/channels?topic=t")).json == {"channels": []}


CHANNEL_ARG_ERRORS = [
    ("", "MISSING_ARG_TOPIC"),
    ("?channel=c", "MISSING_ARG_TOPIC"),
    ("?topic=bad!&channel=c", "INVALID_ARG_TOPIC"),
    ("?topic=t", "MISSING_ARG_CHANNEL"),
    ("?topic=t&channel=", "INVALID_ARG_CHANNEL"),
    ("?topic=t&channel=c%23ephemeral%23x", "INVALID_ARG_CHANNEL"),
]


@pytest.mark.parametrize(("query", "code"), CHANNEL_ARG_ERRORS)
@pytest.mark.parametrize("path", ["/channel/create", "/channel/delete"])
async def test_channel_argument_errors(http: Api, path: str, query: str, code: str) -> None:
    assert_error(await http.call("POST", path + query), 400, code)


async def test_channel_create_and_delete(lookupd: NsqLookupd, http: Api) -> None:
    await producer(lookupd, b"REGISTER t c\n")
    assert_empty_ok(await http.call("POST", "/channel/create?topic=u&channel=c%23ephemeral"))
    assert (await http.call("GET", "/channels?topic=u")).json == {"channels": ["c#ephemeral"]}
    assert (await http.call("GET", "/lookup?topic=u")).json == {
        "channels": ["c#ephemeral"],
        "producers": [],
    }
    assert_error(
        await http.call("POST", "/channel/delete?topic=u&channel=nope"), 404, "CHANNEL_NOT_FOUND"
    )
    assert_empty_ok(await http.call("POST", "/channel/delete?topic=t&channel=c"))
    assert (await http.call("GET", "/channels?topic=t")).json == {"channels": []}
    # the producer stays registered for the topic
    assert len((await http.call("GET", "/lookup?topic=t")).json["producers"]) == 1


async def test_tombstone_arguments(lookupd: NsqLookupd, http: Api) -> None:
    await producer(lookupd, b"REGISTER t\n")
    assert_error(await http.call("POST", "/topic/tombstone"), 400, "MISSING_ARG_TOPIC")
    assert_error(
        await http.call("POST", "/topic/tombstone?node=10.0.0.1:4151"), 400, "MISSING_ARG_TOPIC"
    )
    assert_error(await http.call("POST", "/topic/tombstone?topic=t"), 400, "MISSING_ARG_NODE")
    for no_match in (
        "node=10.0.0.1",
        "node=10.0.0.1:4150",
        "node=x:4151",
        "topic=u&node=10.0.0.1:4151",
    ):
        target = f"/topic/tombstone?{no_match}" + ("" if "topic" in no_match else "&topic=t")
        assert_empty_ok(await http.call("POST", target))
    assert len((await http.call("GET", "/lookup?topic=t")).json["producers"]) == 1
    assert_empty_ok(await http.call("POST", "/topic/tombstone?topic=t&node=10.0.0.1%3A4151"))
    assert (await http.call("GET", "/lookup?topic=t")).json["producers"] == []


# -- garbage and routing ------------------------------------------------------------------------

BAD_QUERIES = ["topic=%zz", "topic=t;x", "topic=t&a;b=c", "topic=t%2", "%=t", "topic=t&channel=%g0"]
ARG_ENDPOINTS = [
    ("GET", "/lookup"),
    ("GET", "/channels"),
    ("POST", "/topic/create"),
    ("POST", "/topic/delete"),
    ("POST", "/channel/create"),
    ("POST", "/channel/delete"),
    ("POST", "/topic/tombstone"),
]


@pytest.mark.parametrize("query", BAD_QUERIES)
@pytest.mark.parametrize(("method", "path"), ARG_ENDPOINTS)
async def test_malformed_query_is_invalid_request(
    http: Api, method: str, path: str, query: str
) -> None:
    assert_error(await http.call(method, f"{path}?{query}"), 400, "INVALID_REQUEST")


async def test_first_value_wins_and_escapes_are_decoded(http: Api) -> None:
    assert_empty_ok(await http.call("POST", "/topic/create?topic=a&topic=b!"))
    assert_empty_ok(await http.call("POST", "/topic/create?&&topic=%62&"))
    assert sorted((await http.call("GET", "/topics")).json["topics"]) == ["a", "b"]
    assert_error(
        await http.call("POST", "/topic/create?topic=b!&topic=a"), 400, "INVALID_ARG_TOPIC"
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/topic/create"),
        ("POST", "/lookup"),
        ("PUT", "/ping"),
        ("DELETE", "/nodes"),
        ("GET", "/channel/delete"),
    ],
)
async def test_wrong_method_is_405(http: Api, method: str, path: str) -> None:
    assert_error(await http.call(method, path), 405, "METHOD_NOT_ALLOWED")


@pytest.mark.parametrize("path", ["/", "/pub", "/lookupx", "/topic", "/debug/pprof", "/%ff"])
async def test_unknown_path_is_404(http: Api, path: str) -> None:
    assert_error(await http.call("GET", path), 404, "NOT_FOUND")


async def test_star_topic_is_a_wildcard_as_in_nsqlookupd(lookupd: NsqLookupd, http: Api) -> None:
    await producer(lookupd, b"REGISTER t1 a\n", b"REGISTER t2 b\n")
    assert sorted((await http.call("GET", "/channels?topic=*")).json["channels"]) == ["a", "b"]
    assert len((await http.call("GET", "/lookup?topic=*")).json["producers"]) == 1


# -- the query parser alone (``nsqpy.httpapi``, shared with nsqd) -----------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)


@given(st.lists(st.tuples(TEXT, TEXT), max_size=6))
def test_parse_query_round_trips_urlencode(pairs: list[tuple[str, str]]) -> None:
    want: dict[str, list[str]] = {}
    for key, value in pairs:
        want.setdefault(key, []).append(value)
    assert parse_query(urlencode(pairs)) == want


@given(st.text(max_size=40))
def test_parse_query_never_fails_but_with_value_error(raw: str) -> None:
    try:
        parsed = parse_query(raw)
    except ValueError:
        assert ";" in raw or "%" in raw
    else:
        assert all(isinstance(v, list) and v for v in parsed.values())
