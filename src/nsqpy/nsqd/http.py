"""nsqd's HTTP API (SPEC 2): the route table first, then one handler per endpoint.

Every response follows NSQ's V1 conventions through ``nsqpy.httpapi``. Arguments are read
from the raw query string as nsqd's Go code reads them (``nsqd.params``), checks run in
nsqd's order, and a failed write answers 503 ``EXITING`` as nsqd does for any publish
error. Publishing goes through the same group commit as TCP and answers only once the
message is written. Partitions (youzan's arguments, ``nsqd.http_extend``): /pub and /mpub
take ``partition`` or ``partition_key``, /topic/create ``partition_num`` and ``ordered``.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Middleware

from nsqpy import NSQ_VERSION
from nsqpy.broker.health import StorageFailed
from nsqpy.broker.stats import stats, stats_text
from nsqpy.broker.topic import Topic
from nsqpy.errors import ProtocolError, PubFailed, StorageError
from nsqpy.flags import LOG_LEVELS
from nsqpy.httpapi import nsq_middleware, v1_empty, v1_error, v1_json, v1_text
from nsqpy.metrics.nsqd_metrics import add_nsqd_metrics
from nsqpy.nsqd import http_extend
from nsqpy.nsqd.http_features import http_source, parse_trace_id
from nsqpy.nsqd.http_limits import body_deadline
from nsqpy.nsqd.params import BOOL_PARAMS, BadQuery, parse_int64, parse_query
from nsqpy.options import config_value
from nsqpy.protocol.names import valid_channel_name, valid_topic_name
from nsqpy.storage import Entry

if TYPE_CHECKING:
    from nsqpy.nsqd.server import NsqdServer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = logging.getLogger("nsqpy.nsqd")


def make_app(server: NsqdServer) -> web.Application:
    api = HttpApi(server)
    app = web.Application(
        middlewares=[
            nsq_middleware,
            storage_failures(server),
            body_deadline(server.opts.client_timeout_ms / 1000),  # nsqd.http_limits
        ],
        client_max_size=server.opts.max_body_size + 1,
    )
    routes: list[tuple[str, str, Handler]] = [
        ("GET", "/ping", api.ping),
        ("GET", "/info", api.info),
        ("GET", "/stats", api.stats),
        ("POST", "/pub", api.pub),
        ("POST", "/mpub", api.mpub),
        ("POST", "/topic/create", api.topic_create),
        ("POST", "/topic/delete", api.topic_delete),
        ("POST", "/topic/empty", api.topic_empty),
        ("POST", "/topic/pause", api.topic_pause),
        ("POST", "/topic/unpause", api.topic_unpause),
        ("POST", "/channel/create", api.channel_create),
        ("POST", "/channel/delete", api.channel_delete),
        ("POST", "/channel/empty", api.channel_empty),
        ("POST", "/channel/pause", api.channel_pause),
        ("POST", "/channel/unpause", api.channel_unpause),
        ("GET", "/config/{opt}", api.config_get),
        ("PUT", "/config/{opt}", api.config_put),
        ("POST", "/debug/freememory", api.free_memory),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
    from nsqpy.nsqd.http_features import add_feature_routes
    from nsqpy.nsqd.logread import add_logread_routes

    add_logread_routes(app, server)  # the binary log-read API (docs/logread.md)
    add_nsqd_metrics(app, server)  # nsqpy: GET /metrics (Prometheus), nsqpy.metrics
    add_feature_routes(app, server)  # replay, dead letters, TTL, depth bounds, tracing
    http_extend.add_extend_routes(app, api)  # youzan's /pub_ext, /pubtrace, /channel/setorder
    return app


def storage_failures(server: NsqdServer) -> Middleware:
    """Middleware: an action whose storage failed (a topic or channel that could not be
    created, a setting that could not be saved) answers 500 ``INTERNAL_ERROR``, as nsqd
    answers an action that failed, with the failure in the health state (/ping): one log
    line, never a traceback."""
    health = server.broker.health_state

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except StorageError as exc:
            if not isinstance(exc, StorageFailed):  # not reported where it happened
                health.failed_once(f"{request.method} {request.path} failed", exc)
            return v1_error("INTERNAL_ERROR", 500)

    return middleware


class HttpApi:
    def __init__(self, server: NsqdServer) -> None:
        self.server = server
        self.broker = server.broker
        self.opts = server.opts

    # -- arguments -------------------------------------------------------------------

    @staticmethod
    def _args(request: web.Request) -> dict[str, list[str]] | web.Response:
        """The query arguments as nsqd's url.ParseQuery reads them; 400 INVALID_REQUEST if bad."""
        try:
            return parse_query(request.rel_url.raw_query_string)
        except BadQuery as exc:
            log.info("failed to parse request params - %s", exc)
            return v1_error("INVALID_REQUEST", 400)

    @staticmethod
    def _first(args: dict[str, list[str]], name: str) -> str | None:
        values = args.get(name)
        return values[0] if values else None

    def _topic_from_query(
        self, request: web.Request, *, with_partition: bool = False
    ) -> tuple[dict[str, list[str]], Topic, int] | web.Response:
        """nsqd's getTopicFromQuery: arguments, a valid topic name, the topic (created),
        and with ``with_partition`` the ``partition`` argument, checked before creating."""
        named = self._named_topic_args(request)
        if isinstance(named, web.Response):
            return named
        args, name = named
        partition = -1
        if with_partition:
            found = http_extend.checked_partition(self, args, name)
            if isinstance(found, web.Response):
                return found
            partition = found
        try:
            topic = self.broker.topic(name)
        except StorageError:  # it could not be created (health NOK): as a failed put
            return v1_error("EXITING", 503)
        return args, topic, partition

    # -- health and info -------------------------------------------------------------

    async def ping(self, request: web.Request) -> web.StreamResponse:
        if not self.broker.healthy:
            return web.Response(status=500, text=self.broker.health)
        return web.Response(text="OK")

    async def info(self, request: web.Request) -> web.StreamResponse:
        return v1_json(
            {
                "version": NSQ_VERSION,
                "broadcast_address": self.opts.broadcast_address,
                "hostname": socket.gethostname(),
                "http_port": self.server.http_port,
                "tcp_port": self.server.tcp_port,
                "start_time": self.server.start_time,
                "max_heartbeat_interval": self.opts.max_heartbeat_interval_ms * 1_000_000,
                "max_output_buffer_size": self.opts.max_output_buffer_size,
                "max_output_buffer_timeout": self.opts.max_output_buffer_timeout_ms * 1_000_000,
                "max_deflate_level": self.opts.max_deflate_level,
            }
        )

    async def stats(self, request: web.Request) -> web.StreamResponse:
        args = self._args(request)
        if not isinstance(args, dict):
            return args
        doc = stats(
            self.broker,
            topic=self._first(args, "topic") or None,
            channel=self._first(args, "channel") or None,
            include_clients=BOOL_PARAMS.get(self._first(args, "include_clients") or "", True),
            include_mem=BOOL_PARAMS.get(self._first(args, "include_mem") or "", True),
        )
        if self._first(args, "format") == "json":
            return v1_json(doc)
        return v1_text(stats_text(doc, start_ns=self.broker.start_time_ns))

    # -- publishing ------------------------------------------------------------------

    @staticmethod
    async def _read_at_most(request: web.Request, limit: int) -> bytes:
        """The body, or its first ``limit`` bytes (StreamReader.read(n) may return less)."""
        chunks: list[bytes] = []
        total = 0
        while total < limit:
            chunk = await request.content.read(limit - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)

    async def _publish(
        self,
        topic: Topic,
        bodies: list[bytes],
        defer_ms: int,
        args: dict[str, list[str]],
        partition: int = -1,
        *,
        trace_id: int = 0,
        source: str = "",
    ) -> web.StreamResponse:
        if topic.deleted:
            return v1_error("EXITING", 503)
        now = self.broker.clock()
        deliver_at = now + defer_ms * 1_000_000 if defer_ms else 0
        key = (self._first(args, "partition_key") or "").encode()
        entries = (
            [Entry(b, now, deliver_at, trace_id=trace_id, partition_key=key) for b in bodies]
            if key
            else []
        )
        try:
            await self.server.publish_and_wait(
                topic, bodies, deliver_at, PubFailed, entries=entries, partition=partition,
                key=key, source=source, trace_id=trace_id,
            )  # fmt: skip
        except (ProtocolError, OSError, StorageError):
            return v1_error("EXITING", 503)  # nsqd answers any PutMessage error so
        return v1_text("OK")

    async def pub(self, request: web.Request) -> web.StreamResponse:
        limit = self.opts.max_msg_size
        if request.content_length is not None and request.content_length > limit:
            return v1_error("MSG_TOO_BIG", 413)
        body = await self._read_at_most(request, limit + 1)
        if len(body) > limit:
            return v1_error("MSG_TOO_BIG", 413)
        if not body:
            return v1_error("MSG_EMPTY", 400)
        found = self._topic_from_query(request, with_partition=True)
        if not isinstance(found, tuple):
            return found
        args, topic, partition = found
        defer_ms = 0
        raw = self._first(args, "defer")
        if raw is not None:
            parsed = parse_int64(raw)
            if parsed is None or not 0 <= parsed <= self.opts.max_req_timeout_ms:
                return v1_error("INVALID_DEFER", 400)
            defer_ms = parsed
        trace_id = parse_trace_id(self._first(args, "trace_id"))  # nsqpy (README: Beyond NSQ)
        if trace_id is None:
            return v1_error("INVALID_TRACE_ID", 400)
        return await self._publish(
            topic, [body], defer_ms, args, partition, trace_id=trace_id,
            source=http_source(request),
        )  # fmt: skip

    async def mpub(self, request: web.Request) -> web.StreamResponse:
        limit = self.opts.max_body_size
        if request.content_length is not None and request.content_length > limit:
            return v1_error("BODY_TOO_BIG", 413)
        found = self._topic_from_query(request, with_partition=True)
        if not isinstance(found, tuple):
            return found
        args, topic, partition = found
        binary = self._first(args, "binary")
        # Text mode is the default; a value other than nsqd's four spellings means binary.
        binary_mode = binary is not None and BOOL_PARAMS.get(binary, True)
        body = await self._read_at_most(request, limit + 1)
        if binary_mode:
            if len(body) > limit:
                return v1_error("BODY_TOO_BIG", 413)
            parsed = self._parse_binary_mpub(body)
        else:
            parsed = self._parse_text_mpub(body)
        if isinstance(parsed, web.StreamResponse):
            return parsed
        if not parsed:
            return v1_text("OK")
        return await self._publish(topic, parsed, 0, args, partition, source=http_source(request))

    def _parse_text_mpub(self, body: bytes) -> list[bytes] | web.StreamResponse:
        """Lines split on "\n" (a "\r" stays), empty ones skipped, as nsqd reads them."""
        max_body, max_msg = self.opts.max_body_size, self.opts.max_msg_size
        out: list[bytes] = []
        start, size = 0, len(body)
        while start < size:
            newline = body.find(b"\n", start)
            stop = size if newline < 0 else newline + 1
            if stop > max_body:
                return v1_error("BODY_TOO_BIG", 413)
            line = body[start : stop - 1 if newline >= 0 else stop]
            start = stop
            if not line:
                continue
            if len(line) > max_msg:
                return v1_error("MSG_TOO_BIG", 413)
            out.append(line)
        return out

    def _parse_binary_mpub(self, body: bytes) -> list[bytes] | web.StreamResponse:
        """[int32 count] then [int32 size][bytes] per message; trailing bytes are ignored."""
        if len(body) < 4:
            return v1_error("BAD_BODY", 413)
        (count,) = struct.unpack_from(">i", body, 0)
        if count <= 0 or count > (self.opts.max_body_size - 4) // 5:
            return v1_error("BAD_BODY", 413)
        pos, out = 4, []
        for _ in range(count):
            if pos + 4 > len(body):
                return v1_error("BAD_MESSAGE", 413)
            (size,) = struct.unpack_from(">i", body, pos)
            pos += 4
            if size <= 0 or size > self.opts.max_msg_size or pos + size > len(body):
                return v1_error("BAD_MESSAGE", 413)
            out.append(body[pos : pos + size])
            pos += size
        return out

    # -- topic and channel actions ---------------------------------------------------

    def _named_topic_args(
        self, request: web.Request, invalid: str | None = "INVALID_TOPIC"
    ) -> tuple[dict[str, list[str]], str] | web.Response:
        """The arguments and the ``topic`` name (MISSING_ARG_TOPIC), checked unless
        ``invalid`` is None (NSQ answers INVALID_TOPIC on topic routes and
        INVALID_ARG_TOPIC on channel ones)."""
        args = self._args(request)
        if not isinstance(args, dict):
            return args
        name = self._first(args, "topic")
        if name is None:
            return v1_error("MISSING_ARG_TOPIC", 400)
        if invalid is not None and not valid_topic_name(name):
            return v1_error(invalid, 400)
        return args, name

    def _topic_name(self, request: web.Request) -> str | web.Response:
        named = self._named_topic_args(request, None)
        return named[1] if isinstance(named, tuple) else named

    def _existing_topic(
        self, request: web.Request, *, validate: bool = False
    ) -> Topic | web.Response:
        name = self._topic_name(request)
        if not isinstance(name, str):
            return name
        if validate and not valid_topic_name(name):
            return v1_error("INVALID_TOPIC", 400)
        topic = self.broker.get_topic(name)
        if topic is None:
            return v1_error("TOPIC_NOT_FOUND", 404)
        return topic

    async def topic_create(self, request: web.Request) -> web.StreamResponse:
        found = self._named_topic_args(request)
        if isinstance(found, web.Response):
            return found
        args, name = found
        return http_extend.create_topic(self, name, args)

    async def topic_delete(self, request: web.Request) -> web.StreamResponse:
        topic = self._existing_topic(request)  # nsqd does not validate the name here
        if not isinstance(topic, Topic):
            return topic
        self.broker.delete_topic(topic.name)
        self.server.after_change()
        return v1_empty()

    async def topic_empty(self, request: web.Request) -> web.StreamResponse:
        topic = self._existing_topic(request, validate=True)
        if not isinstance(topic, Topic):
            return topic
        topic.empty()
        self.broker.save_metadata()
        return v1_empty()

    async def _topic_pause(self, request: web.Request, paused: bool) -> web.StreamResponse:
        topic = self._existing_topic(request)
        if not isinstance(topic, Topic):
            return topic
        if paused:
            topic.pause()
        else:
            topic.unpause()
        self.broker.save_metadata()
        if not paused:
            self.broker.pump([topic])
            self.server.after_change()
        return v1_empty()

    async def topic_pause(self, request: web.Request) -> web.StreamResponse:
        return await self._topic_pause(request, True)

    async def topic_unpause(self, request: web.Request) -> web.StreamResponse:
        return await self._topic_pause(request, False)

    def _channel_args(self, request: web.Request) -> tuple[Topic, str] | web.Response:
        named = self._named_topic_args(request, "INVALID_ARG_TOPIC")
        if not isinstance(named, tuple):
            return named
        args, tname = named
        cname = self._first(args, "channel")
        if cname is None:
            return v1_error("MISSING_ARG_CHANNEL", 400)
        if not valid_channel_name(cname):
            return v1_error("INVALID_ARG_CHANNEL", 400)
        topic = self.broker.get_topic(tname)
        if topic is None:
            return v1_error("TOPIC_NOT_FOUND", 404)
        return topic, cname

    async def channel_create(self, request: web.Request) -> web.StreamResponse:
        args = self._channel_args(request)
        if not isinstance(args, tuple):
            return args
        topic, cname = args
        self.broker.channel(topic, cname)
        return v1_empty()

    async def _channel_action(self, request: web.Request, action: str) -> web.StreamResponse:
        args = self._channel_args(request)
        if not isinstance(args, tuple):
            return args
        topic, cname = args
        channel = topic.channels.get(cname)
        if channel is None:
            return v1_error("CHANNEL_NOT_FOUND", 404)
        if action == "delete":
            self.broker.delete_channel(topic, cname)
        elif action == "empty":
            channel.empty(self.broker.clock())
        else:
            channel.paused = action == "pause"
            self.broker.save_metadata()
            if not channel.paused:
                channel.pump(self.broker.clock())
        self.server.after_change()
        return v1_empty()

    async def channel_delete(self, request: web.Request) -> web.StreamResponse:
        return await self._channel_action(request, "delete")

    async def channel_empty(self, request: web.Request) -> web.StreamResponse:
        return await self._channel_action(request, "empty")

    async def channel_pause(self, request: web.Request) -> web.StreamResponse:
        return await self._channel_action(request, "pause")

    async def channel_unpause(self, request: web.Request) -> web.StreamResponse:
        return await self._channel_action(request, "unpause")

    # -- config ----------------------------------------------------------------------

    def _config_value(self, opt: str) -> object:
        return config_value(self.opts, opt)  # KeyError: not one of nsqd's /config names

    async def config_get(self, request: web.Request) -> web.StreamResponse:
        try:
            return v1_json(self._config_value(request.match_info["opt"]))
        except KeyError:
            return v1_error("INVALID_OPTION", 400)

    async def config_put(self, request: web.Request) -> web.StreamResponse:
        opt = request.match_info["opt"]
        limit = self.opts.max_msg_size
        body = await self._read_at_most(request, limit + 1)
        if not body or len(body) > limit:
            return v1_error("INVALID_VALUE", 413)
        if opt == "nsqlookupd_tcp_addresses":
            try:
                value = json.loads(body)
            except (ValueError, RecursionError):  # RecursionError: nested too deep
                return v1_error("INVALID_VALUE", 400)
            if value is None:  # Go unmarshals null into a nil slice
                value = []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                return v1_error("INVALID_VALUE", 400)
            self.opts.lookupd_tcp_addresses = value
            self.server.lookupd_addresses_changed()
            return v1_json(value)
        if opt == "log_level":
            level = body.decode(errors="replace").lower()  # lg.ParseLogLevel: no trimming
            if level not in LOG_LEVELS:
                return v1_error("INVALID_VALUE", 400)
            self.opts.log_level = level
            self.server.apply_log_level()
            return v1_json(self._config_value("log_level"))
        return v1_error("INVALID_OPTION", 400)

    async def free_memory(self, request: web.Request) -> web.StreamResponse:
        import gc

        gc.collect()
        return web.Response(text="")
