"""nsqadmin's message trace: a page and a JSON route over every nsqd's ``/message/trace``.

Owns ``GET /api/trace`` (``topic`` and ``id``, or ``trace_id`` with an optional
``topic``): it asks the nsqd that have the topic (every nsqd when no topic is given),
merges their events in time order, each marked with the node it came from, and answers
``{"events": [...], "message": warning}`` like the other API routes (a node that does
not trace, such as NSQ's own nsqd, is a warning; a bad argument an ``HttpError``, the
cluster's failures mapped by the app's middleware as for the API). And ``GET /trace``, the
page: a form and the table of a message's life (published, delivered, requeued, timed out,
finished, dead-lettered, expired), with its errors rendered on the page. Given an
``AdminContext``; imports aiohttp, ``nsqpy.httpapi`` and nsqadmin's cluster, context and
render helpers, never ``api`` or ``server``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from nsqpy.httpapi import HttpError
from nsqpy.nsqadmin.cluster import AllFailed, Errors, NotFound, fan_out
from nsqpy.nsqadmin.context import AdminContext
from nsqpy.nsqadmin.render import Links, alert, attrs, esc, layout, table
from nsqpy.nsqadmin.stats import as_list
from nsqpy.protocol.names import valid_topic_name

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_MSG_ID = re.compile(r"[0-9a-f]{16}")
_DIGITS = re.compile(r"[0-9]{1,20}")
COLUMNS = ("time", "event", "node", "channel", "client", "attempt", "id", "trace id", "detail")


def routes(trace: Trace) -> list[tuple[str, str, Handler]]:
    return [("GET", "/api/trace", trace.api), ("GET", "/trace", trace.page)]


def _query(request: web.Request) -> dict[str, str]:
    """The trace query from the URL, checked; an HttpError names the bad argument."""
    q = request.rel_url.query
    topic, msg_id, trace_id = (q.get(k, "").strip() for k in ("topic", "id", "trace_id"))
    if topic and not valid_topic_name(topic):
        raise HttpError(400, "INVALID_TOPIC")
    if msg_id:
        if _MSG_ID.fullmatch(msg_id) is None:
            raise HttpError(400, "INVALID_MESSAGE_ID")
        if not topic:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        return {"topic": topic, "id": msg_id}
    if trace_id:
        if _DIGITS.fullmatch(trace_id) is None or not 0 < int(trace_id) < 1 << 64:
            raise HttpError(400, "INVALID_TRACE_ID")
        return {"trace_id": trace_id, **({"topic": topic} if topic else {})}
    raise HttpError(400, "MISSING_ARG_ID")


class Trace:
    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx
        self.links = Links(ctx.opts.base_path)

    async def events(self, params: dict[str, str], errors: Errors) -> list[dict[str, Any]]:
        """The merged events of every nsqd asked, oldest first."""
        cluster = self.ctx.cluster
        topic = params.get("topic", "")
        producers = (
            await cluster.topic_producers(topic, errors)
            if topic
            else await cluster.producers(errors)
        )
        if not producers:
            return []
        nodes = {p.http_address: p.node for p in producers}

        async def one(address: str) -> list[dict[str, Any]]:
            doc = await self.ctx.upstream.get_object(address, "/message/trace", params)
            return [
                {**e, "node": nodes[address]}
                for e in as_list(doc.get("events"))
                if isinstance(e, dict)
            ]

        replies = await fan_out(list(nodes), one, errors, "nsqd")
        merged = [e for _, events in replies for e in events]
        merged.sort(key=lambda e: (int(e.get("timestamp") or 0), str(e.get("node"))))
        return merged

    async def api(self, request: web.Request) -> web.StreamResponse:
        params = _query(request)
        errors = Errors()
        events = await self.events(params, errors)
        return web.json_response({"events": events, "message": errors.warning()})

    async def page(self, request: web.Request) -> web.StreamResponse:
        q = request.rel_url.query
        errors = Errors()
        body, error, status = "", "", 200
        if any(q.get(k) for k in ("id", "trace_id")):
            try:
                events = await self.events(_query(request), errors)
                body = self.events_table(events)
            except HttpError as exc:
                status, error = exc.status, f"{exc.code}: check the message ID or trace ID"
            except (AllFailed, NotFound) as exc:
                status, error = 502, f"UPSTREAM_ERROR: {exc}"
        html = layout(
            self.links,
            title="Message trace",
            active="trace",
            body=self.form(q.get("topic", ""), q.get("id", ""), q.get("trace_id", "")) + body,
            warnings=errors.items,
            error=error,
        )
        return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")

    def form(self, topic: str, msg_id: str, trace_id: str) -> str:
        def field(name: str, value: str, hint: str) -> str:
            return f"<input{attrs(name=name, value=value, placeholder=hint, aria_label=hint)}> "

        return (
            f'<h1>Message trace</h1><form class="trace" method="get"'
            f"{attrs(action=self.links.to('trace'))}>"
            + field("topic", topic, "topic")
            + field("id", msg_id, "message ID (16 hex)")
            + field("trace_id", trace_id, "or trace ID")
            + '<button type="submit" class="btn">Find</button></form>'
            "<p>Events are recorded while tracing is on for the topic or channel "
            "(nsqd <code>POST /message/trace/enable</code>).</p>"
        )

    def events_table(self, events: list[dict[str, Any]]) -> str:
        if not events:
            return alert("info", "No trace events for this message.")
        rows = []
        for e in events:
            ts = int(e.get("timestamp") or 0)
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts // 1_000_000_000))
            when += f".{ts % 1_000_000_000 // 1_000_000:03d}Z"
            topic, channel = str(e.get("topic", "")), str(e.get("channel", ""))
            where = (
                f"<a{attrs(href=self.links.channel(topic, channel))}>{esc(channel)}</a>"
                if channel
                else "&ndash;"
            )
            rows.append(
                [
                    esc(when),
                    esc(e.get("event", "")),
                    esc(e.get("node", "")),
                    where,
                    esc(e.get("client", "")),
                    esc(e.get("attempts", "")),
                    esc(e.get("id", "")),
                    esc(e.get("trace_id") or ""),
                    esc(e.get("detail", "")),
                ]
            )
        return table(COLUMNS, rows, table_id="trace-events")
