"""Pure parts of nsqadmin: stats shapes and aggregation, history, graphite keys, options, HTML.

No sockets: these read like the SPEC 4 shapes they build, plus property tests that garbage
from an upstream never crashes a page and that the history stays bounded.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nsqpy.nsqadmin
from nsqpy.errors import ConfigError
from nsqpy.nsqadmin.graphite import metric_key, rate_from_render, render_url, statsd_prefix
from nsqpy.nsqadmin.history import TOTAL, History, samples_from_stats
from nsqpy.nsqadmin.options import NsqAdminOptions, normalize_base_path, validate
from nsqpy.nsqadmin.render import Links, duration_ns, esc
from nsqpy.nsqadmin.stats import (
    Producer,
    aggregate_topic,
    latency,
    merge_lookupd_nodes,
    node_topic,
    semver,
)
from nsqpy.nsqadmin.views import Views
from nsqpy.nsqadmin.views_nodes import ClusterViews

NOW = 1_700_000_100


def raw_channel(name: str, **kw: Any) -> dict[str, Any]:
    doc = {
        "channel_name": name,
        "depth": 5,
        "backend_depth": 3,
        "in_flight_count": 1,
        "deferred_count": 2,
        "message_count": 10,
        "requeue_count": 1,
        "timeout_count": 0,
        "client_count": 1,
        "paused": False,
        "clients": [
            {
                "client_id": "c1",
                "hostname": "h1",
                "version": "V2",
                "remote_address": "127.0.0.1:5000",
                "state": 3,
                "ready_count": 4,
                "in_flight_count": 1,
                "message_count": 10,
                "finish_count": 9,
                "requeue_count": 0,
                "connect_ts": NOW - 90,
                "sample_rate": 0,
                "deflate": False,
                "snappy": True,
                "user_agent": "pynsq/0.9.1",
                "tls": False,
            }
        ],
        "e2e_processing_latency": {"count": 0, "percentiles": None},
    }
    doc.update(kw)
    return doc


def raw_topic(name: str, channels: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    doc = {
        "topic_name": name,
        "channels": channels,
        "depth": 7,
        "backend_depth": 4,
        "message_count": 20,
        "message_bytes": 200,
        "paused": False,
        "e2e_processing_latency": {"count": 0, "percentiles": None},
    }
    doc.update(kw)
    return doc


def test_per_node_topic_has_nsqadmins_fields() -> None:
    t = node_topic("10.0.0.1:4151", "host-a", raw_topic("t", [raw_channel("c")]), NOW)
    assert (t["node"], t["hostname"], t["topic_name"]) == ("10.0.0.1:4151", "host-a", "t")
    assert (t["depth"], t["memory_depth"], t["backend_depth"]) == (7, 3, 4)
    assert t["nodes"] is None and t["paused"] is False
    c = t["channels"][0]
    assert c["topic_name"] == "t" and c["memory_depth"] == 2 and c["node"] == "10.0.0.1:4151"
    client = c["clients"][0]
    assert client["node"] == "10.0.0.1:4151"
    assert client["connected"] == 90 * 1_000_000_000  # nanoseconds, like Go's time.Duration
    assert client["snappy"] is True and client["user_agent"] == "pynsq/0.9.1"


def test_aggregate_sums_nodes_and_merges_channels_by_name() -> None:
    a = node_topic("a:1", "ha", raw_topic("t", [raw_channel("c"), raw_channel("only-a")]), NOW)
    b = node_topic("b:1", "hb", raw_topic("t", [raw_channel("c", paused=True)]), NOW)
    agg = aggregate_topic("t", [b, a])
    assert agg["node"] == "*" and agg["depth"] == 14 and agg["message_count"] == 40
    assert [n["node"] for n in agg["nodes"]] == ["a:1", "b:1"]  # sorted by hostname
    names = [c["channel_name"] for c in agg["channels"]]
    assert names == ["c", "only-a"]
    c = agg["channels"][0]
    assert c["node"] == "*" and c["depth"] == 10 and c["in_flight_count"] == 2
    assert c["paused"] is True and len(c["nodes"]) == 2 and len(c["clients"]) == 2
    assert agg["channels"][1]["depth"] == 5 and len(agg["channels"][1]["nodes"]) == 1


def test_latency_aggregate_keeps_min_max_and_weighted_average() -> None:
    one = latency({"count": 1, "percentiles": [{"quantile": 0.99, "value": 100.0}]}, "t", "", "a")
    three = latency(
        {
            "count": 3,
            "percentiles": [{"quantile": 0.99, "value": 200.0}, {"quantile": 0.5, "value": 50.0}],
        },
        "t",
        "",
        "b",
    )
    t = aggregate_topic(
        "t",
        [
            {**node_topic("a:1", "a", raw_topic("t", []), NOW), "e2e_processing_latency": one},
            {**node_topic("b:1", "b", raw_topic("t", []), NOW), "e2e_processing_latency": three},
        ],
    )
    lat = t["e2e_processing_latency"]
    assert lat["count"] == 4 and lat["host"] == "*"
    p99, p50 = lat["percentiles"]  # descending quantiles
    assert (p99["quantile"], p99["min"], p99["max"]) == (0.99, 100.0, 200.0)
    assert p99["average"] == pytest.approx(175.0) and p99["count"] == 4
    assert p50["quantile"] == 0.5 and p50["max"] == 50.0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6)
    ),
    max_leaves=30,
)
stat_keys = st.sampled_from(
    [
        "topic_name",
        "channels",
        "depth",
        "backend_depth",
        "clients",
        "channel_name",
        "e2e_processing_latency",
        "percentiles",
        "paused",
        "message_count",
        "connect_ts",
        "quantile",
        "value",
        "count",
    ]
)
stat_like = st.recursive(
    json_values,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(stat_keys, inner, max_size=8),
    max_leaves=40,
)


@settings(max_examples=60, deadline=None)
@given(stat_like)
def test_garbage_stats_never_crash_the_shapes(raw: Any) -> None:
    t = node_topic("n:1", "h", raw, NOW)
    agg = aggregate_topic(t["topic_name"], [t, node_topic("m:1", "h2", raw, NOW)])
    json.dumps(agg)  # always serialisable
    views = Views(Links("/"), refresh_ms=0, graphite=None, proxy_graphite=False)
    views.topic("t", agg)
    for c in agg["channels"]:
        views.channel("t", c["channel_name"] or "c", c)


def test_semver_orders_and_treats_garbage_as_zero() -> None:
    assert semver("1.3.0") > semver("1.2.1") > semver("1.2.1-alpha") > semver("0.3.8")
    assert semver("not a version") == semver("0.0.0")
    assert semver("v1.10.0") > semver("1.9.9")


def test_lookupd_nodes_are_merged_by_tcp_address_and_flagged_out_of_date() -> None:
    peer_a = {
        "remote_address": "127.0.0.1:1111",
        "hostname": "a",
        "broadcast_address": "a.lan",
        "tcp_port": 4150,
        "http_port": 4151,
        "version": "1.3.0",
        "topics": ["z", "t"],
        "tombstones": [False, True],
    }
    peer_old = {
        **peer_a,
        "broadcast_address": "b.lan",
        "hostname": "b",
        "version": "1.2.1",
        "topics": [],
        "tombstones": [],
    }
    nodes = merge_lookupd_nodes([("l1:4161", [peer_a, peer_old]), ("l2:4161", [peer_a])])
    assert [n.node for n in nodes] == ["a.lan:4151", "b.lan:4151"]
    a, b = nodes
    assert a.remote_addresses == ["l1:4161/127.0.0.1:1111", "l2:4161/127.0.0.1:1111"]
    assert a.to_json()["topics"] == [
        {"topic": "t", "tombstoned": True},
        {"topic": "z", "tombstoned": False},
    ]
    assert (a.out_of_date, b.out_of_date) == (False, True)
    assert set(a.to_json()) == {
        "remote_addresses",
        "remote_address",
        "hostname",
        "broadcast_address",
        "tcp_port",
        "http_port",
        "version",
        "topics",
        "out_of_date",
    }


def test_producer_node_is_broadcast_address_and_http_port() -> None:
    p = Producer(broadcast_address="10.1.2.3", http_port=4151, address="127.0.0.1:9")
    assert p.node == "10.1.2.3:4151" and p.http_address == "127.0.0.1:9"


# -- history -------------------------------------------------------------------------------


def test_history_rates_come_from_consecutive_counts() -> None:
    h = History(size=3)
    key = ("t", "", "*")
    for ts, count in [(10.0, 0), (12.0, 10), (13.0, 40), (14.0, 41)]:
        h.record(ts, {key: (count, count, 0, 0)})
    doc = h.series_json(key)
    assert doc["timestamps"] == [12.0, 13.0, 14.0]  # only the last `size` samples
    assert doc["rate"] == [5.0, 30.0, 1.0]
    assert h.latest_rate(key) == 1.0


def test_counter_reset_or_new_member_is_a_gap_not_a_spike() -> None:
    h = History(size=10)
    key = ("t", "", "*")
    h.record(1.0, {key: (100, 0, 0, 0)}, {key: "a"})
    h.record(2.0, {key: (5, 0, 0, 0)}, {key: "a"})  # reset
    h.record(3.0, {key: (500, 0, 0, 0)}, {key: "a,b"})  # node b joined the sum
    h.record(4.0, {key: (510, 0, 0, 0)}, {key: "a,b"})
    assert h.series_json(key)["rate"] == [None, None, None, 10.0]


def test_series_not_updated_for_a_whole_window_are_dropped() -> None:
    h = History(size=2)
    h.record(1.0, {("gone", "", "*"): (1, 1, 0, 0)})
    for ts in (2.0, 3.0):
        h.record(ts, {("kept", "", "*"): (1, 1, 0, 0)})
    assert h.get(("gone", "", "*")) is None and h.get(("kept", "", "*")) is not None
    assert h.series_json(("gone", "", "*"))["timestamps"] == []


keys = st.tuples(
    st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["", "x"]), st.sampled_from(["*", "n1"])
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.dictionaries(keys, st.tuples(*[st.integers(0, 10**6)] * 4), max_size=6), max_size=12
    ),
    st.integers(2, 5),
    st.integers(1, 6),
)
def test_history_stays_bounded(samples: list[dict[Any, Any]], size: int, max_series: int) -> None:
    h = History(size=size, max_series=max_series)
    for i, values in enumerate(samples):
        h.record(float(i), values)
        assert len(h) <= max_series
    for key in {k for values in samples for k in values}:
        doc = h.series_json(key)
        assert len(doc["timestamps"]) <= size
        assert all(r is None or r >= 0 for r in doc["rate"])


def test_samples_from_stats_sum_nodes_and_the_cluster_total() -> None:
    a = node_topic("a:1", "a", raw_topic("t", [raw_channel("c")]), NOW)
    b = node_topic("b:1", "b", raw_topic("t", [raw_channel("c", message_count=5)]), NOW)
    values, tags = samples_from_stats([a, b])
    assert values[("t", "", "*")] == (40, 14, 0, 0)
    assert values[("t", "c", "a:1")] == (10, 5, 1, 2)
    assert values[("t", "c", "*")] == (15, 10, 2, 4)
    assert values[TOTAL] == (15, 10, 2, 4)
    assert tags[("t", "c", "*")] == "a:1,b:1"


# -- graphite ------------------------------------------------------------------------------


def test_graphite_keys_follow_nsqds_statsd_names() -> None:
    assert statsd_prefix("nsq.%s", "10.0.0.1:4151") == "nsq.10_0_0_1_4151."
    kw = {
        "prefix": "nsq.%s",
        "counter_format": "stats.counters.%s.count",
        "gauge_format": "stats.gauges.%s",
        "node": "*",
        "topic": "t",
        "channel": "c",
    }
    assert (
        metric_key(metric="message_count", **kw)
        == "stats.counters.nsq.*.topic.t.channel.c.message_count.count"
    )
    assert metric_key(metric="depth", **kw) == "stats.gauges.nsq.*.topic.t.channel.c.depth"
    url = render_url("http://g:8080", "sumSeries(x)", 60, large=False, counter=True)
    assert url.startswith("http://g:8080/render?") and "width=120" in url
    assert "summarize%28sumSeries%28x%29%2C%2260sec%22%2C%22avg%22%29" in url


def test_graphite_rate_is_first_datapoint_over_interval() -> None:
    body = json.dumps([{"target": "x", "datapoints": [[120.0, 1], [3.0, 2]]}]).encode()
    assert rate_from_render(body, 60) == "2.00"
    assert rate_from_render(b'[{"target":"x","datapoints":[[null,1]]}]', 60) == "N/A"
    assert rate_from_render(b'[{"datapoints":[[-1,1]]}]', 60) == "N/A"


@given(st.binary(max_size=64) | json_values.map(lambda v: json.dumps(v).encode()))
def test_graphite_garbage_is_not_available(body: bytes) -> None:
    assert rate_from_render(body, 60) == "N/A" or float(rate_from_render(body, 60)) >= 0


# -- options and HTML ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want"),
    [("", "/"), ("/", "/"), ("admin", "/admin"), ("/admin/", "/admin"), ("//a//b/", "/a/b")],
)
def test_base_path_is_normalised_like_nsq(raw: str, want: str) -> None:
    assert normalize_base_path(raw) == want


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({}, "--nsqd-http-address or --lookupd-http-address required"),
        ({"nsqd_http_addresses": ["a:1"], "lookupd_http_addresses": ["b:2"]}, "not both"),
        ({"nsqd_http_addresses": ["nope"]}, "--nsqd-http-address 'nope'"),
        ({"nsqd_http_addresses": ["a:1"], "http_address": "x"}, "--http-address"),
        ({"nsqd_http_addresses": ["a:1"], "log_level": "loud"}, "--log-level"),
        ({"nsqd_http_addresses": ["a:1"], "graphite_url": "ftp://g"}, "--graphite-url"),
        ({"nsqd_http_addresses": ["a:1"], "proxy_graphite": True}, "--proxy-graphite"),
        ({"nsqd_http_addresses": ["a:1"], "http_client_tls_cert": "c"}, "--http-client-tls-key"),
        ({"nsqd_http_addresses": ["a:1"], "allow_config_from_cidr": "1.2.3"}, "CIDR"),
        (
            {"lookupd_http_addresses": ["a:1"], "cluster_tls_root_ca_file": "ca.pem"},
            "--cluster-tls-cert, --cluster-tls-key missing",
        ),
        (
            {
                "lookupd_http_addresses": ["a:1"],
                **dict.fromkeys(("cluster_tls_root_ca_file", "cluster_tls_cert"), "f"),
                "cluster_tls_key": "k",
                "http_client_tls_root_ca_file": "other.pem",
            },
            "both given: with the cluster.s certificates",
        ),
        ({"nsqd_http_addresses": ["a:1"], "stats_history_size": 1}, "--stats-history-size"),
    ],
)
def test_bad_options_name_the_flag(changes: dict[str, Any], message: str) -> None:
    opts = NsqAdminOptions(**changes)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        validate(opts)


def test_links_quote_ephemeral_names_and_keep_the_base_path() -> None:
    links = Links("/admin")
    assert links.channel("t#ephemeral", "c") == "/admin/topics/t%23ephemeral/c"
    assert links.node("127.0.0.1:4151") == "/admin/nodes/127.0.0.1:4151"
    assert Links("/").to() == "/"


def test_upstream_text_is_escaped_on_pages() -> None:
    evil = "<script>alert(1)</script>"
    views = ClusterViews(Links("/"), refresh_ms=0, graphite=None, proxy_graphite=False)
    node = {
        "broadcast_address": evil,
        "http_port": 1,
        "tcp_port": 2,
        "hostname": evil,
        "version": evil,
        "out_of_date": True,
        "remote_addresses": [],
        "topics": [{"topic": "t", "tombstoned": True}],
    }
    page = views.nodes([node], "", lookupd=False)
    assert "<script>" not in page and esc(evil) in page
    assert 'class="tombstoned"' in page and "out of date" in page


def test_durations_read_like_nsqadmins() -> None:
    assert duration_ns(90 * 10**9) == "1m30s"
    assert duration_ns(2 * 3600 * 10**9 + 5 * 60 * 10**9) == "2h5m"
    assert duration_ns(1_500_000) == "1.50ms"


def test_nsqadmin_reaches_the_daemons_only_over_http() -> None:
    """DESIGN: nsqadmin imports no daemon, broker, storage, client or test-kit code."""
    forbidden = (
        "nsqpy.nsqd",
        "nsqpy.lookupd",
        "nsqpy.broker",
        "nsqpy.storage",
        "nsqpy.cluster",
        "nsqpy.client",
        "nsqpy.testing",
        "nsqpy.tools",
        "nsqpy.spark",
    )
    bad = []
    for path in Path(nsqpy.nsqadmin.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            )
            bad += [f"{path.name}: {n}" for n in names if n.startswith(forbidden)]
    assert bad == []


def _request(authorization: str | None = None, peer: Any = ("127.0.0.1", 5000)) -> Any:
    from unittest.mock import Mock

    from aiohttp.test_utils import make_mocked_request

    transport = Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        peer if name == "peername" else default
    )
    headers = {} if authorization is None else {"Authorization": authorization}
    return make_mocked_request("POST", "/api/topics/t", headers=headers, transport=transport)


@pytest.mark.parametrize(
    ("authorization", "user"),
    [
        ("Basic YWxpY2U6c2VjcmV0", "alice"),  # alice:secret
        ("Basic YWxpY2U6", "alice"),  # alice: (empty password)
        ("Basic OnNlY3JldA==", ""),  # :secret (empty user)
        ("Basic YWxpY2U6czpz", "alice"),  # alice:s:s, split at the first colon
        ("basic YWxpY2U6c2VjcmV0", ""),  # the scheme is matched exactly, as Go's == does
        ("BASIC YWxpY2U6c2VjcmV0", ""),
        ("Basic YWxpY2U=", ""),  # "alice": no colon, no credential
        ("Basic YWxpY2U6c2VjcmV0 ", ""),  # not base64 (trailing space)
        ("Basic  YWxpY2U6c2VjcmV0", ""),  # two spaces: the token starts with one
        ("Basic YWxpY2U6c2VjcmV", ""),  # bad padding
        ("Basic", ""),
        ("Bearer YWxpY2U6c2VjcmV0", ""),
        (None, ""),
    ],
)
def test_basic_auth_user_reads_the_header_like_nsqadmin(
    authorization: str | None, user: str
) -> None:
    from nsqpy.nsqadmin.notify import basic_auth_user

    assert basic_auth_user(_request(authorization)) == user


@pytest.mark.parametrize(
    ("peer", "remote"),
    [
        (("127.0.0.1", 5000), "127.0.0.1:5000"),
        (("::1", 5000, 0, 0), "[::1]:5000"),  # Go's RemoteAddr brackets IPv6
        (("fe80::1%eth0", 80, 0, 2), "[fe80::1%eth0]:80"),
        ("/run/nsqadmin.sock", ""),  # a unix socket has no ip:port
        (None, ""),
    ],
)
def test_remote_ip_is_formatted_like_gos_remote_addr(peer: Any, remote: str) -> None:
    from nsqpy.nsqadmin.notify import action_json

    doc = action_json(_request(peer=peer), "pause_topic", "t")
    assert doc["remote_ip"] == remote
