"""Bad input to nsqadmin's API is a clear 4xx JSON error, never a 500; plus /api/graphite,
the graphite /render proxy, /config/:opt and the sampled history behind the graphs."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqpy.testing import eventually, http_request

from .helpers import AdminClient, AdminProgram, MakeAdmin, Stack, unique

BAD_INPUT: list[tuple[str, str, bytes | None, int, str]] = [
    ("GET", "/api/topics/bad%20name", None, 400, "INVALID_TOPIC"),
    ("GET", "/api/topics/" + "x" * 65, None, 400, "INVALID_TOPIC"),
    ("GET", "/api/topics/t/bad*chan", None, 400, "INVALID_CHANNEL"),
    ("GET", "/api/topics/t%23bogus", None, 400, "INVALID_TOPIC"),
    ("POST", "/api/topics/t", b"not json", 400, "INVALID_BODY"),
    ("POST", "/api/topics/t", b"[1, 2]", 400, "INVALID_BODY"),
    ("POST", "/api/topics/t", b"", 400, "INVALID_BODY"),
    ("POST", "/api/topics/t", b'{"action": "explode"}', 400, "INVALID_ACTION"),
    ("POST", "/api/topics/t", b'{"action": 7}', 400, "INVALID_ACTION"),
    ("POST", "/api/topics/t", b"{}", 400, "INVALID_ACTION"),
    ("POST", "/api/topics/t/c", b'{"action": "delete"}', 400, "INVALID_ACTION"),
    ("POST", "/api/topics/b%20ad", b'{"action": "pause"}', 400, "INVALID_TOPIC"),
    ("POST", "/api/topics", b"{", 400, "INVALID_BODY"),
    ("POST", "/api/topics", b"{}", 400, "INVALID_TOPIC"),
    ("POST", "/api/topics", b'{"topic": 5}', 400, "INVALID_TOPIC"),
    ("POST", "/api/topics", b'{"topic": "a b"}', 400, "INVALID_TOPIC"),
    ("POST", "/api/topics", b'{"topic": "ok", "channel": "no/pe"}', 400, "INVALID_CHANNEL"),
    ("POST", "/api/topics", b'{"topic": "ok", "channel": ["c"]}', 400, "INVALID_CHANNEL"),
    ("DELETE", "/api/topics/%00", None, 400, "INVALID_TOPIC"),
    ("DELETE", "/api/nodes/127.0.0.1:1", b"nope", 400, "INVALID_BODY"),
    ("DELETE", "/api/nodes/127.0.0.1:1", b'{"topic": "b a d"}', 400, "INVALID_TOPIC"),
    ("DELETE", "/api/nodes/127.0.0.1:1", b'{"topic": "ok"}', 404, "NODE_NOT_FOUND"),
    ("GET", "/api/nodes/garbage", None, 404, "NODE_NOT_FOUND"),
    ("GET", "/api/graphite", None, 400, "INVALID_ARG_METRIC"),
    ("GET", "/api/graphite?metric=depth&target=x", None, 400, "INVALID_ARG_METRIC"),
    ("GET", "/api/graphite?metric=rate", None, 400, "INVALID_ARG_TARGET"),
    ("GET", "/api/graphite?metric=rate&target=x", None, 400, "GRAPHITE_NOT_CONFIGURED"),
    ("GET", "/api/history?topic=b%20ad", None, 400, "INVALID_TOPIC"),
    ("GET", "/api/history?channel=c", None, 400, "INVALID_CHANNEL"),
    ("GET", "/api/history?topic=t&channel=%2F", None, 400, "INVALID_CHANNEL"),
    ("PUT", "/api/topics", b"{}", 405, "METHOD_NOT_ALLOWED"),
    ("GET", "/api/nope", None, 404, "NOT_FOUND"),
    ("GET", "/config/no_such_option", None, 400, "INVALID_OPTION"),
    ("PUT", "/config/log_level", b"", 413, "INVALID_VALUE"),
    ("PUT", "/config/log_level", b"loud", 400, "INVALID_VALUE"),
    ("PUT", "/config/nsqlookupd_http_addresses", b'["a:1"]', 400, "INVALID_VALUE"),
    ("PUT", "/config/http_address", b'"x"', 400, "INVALID_OPTION"),
    ("GET", "/static/..%2Fapp.py", None, 404, "NOT_FOUND"),
    ("GET", "/static/nope.js", None, 404, "NOT_FOUND"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), BAD_INPUT)
async def test_bad_input_is_a_clear_4xx(
    nsqd_admin: AdminClient, method: str, path: str, body: bytes | None, status: int, code: str
) -> None:
    got = await nsqd_admin.call(method, path, raw=body)
    assert got == (status, {"message": code})


names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=70)
bodies = st.binary(max_size=200) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["topic", "channel", "action", "x"]), inner, max_size=3)
    ),
    max_leaves=10,
).map(lambda v: json.dumps(v).encode())


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    method=st.sampled_from(["GET", "POST", "DELETE", "PUT"]),
    route=st.sampled_from(
        [
            "/api/topics/{a}",
            "/api/topics/{a}/{b}",
            "/api/nodes/{a}",
            "/api/topics",
            "/api/history?topic={a}&channel={b}",
            "/api/graphite?metric={a}&target={b}",
            "/config/{a}",
            "/topics/{a}",
            "/topics/{a}/{b}",
            "/nodes/{a}",
            "/static/{a}",
        ]
    ),
    a=names,
    b=names,
    body=bodies,
)
def test_no_garbage_reaches_a_500(
    admin_program: AdminProgram, method: str, route: str, a: str, b: str, body: bytes
) -> None:
    path = route.format(a=quote(a, safe=""), b=quote(b, safe=""))
    status, data, headers = http_request(method, admin_program.url + path, body or None, timeout=10)
    assert status < 500, (method, path, body, data)
    if status >= 400 and "json" in headers.get("Content-Type", ""):
        assert isinstance(json.loads(data)["message"], str)


# -- graphite ------------------------------------------------------------------------------


async def test_graphite_rate_and_render_proxy(
    stack: Stack, make_admin: MakeAdmin, graphite: tuple[str, list[dict[str, str]]]
) -> None:
    url, seen = graphite
    admin = await make_admin(
        nsqd_http_addresses=[stack.nsqd_http(0)],
        graphite_url=url,
        proxy_graphite=True,
        statsd_interval_ms=60_000,
    )
    target = "sumSeries(stats.counters.nsq.*.topic.t.message_count.count)"
    status, doc = await admin.get(f"/api/graphite?metric=rate&target={quote(target)}")
    assert (status, doc) == (200, {"rate": "5.00"})  # 300 messages over the 60 s interval
    assert seen[-1] == {"from": "-120sec", "until": "-60sec", "format": "json", "target": target}
    status, png = await admin.get("/render?target=x&width=120")
    assert (status, png) == (200, "\x89PNG fake")
    assert seen[-1] == {"target": "x", "width": "120"}

    dead = await make_admin(
        nsqd_http_addresses=[stack.nsqd_http(0)],
        graphite_url="http://127.0.0.1:1",
        proxy_graphite=True,
    )
    status, doc = await dead.get(f"/api/graphite?metric=rate&target={quote(target)}")
    assert status == 502 and doc["message"].startswith("UPSTREAM_ERROR: ")
    status, doc = await dead.get("/render?target=x")
    assert status == 502 and doc["message"].startswith("UPSTREAM_ERROR: ")


async def test_render_is_only_proxied_when_asked(
    stack: Stack, make_admin: MakeAdmin, graphite: tuple[str, list[dict[str, str]]]
) -> None:
    admin = await make_admin(nsqd_http_addresses=[stack.nsqd_http(0)], graphite_url=graphite[0])
    assert await admin.get("/render?target=x") == (404, {"message": "NOT_FOUND"})


# -- /config -------------------------------------------------------------------------------


async def test_config_reads_and_sets_like_nsq(stack: Stack, make_admin: MakeAdmin) -> None:
    admin = await make_admin(lookupd_http_addresses=[stack.lookupd_http])
    assert await admin.get("/config/nsqlookupd_http_addresses") == (200, [stack.lookupd_http])
    assert await admin.get("/config/http_client_connect_timeout") == (200, 2_000_000_000)
    assert await admin.get("/config/acl_http_header") == (200, "X-Forwarded-User")
    assert await admin.call("PUT", "/config/log_level", raw=b"debug") == (200, 1)
    new = json.dumps(["127.0.0.1:1", stack.lookupd_http]).encode()
    assert await admin.call("PUT", "/config/nsqlookupd_http_addresses", raw=new) == (
        200,
        ["127.0.0.1:1", stack.lookupd_http],
    )
    status, doc = await admin.get("/api/nodes")  # the new list is used at once
    assert status == 200 and "127.0.0.1:1" in doc["message"]
    await admin.call("PUT", "/config/log_level", raw=b"info")

    elsewhere = await make_admin(
        lookupd_http_addresses=[stack.lookupd_http], allow_config_from_cidr="10.0.0.0/8"
    )
    assert await elsewhere.get("/config/log_level") == (403, {"message": "FORBIDDEN"})


# -- the sampled history -------------------------------------------------------------------


async def test_sampled_history_shows_the_message_rate(stack: Stack, make_admin: MakeAdmin) -> None:
    admin = await make_admin(
        nsqd_http_addresses=[stack.nsqd_http(0), stack.nsqd_http(1)],
        stats_sample_interval_ms=50,
        stats_history_size=50,
    )
    topic = unique()
    stack.nsqd_post(0, f"/topic/create?topic={topic}")
    stack.nsqd_post(0, f"/channel/create?topic={topic}&channel=c")
    await admin.admin.wait_for_samples(2)
    stack.pub(0, topic, *[b"m"] * 20)
    await admin.admin.wait_for_samples(2)

    async def moved() -> dict[str, Any] | None:
        status, doc = await admin.get(f"/api/history?topic={topic}")
        assert status == 200
        return doc if any(r for r in doc["rate"] if r) else None

    doc = await eventually(moved, what="a positive rate")
    assert doc["interval_ms"] == 50 and doc["size"] == 50 and doc["node"] == "*"
    assert doc["message_count"][-1] == 20 and len(doc["timestamps"]) == len(doc["rate"])
    assert doc["timestamps"] == sorted(doc["timestamps"])
    _, per_node = await admin.get(f"/api/history?topic={topic}&channel=c&node={stack.node(0)}")
    assert per_node["message_count"][-1] == stack.channel_stats(0, topic, "c")["message_count"]  # type: ignore[index]
    _, total = await admin.get("/api/history")
    assert total["timestamps"] and total["topic"] == ""
    _, topic_doc = await admin.get(f"/api/topics/{topic}")
    assert topic_doc["rate"] is not None and topic_doc["rate"] >= 0
