"""nsqd's HTTP routes beyond NSQ: replay, dead letters, TTL, depth bounds and tracing.

Owns the routes below (added to nsqd's app by ``add_feature_routes``), their argument
checks and the small helpers ``/pub`` uses for a trace ID. Where Youzan's NSQ has the same
feature the form is theirs (``/channel/setoffset`` with a ``type:value`` body,
``/message/trace/enable`` and ``/disable``); the rest follows nsqd's conventions: query
arguments, V1 responses, errors as ``{"message": CODE}``. Every check runs before
anything changes; a bad one raises ``HttpError``. README.md ("Beyond NSQ") documents them.
Imports aiohttp, ``nsqpy.httpapi`` (queries read as Go's ``url.ParseQuery``) and the
broker; the daemon is seen only through ``FeatureHost``.

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
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from nsqpy.broker.broker import Broker
from nsqpy.broker.policy import (
    DEPTH_POLICIES,
    MAX_ATTEMPTS,
    dead_letter_name,
    valid_dead_letter_topic,
)
from nsqpy.broker.replay import BadPosition, channel_partitions, parse_position, set_offset
from nsqpy.durations import parse_duration
from nsqpy.errors import ConfigError
from nsqpy.httpapi import Args, HttpError, first, query_args, v1_json
from nsqpy.protocol.names import valid_channel_name, valid_topic_name
from nsqpy.storage.tracestore import TraceEvent

if TYPE_CHECKING:
    from nsqpy.broker.topic import Topic

MAX_POSITION_BODY = 1024
MAX_TTL_MS = 10 * 365 * 86_400_000  # ten years
MAX_DEPTH = (1 << 53) - 1
MAX_TRACE_LIMIT = 10_000
_DIGITS = re.compile(r"[0-9]{1,20}")
_MSG_ID = re.compile(r"[0-9a-fA-F]{16}")


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


class FeatureHost(Protocol):
    """What these routes use of nsqd (``NsqdServer`` is one; never named here)."""

    @property
    def broker(self) -> Broker: ...

    def after_change(self) -> None:
        """An action changed delivery state: write whatever connections now have."""
        ...


class FeatureApi:
    def __init__(self, host: FeatureHost) -> None:
        self.host = host
        self.broker = host.broker
        self.features = host.broker.features

    # -- arguments -------------------------------------------------------------------

    def _topic(self, args: Args) -> Topic:
        name = first(args, "topic")
        if name is None:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        if not valid_topic_name(name):
            raise HttpError(400, "INVALID_ARG_TOPIC")
        topic = self.broker.get_topic(name)
        if topic is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        return topic

    def _channel_name(self, args: Args, topic: Topic) -> str:
        name = first(args, "channel")
        if name is None:
            raise HttpError(400, "MISSING_ARG_CHANNEL")
        if not valid_channel_name(name):
            raise HttpError(400, "INVALID_ARG_CHANNEL")
        if name not in topic.channels:
            raise HttpError(404, "CHANNEL_NOT_FOUND")
        return name

    def _args_topic(self, request: web.Request) -> tuple[Args, Topic]:
        """The request's arguments and its existing ``topic``."""
        args = query_args(request)
        return args, self._topic(args)

    def _topic_channel(self, request: web.Request) -> tuple[Args, Topic, str]:
        args, topic = self._args_topic(request)
        return args, topic, self._channel_name(args, topic)

    # -- replay ----------------------------------------------------------------------

    async def set_offset(self, request: web.Request) -> web.StreamResponse:
        args, topic, channel = self._topic_channel(request)
        raw_part = first(args, "partition")
        partition = None
        if raw_part is not None and raw_part != "":
            partition = _uint(raw_part, 1023)
            if partition is None:
                raise HttpError(400, "INVALID_ARG_PARTITION")
        body = await request.content.read(MAX_POSITION_BODY + 1)
        if not body.strip():
            raise HttpError(406, "MSG_EMPTY")  # Youzan's answer to an empty body
        if len(body) > MAX_POSITION_BODY:
            raise HttpError(400, "INVALID_POSITION")
        group = topic.channels[channel]
        try:
            position = parse_position(body)
            targets = set_offset(group, channel_partitions(topic, channel, partition), position)
        except BadPosition as exc:
            raise HttpError(exc.status, exc.code) from None
        group.pump(self.broker.clock())
        self.host.after_change()
        parts = [{"partition": ch.topic.partition, "offset": off} for ch, off in targets]
        return v1_json({"topic": topic.name, "channel": channel, "partitions": parts})

    # -- dead letters, TTL, depth ----------------------------------------------------

    async def set_max_attempts(self, request: web.Request) -> web.StreamResponse:
        args, topic, channel = self._topic_channel(request)
        attempts = _uint(first(args, "max_attempts"), MAX_ATTEMPTS)
        if attempts is None:
            raise HttpError(400, "INVALID_MAX_ATTEMPTS")
        target = first(args, "dead_letter_topic") or ""
        name = target or dead_letter_name(topic.name, self.features.suffix)
        if attempts and not valid_dead_letter_topic(name, topic.name):
            raise HttpError(400, "INVALID_DEAD_LETTER_TOPIC")
        self.features.set_max_attempts(topic, channel, attempts, target)
        policy = topic.channels[channel].policy
        return v1_json(
            {"max_attempts": policy.max_attempts, "dead_letter_topic": policy.dead_letter_topic}
        )

    async def set_ttl(self, request: web.Request) -> web.StreamResponse:
        args, topic = self._args_topic(request)
        raw = first(args, "ttl")
        if raw is None:
            raise HttpError(400, "MISSING_ARG_TTL")
        ttl = _ttl_ms(raw)
        if ttl is None:
            raise HttpError(400, "INVALID_TTL")
        self.features.set_ttl(topic, ttl)
        return v1_json({"ttl_ms": ttl})

    async def set_max_depth(self, request: web.Request) -> web.StreamResponse:
        args, topic = self._args_topic(request)
        depth = _uint(first(args, "max_depth"), MAX_DEPTH)
        if depth is None:
            raise HttpError(400, "INVALID_MAX_DEPTH")
        policy = first(args, "policy") or "refuse"
        if policy not in DEPTH_POLICIES:
            raise HttpError(400, "INVALID_DEPTH_POLICY")
        self.features.set_max_depth(topic, depth, policy)
        return v1_json({"max_depth": depth, "policy": policy})

    # -- tracing ---------------------------------------------------------------------

    async def _trace_switch(self, request: web.Request, on: bool) -> web.StreamResponse:
        args, topic = self._args_topic(request)
        channel: str | None = None
        if first(args, "channel") is not None:
            channel = self._channel_name(args, topic)
        self.features.set_trace(topic, channel, on)
        return v1_json({"topic": topic.name, "channel": channel or "", "trace": on})

    async def trace_enable(self, request: web.Request) -> web.StreamResponse:
        return await self._trace_switch(request, True)

    async def trace_disable(self, request: web.Request) -> web.StreamResponse:
        return await self._trace_switch(request, False)

    async def trace_query(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        topic = first(args, "topic")
        if topic is not None and not valid_topic_name(topic):
            raise HttpError(400, "INVALID_ARG_TOPIC")
        limit = _uint(first(args, "limit") or "1000", MAX_TRACE_LIMIT)
        if not limit:
            raise HttpError(400, "INVALID_LIMIT")
        msg_id, raw_tid = first(args, "id"), first(args, "trace_id")
        trace_id = 0
        if msg_id is not None:
            if _MSG_ID.fullmatch(msg_id) is None:
                raise HttpError(400, "INVALID_MESSAGE_ID")
            if topic is None:
                raise HttpError(400, "MISSING_ARG_TOPIC")
        elif raw_tid is not None:
            trace_id = parse_trace_id(raw_tid) or 0
            if not trace_id:
                raise HttpError(400, "INVALID_TRACE_ID")
        else:
            raise HttpError(400, "MISSING_ARG_ID")
        tracer = self.features.tracer

        def run() -> list[TraceEvent]:
            tracer.sync()
            if msg_id is not None and topic is not None:
                return tracer.by_message(topic, msg_id.lower(), limit)
            return tracer.by_trace_id(trace_id, topic, limit)

        events = await asyncio.get_running_loop().run_in_executor(None, run)
        return v1_json({"events": [_event_doc(e) for e in events]})


def add_feature_routes(app: web.Application, host: FeatureHost) -> None:
    api = FeatureApi(host)
    app.router.add_route("POST", "/channel/setoffset", api.set_offset)
    app.router.add_route("POST", "/channel/setmaxattempts", api.set_max_attempts)
    app.router.add_route("POST", "/topic/setttl", api.set_ttl)
    app.router.add_route("POST", "/topic/setmaxdepth", api.set_max_depth)
    app.router.add_route("POST", "/message/trace/enable", api.trace_enable)
    app.router.add_route("POST", "/message/trace/disable", api.trace_disable)
    app.router.add_route("GET", "/message/trace", api.trace_query)
