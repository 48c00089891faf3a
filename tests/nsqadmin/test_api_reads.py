"""nsqadmin's JSON API, read side (SPEC 4), against a real nsqlookupd and two real nsqd.

Each test makes its own topics on the live stack, then checks nsqadmin's answer against
what the daemons themselves report.
"""

from __future__ import annotations

import asyncio

from nsqpy.testing import WireClient, eventually, http_request

from .helpers import AdminClient, MakeAdmin, Stack, registered, unique

TOPIC_KEYS = {
    "node",
    "hostname",
    "topic_name",
    "depth",
    "memory_depth",
    "backend_depth",
    "message_count",
    "nodes",
    "channels",
    "paused",
    "e2e_processing_latency",
    "message",
}
CHANNEL_KEYS = {
    "node",
    "hostname",
    "topic_name",
    "channel_name",
    "depth",
    "memory_depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "message_count",
    "nodes",
    "clients",
    "paused",
    "e2e_processing_latency",
}
CLIENT_KEYS = {
    "node",
    "remote_address",
    "version",
    "client_id",
    "hostname",
    "user_agent",
    "connect_ts",
    "connected",
    "in_flight_count",
    "ready_count",
    "finish_count",
    "requeue_count",
    "message_count",
    "sample_rate",
    "deflate",
    "snappy",
    "authed",
    "tls",
    "tls_cipher_suite",
    "tls_version",
}


def subscribe(stack: Stack, i: int, topic: str, channel: str, rdy: int) -> WireClient:
    c = WireClient(stack.nsqd[i].tcp_port)
    c.send(b"  V2")
    c.send(f"SUB {topic} {channel}\n".encode())
    assert c.read_frame() == (0, b"OK")
    c.send(f"RDY {rdy}\n".encode())
    return c


async def test_topics_are_the_sorted_union_of_lookupd_topics(
    stack: Stack, lookupd_admin: AdminClient
) -> None:
    b, a = unique("b"), unique("a")
    stack.pub(0, b, b"x")
    stack.pub(1, a, b"y")
    await registered(stack, a)
    await registered(stack, b)
    status, doc = await lookupd_admin.get("/api/topics")
    assert status == 200 and doc["message"] == ""
    mine = [t for t in doc["topics"] if t in (a, b)]
    assert mine == sorted([a, b]) and doc["topics"] == sorted(doc["topics"])


async def test_topic_aggregates_every_node_that_has_it(
    stack: Stack, lookupd_admin: AdminClient
) -> None:
    topic = unique()
    for i, n in ((0, 3), (1, 2)):
        stack.nsqd_post(i, f"/topic/create?topic={topic}")
        stack.nsqd_post(i, f"/channel/create?topic={topic}&channel=c")
        stack.pub(i, topic, *[b"m"] * n)
    await registered(stack, topic, nodes=2)
    status, doc = await lookupd_admin.get(f"/api/topics/{topic}")
    assert status == 200, doc
    assert set(doc) >= TOPIC_KEYS and doc["node"] == "*" and doc["topic_name"] == topic
    assert doc["message_count"] == 5
    assert sorted(n["node"] for n in doc["nodes"]) == sorted([stack.node(0), stack.node(1)])
    per_node = {n["node"]: n for n in doc["nodes"]}
    assert per_node[stack.node(0)]["message_count"] == 3
    truth = [stack.channel_stats(i, topic, "c") for i in (0, 1)]
    assert [c["channel_name"] for c in doc["channels"]] == ["c"]
    channel = doc["channels"][0]
    assert set(channel) >= CHANNEL_KEYS and channel["node"] == "*"
    assert channel["depth"] == sum(t["depth"] for t in truth if t)
    assert len(channel["nodes"]) == 2
    assert doc["depth"] == sum((stack.topic_stats(i, topic) or {})["depth"] for i in (0, 1))


async def test_channel_lists_per_node_stats_and_connected_clients(
    stack: Stack, lookupd_admin: AdminClient
) -> None:
    topic = unique()
    client = subscribe(stack, 0, topic, "c", rdy=3)
    try:
        await registered(stack, topic)
        stack.pub(0, topic, b"hello")
        client.read_frame()  # one message in flight, not finished

        async def in_flight() -> bool:
            status, doc = await lookupd_admin.get(f"/api/topics/{topic}/c")
            return status == 200 and doc["in_flight_count"] == 1

        await eventually(in_flight, what="message in flight")
        _, doc = await lookupd_admin.get(f"/api/topics/{topic}/c")
        assert set(doc) >= CHANNEL_KEYS | {"message"}
        assert doc["topic_name"] == topic and doc["channel_name"] == "c"
        assert [n["node"] for n in doc["nodes"]] == [stack.node(0)]
        [c] = doc["clients"]
        assert set(c) >= CLIENT_KEYS
        assert c["node"] == stack.node(0) and c["ready_count"] == 3 and c["in_flight_count"] == 1
        assert c["remote_address"].startswith("127.0.0.1:") and c["connected"] >= 0
    finally:
        client.close()


async def test_nodes_and_one_node(stack: Stack, lookupd_admin: AdminClient) -> None:
    topic = unique()
    stack.pub(1, topic, b"a", b"b")
    await registered(stack, topic)
    status, doc = await lookupd_admin.get("/api/nodes")
    assert status == 200 and doc["message"] == ""
    nodes = {f"{n['broadcast_address']}:{n['http_port']}": n for n in doc["nodes"]}
    assert set(nodes) >= {stack.node(0), stack.node(1)}
    n1 = nodes[stack.node(1)]
    assert n1["tcp_port"] == stack.nsqd[1].tcp_port and n1["version"] == "1.3.0"
    assert n1["remote_addresses"][0].startswith(f"{stack.lookupd_http}/127.0.0.1:")
    assert {"topic": topic, "tombstoned": False} in n1["topics"] and not n1["out_of_date"]

    status, node = await lookupd_admin.get(f"/api/nodes/{stack.node(1)}")
    assert status == 200 and node["node"] == stack.node(1)
    mine = [t for t in node["topics"] if t["topic_name"] == topic]
    assert mine and mine[0]["message_count"] == 2 and mine[0]["node"] == stack.node(1)
    assert node["total_messages"] >= 2 and node["total_clients"] >= 0

    status, missing = await lookupd_admin.get("/api/nodes/127.0.0.1:1")
    assert (status, missing) == (404, {"message": "NODE_NOT_FOUND"})


async def test_counter_counts_each_channel_on_each_node(
    stack: Stack, lookupd_admin: AdminClient
) -> None:
    topic = unique()
    stack.nsqd_post(0, f"/topic/create?topic={topic}")
    stack.nsqd_post(0, f"/channel/create?topic={topic}&channel=c")
    stack.pub(0, topic, b"1", b"2", b"3")
    await registered(stack, topic)
    status, doc = await lookupd_admin.get("/api/counter")
    assert status == 200 and doc["message"] == ""
    entry = doc["stats"][f"{topic}:c:{stack.node(0)}"]
    truth = stack.channel_stats(0, topic, "c")
    assert truth is not None
    assert entry == {
        "node": stack.node(0),
        "topic_name": topic,
        "channel_name": "c",
        "message_count": truth["message_count"],
    }


async def test_inactive_topics_are_registered_without_producers(
    stack: Stack, lookupd_admin: AdminClient, nsqd_admin: AdminClient
) -> None:
    topic = unique("inactive")

    status, _, _ = http_request(
        "POST", f"http://{stack.lookupd_http}/channel/create?topic={topic}&channel=c"
    )
    assert status == 200
    status, doc = await lookupd_admin.get("/api/topics?inactive=true")
    assert status == 200 and doc["topics"][topic] == ["c"]
    status, doc = await nsqd_admin.get("/api/topics?inactive=true")
    assert status == 200 and doc["topics"] == {}  # no lookupd: nothing is "inactive"


async def test_nsqd_mode_reads_the_static_list(stack: Stack, nsqd_admin: AdminClient) -> None:
    topic = unique()
    stack.pub(0, topic, b"x")
    stack.pub(1, topic, b"y", b"z")
    status, doc = await nsqd_admin.get("/api/topics")
    assert status == 200 and topic in doc["topics"]
    status, doc = await nsqd_admin.get(f"/api/topics/{topic}")
    assert status == 200 and doc["message_count"] == 3 and len(doc["nodes"]) == 2
    status, doc = await nsqd_admin.get("/api/nodes")
    assert sorted(f"{n['broadcast_address']}:{n['http_port']}" for n in doc["nodes"]) == sorted(
        [stack.node(0), stack.node(1)]
    )
    assert all(n["remote_addresses"] == [] for n in doc["nodes"])


async def test_unknown_topic_and_channel_are_404(
    stack: Stack, lookupd_admin: AdminClient, nsqd_admin: AdminClient
) -> None:
    for admin in (lookupd_admin, nsqd_admin):
        assert await admin.get(f"/api/topics/{unique('nope')}") == (
            404,
            {"message": "TOPIC_NOT_FOUND"},
        )
    topic = unique()
    stack.pub(0, topic, b"x")
    await registered(stack, topic)
    for admin in (lookupd_admin, nsqd_admin):
        assert await admin.get(f"/api/topics/{topic}/nochannel") == (
            404,
            {"message": "CHANNEL_NOT_FOUND"},
        )


async def test_unreachable_nodes_are_named_in_a_warning(
    stack: Stack, make_admin: MakeAdmin
) -> None:
    topic = unique()
    stack.pub(0, topic, b"x")
    dead = "127.0.0.1:1"
    partial = await make_admin(nsqd_http_addresses=[stack.nsqd_http(0), dead])
    for path in ("/api/topics", "/api/nodes", f"/api/topics/{topic}", "/api/counter"):
        status, doc = await partial.get(path)
        assert status == 200, (path, doc)
        assert doc["message"].startswith("WARNING: ") and dead in doc["message"], path
    status, doc = await partial.get(f"/api/topics/{topic}")
    assert doc["message_count"] == 1

    lookupd_partial = await make_admin(lookupd_http_addresses=[stack.lookupd_http, dead])
    status, doc = await lookupd_partial.get("/api/nodes")
    assert status == 200 and dead in doc["message"] and len(doc["nodes"]) >= 2


async def test_a_cluster_that_does_not_answer_is_a_502(make_admin: MakeAdmin) -> None:
    for mode in ("nsqd_http_addresses", "lookupd_http_addresses"):
        admin = await make_admin(
            **{mode: ["127.0.0.1:1", "127.0.0.1:2"]}, http_client_connect_timeout_ms=500
        )
        for path in (
            "/api/topics",
            "/api/nodes",
            "/api/counter",
            "/api/topics/t",
            "/api/topics/t/c",
            "/api/nodes/127.0.0.1:1",
        ):
            status, doc = await admin.get(path)
            assert status == 502, (mode, path, doc)
            assert doc["message"].startswith("UPSTREAM_ERROR: ")
            assert "127.0.0.1:1" in doc["message"] and "connection refused" in doc["message"]


async def test_a_node_that_never_answers_times_out(make_admin: MakeAdmin) -> None:
    """A listener that accepts and stays silent costs one request timeout, then a 502."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    silent = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    try:
        admin = await make_admin(
            nsqd_http_addresses=[f"127.0.0.1:{port}"], http_client_request_timeout_ms=300
        )
        started = asyncio.get_running_loop().time()
        status, doc = await admin.get("/api/nodes")
        elapsed = asyncio.get_running_loop().time() - started
        assert status == 502 and "timed out" in doc["message"], doc
        assert 0.25 < elapsed < 3
    finally:
        for writer in held:
            writer.close()
            await writer.wait_closed()
        silent.close()
        await silent.wait_closed()
