"""nsqadmin's JSON API, actions (SPEC 4): pause/unpause/empty, delete, create, tombstone,
the --admin-user ACL and --notification-http-endpoint, checked in the daemons themselves."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from nsqpy.testing import eventually, http_request, serve_http

from .helpers import AdminClient, MakeAdmin, Stack, registered, unique


def on_both(stack: Stack, topic: str, channel: str = "c") -> None:
    for i in (0, 1):
        stack.nsqd_post(i, f"/topic/create?topic={topic}")
        stack.nsqd_post(i, f"/channel/create?topic={topic}&channel={channel}")


async def test_pause_and_unpause_reach_every_nsqd_with_the_topic(
    stack: Stack, lookupd_admin: AdminClient
) -> None:
    topic = unique()
    on_both(stack, topic)
    await registered(stack, topic, nodes=2)
    path = f"/api/topics/{topic}"
    assert await lookupd_admin.post(path, {"action": "pause"}) == (200, {"message": ""})
    assert all(stack.topic_stats(i, topic)["paused"] for i in (0, 1))  # type: ignore[index]
    assert await lookupd_admin.post(f"{path}/c", {"action": "pause"}) == (200, {"message": ""})
    assert all(stack.channel_stats(i, topic, "c")["paused"] for i in (0, 1))  # type: ignore[index]
    _, doc = await lookupd_admin.get(path)
    assert doc["paused"] and doc["channels"][0]["paused"]

    assert await lookupd_admin.post(path, {"action": "unpause"}) == (200, {"message": ""})
    assert await lookupd_admin.post(f"{path}/c", {"action": "unpause"}) == (200, {"message": ""})
    assert not any(stack.topic_stats(i, topic)["paused"] for i in (0, 1))  # type: ignore[index]
    assert not any(stack.channel_stats(i, topic, "c")["paused"] for i in (0, 1))  # type: ignore[index]


async def test_empty_channel_and_topic(stack: Stack, nsqd_admin: AdminClient) -> None:
    topic = unique()
    stack.nsqd_post(0, f"/topic/create?topic={topic}")
    stack.nsqd_post(0, f"/channel/create?topic={topic}&channel=c")
    stack.pub(0, topic, b"1", b"2", b"3")
    await eventually(lambda: stack.channel_stats(0, topic, "c")["depth"] == 3)  # type: ignore[index]
    assert await nsqd_admin.post(f"/api/topics/{topic}/c", {"action": "empty"}) == (
        200,
        {"message": ""},
    )
    assert stack.channel_stats(0, topic, "c")["depth"] == 0  # type: ignore[index]
    assert await nsqd_admin.post(f"/api/topics/{topic}", {"action": "empty"}) == (
        200,
        {"message": ""},
    )
    assert stack.topic_stats(0, topic)["depth"] == 0  # type: ignore[index]


async def test_delete_channel_then_topic_everywhere(
    stack: Stack, lookupd_admin: AdminClient
) -> None:
    topic = unique()
    on_both(stack, topic)
    await registered(stack, topic, nodes=2)
    assert await lookupd_admin.delete(f"/api/topics/{topic}/c") == (200, {"message": ""})
    assert all(stack.channel_stats(i, topic, "c") is None for i in (0, 1))
    assert await lookupd_admin.delete(f"/api/topics/{topic}") == (200, {"message": ""})
    assert all(stack.topic_stats(i, topic) is None for i in (0, 1))
    await eventually(lambda: topic not in stack.lookupd_get("/topics")[1]["topics"])
    assert await lookupd_admin.get(f"/api/topics/{topic}") == (404, {"message": "TOPIC_NOT_FOUND"})


async def test_create_topic_and_channel(
    stack: Stack, lookupd_admin: AdminClient, nsqd_admin: AdminClient
) -> None:
    topic = unique()
    assert await lookupd_admin.post("/api/topics", {"topic": topic, "channel": "c"}) == (
        200,
        {"message": ""},
    )
    assert topic in stack.lookupd_get("/topics")[1]["topics"]
    assert stack.lookupd_get(f"/channels?topic={topic}")[1]["channels"] == ["c"]

    # With nsqd addresses only, the topic and channel are made on every nsqd.
    other = unique()
    assert await nsqd_admin.post("/api/topics", {"topic": other, "channel": "d"}) == (
        200,
        {"message": ""},
    )
    assert all(stack.channel_stats(i, other, "d") is not None for i in (0, 1))

    # lookupd mode: a channel of a topic some nsqd has is made on that nsqd too.
    stack.nsqd_post(1, f"/topic/create?topic={topic}")
    await registered(stack, topic)
    assert await lookupd_admin.post("/api/topics", {"topic": topic, "channel": "e"}) == (
        200,
        {"message": ""},
    )
    assert stack.channel_stats(1, topic, "e") is not None


async def test_tombstone_hides_the_producer_and_deletes_the_topic_there(
    stack: Stack, lookupd_admin: AdminClient
) -> None:
    topic = unique()
    on_both(stack, topic)
    await registered(stack, topic, nodes=2)
    node = stack.node(0)
    assert await lookupd_admin.delete(f"/api/nodes/{node}", {"topic": topic}) == (
        200,
        {"message": ""},
    )
    assert stack.topic_stats(0, topic) is None and stack.topic_stats(1, topic) is not None
    _, lookup = stack.lookupd_get(f"/lookup?topic={topic}")
    assert [f"{p['broadcast_address']}:{p['http_port']}" for p in lookup["producers"]] == [
        stack.node(1)
    ]


async def test_tombstone_in_nsqd_mode_deletes_the_topic_on_that_node(
    stack: Stack, nsqd_admin: AdminClient
) -> None:
    topic = unique()
    on_both(stack, topic)
    assert await nsqd_admin.delete(f"/api/nodes/{stack.node(1)}", {"topic": topic}) == (
        200,
        {"message": ""},
    )
    assert stack.topic_stats(1, topic) is None and stack.topic_stats(0, topic) is not None
    assert await nsqd_admin.delete("/api/nodes/127.0.0.1:1", {"topic": topic}) == (
        404,
        {"message": "NODE_NOT_FOUND"},
    )


async def test_actions_on_missing_things_are_404(stack: Stack, nsqd_admin: AdminClient) -> None:
    missing = unique("missing")
    for method, path, body in [
        ("POST", f"/api/topics/{missing}", {"action": "pause"}),
        ("POST", f"/api/topics/{missing}/c", {"action": "empty"}),
        ("DELETE", f"/api/topics/{missing}", None),
        ("DELETE", f"/api/topics/{missing}/c", None),
    ]:
        assert await nsqd_admin.call(method, path, body) == (404, {"message": "TOPIC_NOT_FOUND"})
    topic = unique()
    stack.pub(0, topic, b"x")
    assert await nsqd_admin.post(f"/api/topics/{topic}/nochannel", {"action": "pause"}) == (
        404,
        {"message": "CHANNEL_NOT_FOUND"},
    )


async def test_admin_users_only_may_act(stack: Stack, make_admin: MakeAdmin) -> None:
    topic = unique()
    stack.pub(0, topic, b"x")
    admin = await make_admin(nsqd_http_addresses=[stack.nsqd_http(0)], admin_users=["alice", "bob"])
    forbidden = (403, {"message": "FORBIDDEN"})
    actions: list[tuple[str, str, Any]] = [
        ("POST", f"/api/topics/{topic}", {"action": "pause"}),
        ("POST", f"/api/topics/{topic}/c", {"action": "pause"}),
        ("POST", "/api/topics", {"topic": topic}),
        ("DELETE", f"/api/topics/{topic}/c", None),
        ("DELETE", f"/api/topics/{topic}", None),
        ("DELETE", f"/api/nodes/{stack.node(0)}", {"topic": topic}),
    ]
    for method, path, body in actions:
        assert await admin.call(method, path, body) == forbidden
        assert (
            await admin.call(method, path, body, headers={"X-Forwarded-User": "eve"}) == forbidden
        )
    assert stack.topic_stats(0, topic) is not None and not stack.topic_stats(0, topic)["paused"]  # type: ignore[index]
    status, _ = await admin.get(f"/api/topics/{topic}")  # reading needs no rights
    assert status == 200
    assert await admin.post(
        f"/api/topics/{topic}", {"action": "pause"}, headers={"X-Forwarded-User": "bob"}
    ) == (200, {"message": ""})
    assert stack.topic_stats(0, topic)["paused"]  # type: ignore[index]

    custom = await make_admin(
        nsqd_http_addresses=[stack.nsqd_http(0)],
        admin_users=["alice"],
        acl_http_header="X-Remote-User",
    )
    assert (
        await custom.post(
            f"/api/topics/{topic}", {"action": "unpause"}, headers={"X-Forwarded-User": "alice"}
        )
        == forbidden
    )
    assert await custom.post(
        f"/api/topics/{topic}", {"action": "unpause"}, headers={"X-Remote-User": "alice"}
    ) == (200, {"message": ""})


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, asyncio.Queue[dict[str, Any]]]]:
    """An HTTP endpoint that records the JSON notifications posted to it."""
    got: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def handle(request: web.Request) -> web.Response:
        assert request.content_type == "application/json"
        await got.put(json.loads(await request.read()))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/notify", handle)
    async with serve_http(app) as port:
        yield f"http://127.0.0.1:{port}/notify", got


async def test_every_action_is_notified(
    stack: Stack, make_admin: MakeAdmin, receiver: tuple[str, asyncio.Queue[dict[str, Any]]]
) -> None:
    url, got = receiver
    admin = await make_admin(
        lookupd_http_addresses=[stack.lookupd_http], notification_http_endpoint=url
    )
    topic = unique()
    on_both(stack, topic)
    await registered(stack, topic, nodes=2)
    auth = {"Authorization": "Basic YWxpY2U6c2VjcmV0", "User-Agent": "test-agent"}  # alice:secret
    steps: list[tuple[str, str, Any, list[str]]] = [
        (
            "POST",
            "/api/topics",
            {"topic": topic, "channel": "d"},
            ["create_topic", "create_channel"],
        ),
        ("POST", f"/api/topics/{topic}", {"action": "pause"}, ["pause_topic"]),
        ("POST", f"/api/topics/{topic}", {"action": "unpause"}, ["unpause_topic"]),
        ("POST", f"/api/topics/{topic}", {"action": "empty"}, ["empty_topic"]),
        ("POST", f"/api/topics/{topic}/c", {"action": "pause"}, ["pause_channel"]),
        ("POST", f"/api/topics/{topic}/c", {"action": "unpause"}, ["unpause_channel"]),
        ("POST", f"/api/topics/{topic}/c", {"action": "empty"}, ["empty_channel"]),
        ("DELETE", f"/api/topics/{topic}/d", None, ["delete_channel"]),
        ("DELETE", f"/api/nodes/{stack.node(0)}", {"topic": topic}, ["tombstone_topic_producer"]),
        ("DELETE", f"/api/topics/{topic}", None, ["delete_topic"]),
    ]
    for method, path, body, actions in steps:
        status, doc = await admin.call(method, path, body, headers=auth)
        assert status == 200, (path, doc)
        for action in actions:
            note = await asyncio.wait_for(got.get(), 5)
            assert note["action"] == action and note["topic"] == topic
            assert note["user"] == "alice" and note["user_agent"] == "test-agent"
            assert note["url"] == f"{admin.url}{path}" and note["via"]
            assert note["remote_ip"].startswith("127.0.0.1:")
            assert abs(note["timestamp"] - time.time()) < 60
            if action.endswith("_channel"):
                assert note["channel"] in ("c", "d")
            else:
                assert "channel" not in note
            if action == "tombstone_topic_producer":
                assert note["node"] == stack.node(0)
            else:
                assert "node" not in note


async def test_a_dead_notification_endpoint_never_delays_actions(
    stack: Stack, make_admin: MakeAdmin
) -> None:
    topic = unique()
    stack.pub(0, topic, b"x")
    admin = await make_admin(
        nsqd_http_addresses=[stack.nsqd_http(0)],
        notification_http_endpoint="http://127.0.0.1:1/notify",
    )
    assert await admin.post(f"/api/topics/{topic}", {"action": "pause"}) == (200, {"message": ""})
    assert stack.topic_stats(0, topic)["paused"]  # type: ignore[index]


async def test_partial_failure_of_an_action_is_a_warning(
    stack: Stack, make_admin: MakeAdmin
) -> None:
    topic = unique()
    stack.pub(0, topic, b"x")
    # lookupd mode with one dead lookupd: the action still happens, the dead one is named.
    admin = await make_admin(lookupd_http_addresses=[stack.lookupd_http, "127.0.0.1:1"])
    await registered(stack, topic)
    status, doc = await admin.post(f"/api/topics/{topic}", {"action": "pause"})
    assert (
        status == 200 and doc["message"].startswith("WARNING: ") and "127.0.0.1:1" in doc["message"]
    )
    assert stack.topic_stats(0, topic)["paused"]  # type: ignore[index]
    status, _, _ = http_request("POST", f"http://{stack.nsqd_http(0)}/topic/unpause?topic={topic}")
    assert status == 200
