"""HTTP in tests: blocking calls (``urllib``) answering (status, body, headers), error
statuses too; nsqd's ``/stats`` read that way (``nsqd_stats``, ``topic_stats``,
``channel_stats``) for a daemon in another process (an in-process one would be blocked by
the call); and ``serve_http``, a stub server (an auth server, a graphite, a lookupd) on a
free loopback port. The standard library only, but for aiohttp in ``serve_http``.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

    from aiohttp import web


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes, dict[str, str]]:
    return http_request("GET", url, timeout=timeout)


def http_request(
    method: str, url: str, body: bytes | None = None, timeout: float = 5.0
) -> tuple[int, bytes, dict[str, str]]:
    """One HTTP request; returns (status, body, headers) also for error statuses."""
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as err:
        with err:  # (closed now: left to the collector, its socket warns in a later test)
            return err.code, err.read(), dict(err.headers)


def nsqd_stats(http: str, topic: str = "") -> dict[str, Any]:
    """nsqd's ``/stats?format=json`` (of ``topic`` only, when given) at ``http``
    (``http://host:port``); the request must succeed."""
    query = f"&topic={urllib.parse.quote(topic)}" if topic else ""
    status, body, _ = http_get(f"{http}/stats?format=json{query}")
    assert status == 200, body
    doc = json.loads(body)
    assert isinstance(doc, dict)
    return doc


def topic_stats(http: str, topic: str) -> dict[str, Any]:
    """One topic's entry in nsqd's ``/stats``; the topic must exist."""
    for found in nsqd_stats(http, topic)["topics"] or []:
        if found["topic_name"] == topic:
            assert isinstance(found, dict)
            return found
    raise AssertionError(f"nsqd at {http} has no topic {topic!r}")


def channel_stats(http: str, topic: str, channel: str) -> dict[str, Any]:
    """One channel's entry in nsqd's ``/stats``; the channel must exist."""
    for found in topic_stats(http, topic)["channels"] or []:
        if found["channel_name"] == channel:
            assert isinstance(found, dict)
            return found
    raise AssertionError(f"nsqd at {http} has no channel {topic!r}/{channel!r}")


@contextlib.asynccontextmanager
async def serve_http(
    app: web.Application, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[int]:
    """Serve ``app`` on 127.0.0.1 (over TLS with ``ssl_context``) at a free port, which is
    yielded, until the block ends."""
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()
