"""nsqd's HTTP routes beyond NSQ: replay, dead letters, TTL, depth bounds and tracing.

Owns the routes below (added to nsqd's app by ``add_feature_routes``), their argument
checks and the small helpers ``/pub`` uses for a trace ID. Where Youzan's NSQ has the same
feature the form is theirs (``/channel/setoffset`` with a ``type:value`` body,
``/message/trace/enable`` and ``/disable``); the rest follows nsqd's conventions: query
arguments, V1 responses, errors as ``{"message": CODE}``. Every check runs before
anything changes. README.md ("Beyond NSQ") documents them. Imports aiohttp,
``nsqpy.httpapi``, the nsqd parameter parsers and the broker; the server only for typing.

Routes::

    POST /channel/setoffset?topic=T&channel=C[&partition=P]   body: a position
        (``msgcount:N``, ``offset:N``, ``timestamp:S``, ``special:-1`` newest,
        ``special:-2`` oldest) -> {"topic", "channel", "partitions": [{"partition", "offset"}]}
        (every partition of the topic, or partition P only; see ``broker.replay``)
    POST /channel/setmaxattempts?topic=T&channel=C&max_attempts=N[&dead_letter_topic=D]
    POST /topic/setttl?topic=T&ttl=<ms | Go duration, 0 = off>
    POST /topic/setmaxdepth?topic=T&max_depth=N[&policy=refuse|drop_oldest]
    POST /message/trace/enable?topic=T[&channel=C], POST /message/trace/disable?...
    GET  /message/trace?topic=T&id=<16 hex>  or  ?trace_id=N[&topic=T]  [&limit=N]
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from aiohttp import web

from nsqpy.broker.policy import (
    DEPTH_POLICIES,
    MAX_ATTEMPTS,
    dead_letter_name,
    valid_dead_letter_topic,
)
from nsqpy.broker.replay import BadPosition, channel_partitions, parse_position, set_offset
from nsqpy.durations import parse_duration
from nsqpy.errors import ConfigError
from nsqpy.httpapi import v1_error, v1_json
from nsqpy.nsqd.params import BadQuery, parse_query
from nsqpy.protocol.names import valid_channel_name, valid_topic_name
from nsqpy.storage.tracestore import TraceEvent

if TYPE_CHECKING:
    from nsqpy.broker.topic import Topic
    from nsqpy.nsqd.server import NsqdServer

MAX_POSITION_BODY = 1024
MAX_TTL_MS = 10 * 365 * 86_400_000  # ten years
MAX_DEPTH = (1 << 53) - 1
MAX_TRACE_LIMIT = 10_000
_DIGITS = re.compile(r"[0-9]{1,20}")
_MSG_ID = re.compile(r"[0-9a-fA-F]{16}")

Args = dict[str, list[str]]


def http_source(request: web.Request) -> str:
    """How a traced HTTP publish names its client."""
    return f"http@{request.remote or ''}"


def parse_trace_id(raw: str | None) -> int | None:
    """A u64 trace ID in decimal (absent = 0); None when it is not one."""
    if raw is None:
        return 0
    if _DIGITS.fullmatch(raw) is None or int(raw) >= 1 << 64:
        return None
    return int(raw)


def _uint(raw: str | None, limit: int) -> int | None:
    if raw is None or _DIGITS.fullmatch(raw) is None or int(raw) > limit:
        return None
    return int(raw)


def _ttl_ms(raw: str) -> int | None:
    """Milliseconds as an integer, or a Go duration ("90s", "24h"); None when neither."""
    if _DIGITS.fullmatch(raw) is not None:
        value = int(raw)
    else:
        try:
            value = round(parse_duration(raw) * 1000)
        except ConfigError:
            return None
    return value if 0 <= value <= MAX_TTL_MS else None


def _event_doc(e: TraceEvent) -> dict[str, object]:
    return {
        "timestamp": e.ts,
        "event": e.event,
        "topic": e.topic,
        "channel": e.channel,
        "partition": e.partition,
        "offset": e.offset,
        "id": e.msg_id,
        "trace_id": e.trace_id,
        "client": e.client,
        "attempts": e.attempts,
        "detail": e.detail,
    }


class FeatureApi:
    def __init__(self, server: NsqdServer) -> None:
        self.server = server
        self.broker = server.broker
        self.features = server.broker.features

    # -- arguments -------------------------------------------------------------------

    @staticmethod
    def _args(request: web.Request) -> Args | web.Response:
        try:
            return parse_query(request.rel_url.raw_query_string)
        except BadQuery:
            return v1_error("INVALID_REQUEST", 400)

    @staticmethod
    def _first(args: Args, name: str) -> str | None:
        values = args.get(name)
        return values[0] if values else None

    def _topic(self, args: Args) -> Topic | web.Response:
        name = self._first(args, "topic")
        if name is None:
            return v1_error("MISSING_ARG_TOPIC", 400)
        if not valid_topic_name(name):
            return v1_error("INVALID_ARG_TOPIC", 400)
        topic = self.broker.get_topic(name)
        if topic is None:
            return v1_error("TOPIC_NOT_FOUND", 404)
        return topic

    def _channel_name(self, args: Args, topic: Topic) -> str | web.Response:
        name = self._first(args, "channel")
        if name is None:
            return v1_error("MISSING_ARG_CHANNEL", 400)
        if not valid_channel_name(name):
            return v1_error("INVALID_ARG_CHANNEL", 400)
        if name not in topic.channels:
            return v1_error("CHANNEL_NOT_FOUND", 404)
        return name

    def _args_topic(self, request: web.Request) -> tuple[Args, Topic] | web.Response:
        """The request's arguments and its existing ``topic``, or the error to answer."""
        args = self._args(request)
        if not isinstance(args, dict):
            return args
        topic = self._topic(args)
        if isinstance(topic, web.Response):
            return topic
        return args, topic

    def _topic_channel(self, request: web.Request) -> tuple[Args, Topic, str] | web.Response:
        found = self._args_topic(request)
        if isinstance(found, web.Response):
            return found
        args, topic = found
        channel = self._channel_name(args, topic)
        if isinstance(channel, web.Response):
            return channel
        return args, topic, channel

    # -- replay ----------------------------------------------------------------------

    async def set_offset(self, request: web.Request) -> web.StreamResponse:
        found = self._topic_channel(request)
        if isinstance(found, web.Response):
            return found
        args, topic, channel = found
        raw_part = self._first(args, "partition")
        partition = None
        if raw_part is not None and raw_part != "":
            partition = _uint(raw_part, 1023)
            if partition is None:
                return v1_error("INVALID_ARG_PARTITION", 400)
        body = await request.content.read(MAX_POSITION_BODY + 1)
        if not body.strip():
            return v1_error("MSG_EMPTY", 406)  # Youzan's answer to an empty body
        if len(body) > MAX_POSITION_BODY:
            return v1_error("INVALID_POSITION", 400)
        group = topic.channels[channel]
        try:
            position = parse_position(body)
            targets = set_offset(group, channel_partitions(topic, channel, partition), position)
        except BadPosition as exc:
            return v1_error(exc.code, exc.status)
        group.pump(self.broker.clock())
        self.server.after_change()
        parts = [{"partition": ch.topic.partition, "offset": off} for ch, off in targets]
        return v1_json({"topic": topic.name, "channel": channel, "partitions": parts})

    # -- dead letters, TTL, depth ----------------------------------------------------

    async def set_max_attempts(self, request: web.Request) -> web.StreamResponse:
        found = self._topic_channel(request)
        if isinstance(found, web.Response):
            return found
        args, topic, channel = found
        attempts = _uint(self._first(args, "max_attempts"), MAX_ATTEMPTS)
        if attempts is None:
            return v1_error("INVALID_MAX_ATTEMPTS", 400)
        target = self._first(args, "dead_letter_topic") or ""
        name = target or dead_letter_name(topic.name, self.features.suffix)
        if attempts and not valid_dead_letter_topic(name, topic.name):
            return v1_error("INVALID_DEAD_LETTER_TOPIC", 400)
        self.features.set_max_attempts(topic, channel, attempts, target)
        policy = topic.channels[channel].policy
        return v1_json(
            {"max_attempts": policy.max_attempts, "dead_letter_topic": policy.dead_letter_topic}
        )

    async def set_ttl(self, request: web.Request) -> web.StreamResponse:
        found = self._args_topic(request)
        if isinstance(found, web.Response):
            return found
        args, topic = found
        raw = self._first(args, "ttl")
        if raw is None:
            return v1_error("MISSING_ARG_TTL", 400)
        ttl = _ttl_ms(raw)
        if ttl is None:
            return v1_error("INVALID_TTL", 400)
        self.features.set_ttl(topic, ttl)
        return v1_json({"ttl_ms": ttl})

    async def set_max_depth(self, request: web.Request) -> web.StreamResponse:
        found = self._args_topic(request)
        if isinstance(found, web.Response):
            return found
        args, topic = found
        depth = _uint(self._first(args, "max_depth"), MAX_DEPTH)
        if depth is None:
            return v1_error("INVALID_MAX_DEPTH", 400)
        policy = self._first(args, "policy") or "refuse"
        if policy not in DEPTH_POLICIES:
            return v1_error("INVALID_DEPTH_POLICY", 400)
        self.features.set_max_depth(topic, depth, policy)
        return v1_json({"max_depth": depth, "policy": policy})

    # -- tracing ---------------------------------------------------------------------

    async def _trace_switch(self, request: web.Request, on: bool) -> web.StreamResponse:
        found = self._args_topic(request)
        if isinstance(found, web.Response):
            return found
        args, topic = found
        channel: str | None = None
        if self._first(args, "channel") is not None:
            name = self._channel_name(args, topic)
            if isinstance(name, web.Response):
                return name
            channel = name
        self.features.set_trace(topic, channel, on)
        return v1_json({"topic": topic.name, "channel": channel or "", "trace": on})

    async def trace_enable(self, request: web.Request) -> web.StreamResponse:
        return await self._trace_switch(request, True)

    async def trace_disable(self, request: web.Request) -> web.StreamResponse:
        return await self._trace_switch(request, False)

    async def trace_query(self, request: web.Request) -> web.StreamResponse:
        args = self._args(request)
        if not isinstance(args, dict):
            return args
        topic = self._first(args, "topic")
        if topic is not None and not valid_topic_name(topic):
            return v1_error("INVALID_ARG_TOPIC", 400)
        limit = _uint(self._first(args, "limit") or "1000", MAX_TRACE_LIMIT)
        if not limit:
            return v1_error("INVALID_LIMIT", 400)
        msg_id, raw_tid = self._first(args, "id"), self._first(args, "trace_id")
        trace_id = 0
        if msg_id is not None:
            if _MSG_ID.fullmatch(msg_id) is None:
                return v1_error("INVALID_MESSAGE_ID", 400)
            if topic is None:
                return v1_error("MISSING_ARG_TOPIC", 400)
        elif raw_tid is not None:
            trace_id = parse_trace_id(raw_tid) or 0
            if not trace_id:
                return v1_error("INVALID_TRACE_ID", 400)
        else:
            return v1_error("MISSING_ARG_ID", 400)
        tracer = self.features.tracer

        def run() -> list[TraceEvent]:
            tracer.sync()
            if msg_id is not None and topic is not None:
                return tracer.by_message(topic, msg_id.lower(), limit)
            return tracer.by_trace_id(trace_id, topic, limit)

        events = await asyncio.get_running_loop().run_in_executor(None, run)
        return v1_json({"events": [_event_doc(e) for e in events]})


def add_feature_routes(app: web.Application, server: NsqdServer) -> None:
    api = FeatureApi(server)
    app.router.add_route("POST", "/channel/setoffset", api.set_offset)
    app.router.add_route("POST", "/channel/setmaxattempts", api.set_max_attempts)
    app.router.add_route("POST", "/topic/setttl", api.set_ttl)
    app.router.add_route("POST", "/topic/setmaxdepth", api.set_max_depth)
    app.router.add_route("POST", "/message/trace/enable", api.trace_enable)
    app.router.add_route("POST", "/message/trace/disable", api.trace_disable)
    app.router.add_route("GET", "/message/trace", api.trace_query)
