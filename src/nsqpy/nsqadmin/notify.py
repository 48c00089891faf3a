"""Admin-action notifications (``--notification-http-endpoint``), as NSQ's nsqadmin sends them.

Owns the notification JSON (SPEC 4: action, topic, channel?, node?, timestamp, user?,
remote_ip, user_agent, url, via) and its delivery: actions are queued and POSTed as
``application/json`` by one background task, so a slow or dead endpoint never delays an
admin's request. The queue is bounded; when it is full a notification is dropped with a
warning. Imports aiohttp (for the request type) and the upstream client.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import time
from typing import Any

from aiohttp import web

from nsqpy.daemon import cancel_and_wait
from nsqpy.nsqadmin.upstream import Upstream, UpstreamError

log = logging.getLogger("nsqpy.nsqadmin")

ACTIONS = frozenset(
    {
        "create_topic",
        "create_channel",
        "delete_topic",
        "delete_channel",
        "empty_topic",
        "empty_channel",
        "pause_topic",
        "unpause_topic",
        "pause_channel",
        "unpause_channel",
        "tombstone_topic_producer",
        # nsqpy's cluster operations (an nsqpy cluster's lookupd)
        "expand_topic",
        "move_topic",
        "remove_node",
    }
)


def basic_auth_user(request: web.Request) -> str:
    """The user name of an HTTP basic ``Authorization`` header, or "", as NSQ's nsqadmin
    reads it: the scheme exactly ``Basic`` (case matters), one space, standard padded
    base64 of ``user:password`` (a credential without ``:`` names nobody)."""
    scheme, space, token = request.headers.get("Authorization", "").partition(" ")
    if scheme != "Basic" or not space:
        return ""
    try:
        decoded = base64.b64decode(token, validate=True).decode("utf-8", errors="replace")
    except ValueError:
        return ""
    user, colon, _ = decoded.partition(":")
    return user if colon else ""


def remote_addr(request: web.Request) -> str:
    """The peer as Go's ``Request.RemoteAddr`` shows it: ``ip:port``, IPv6 in brackets."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if not isinstance(peer, tuple) or len(peer) < 2:
        return ""
    host = str(peer[0])
    return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"


def action_json(
    request: web.Request, action: str, topic: str, channel: str = "", node: str = ""
) -> dict[str, Any]:
    """NSQ's AdminAction: empty channel/node/user are left out."""
    scheme = "https" if request.secure or request.headers.get("X-Scheme") == "https" else "http"
    url = f"{scheme}://{request.host}{request.rel_url}"
    remote = remote_addr(request)
    doc: dict[str, Any] = {"action": action, "topic": topic}
    if channel:
        doc["channel"] = channel
    if node:
        doc["node"] = node
    doc["timestamp"] = int(time.time())
    user = basic_auth_user(request)
    if user:
        doc["user"] = user
    doc.update(
        remote_ip=remote,
        user_agent=request.headers.get("User-Agent", ""),
        url=url,
        via=socket.gethostname(),
    )
    return doc


class Notifier:
    """Queues admin actions and POSTs each to the endpoint from one background task."""

    def __init__(self, upstream: Upstream, endpoint: str, capacity: int = 1000) -> None:
        self.upstream = upstream
        self.endpoint = endpoint
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(capacity)
        self.sent = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.endpoint and self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    def notify(
        self, request: web.Request, action: str, topic: str, channel: str = "", node: str = ""
    ) -> None:
        assert action in ACTIONS, action
        if not self.endpoint:
            return
        try:
            self.queue.put_nowait(action_json(request, action, topic, channel, node))
        except asyncio.QueueFull:
            log.warning("notification queue full, dropping %s %s", action, topic)

    async def _run(self) -> None:
        while True:
            doc = await self.queue.get()
            body = json.dumps(doc).encode()
            try:
                await self.upstream.request(
                    "POST",
                    self.endpoint,
                    data=body,
                    headers={"Content-Type": "application/json"},
                )
                self.sent += 1
            except UpstreamError as exc:
                log.warning("notification %s failed: %s", doc["action"], exc)
