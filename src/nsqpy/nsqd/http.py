"""nsqd's HTTP API (SPEC 2): the route table first, then one handler per endpoint.

Every response follows NSQ's V1 conventions through ``nsqpy.httpapi``. Publishing goes
through the same group commit as TCP and answers only once the message is written.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from nsqpy import NSQ_VERSION
from nsqpy.broker.stats import stats, stats_text
from nsqpy.broker.topic import Topic
from nsqpy.errors import ProtocolError, PubFailed
from nsqpy.httpapi import nsq_middleware, parse_bool, query_arg, v1_empty, v1_error, v1_json, v1_text
from nsqpy.protocol.names import valid_channel_name, valid_topic_name

if TYPE_CHECKING:
    from nsqpy.nsqd.server import NsqdServer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_app(server: NsqdServer) -> web.Application:
    api = HttpApi(server)
    app = web.Application(
        middlewares=[nsq_middleware], client_max_size=server.opts.max_body_size + 1
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
    return app


class HttpApi:
    def __init__(self, server: NsqdServer) -> None:
        self.server = server
        self.broker = server.broker
        self.opts = server.opts

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
                "hostname": self.opts.broadcast_address,
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
        try:
            include_clients = parse_bool(query_arg(request, "include_clients") or "true")
            include_mem = parse_bool(query_arg(request, "include_mem") or "true")
        except ValueError:
            return v1_error("INVALID_REQUEST", 400)
        doc = stats(
            self.broker,
            topic=query_arg(request, "topic"),
            channel=query_arg(request, "channel"),
            include_clients=include_clients,
            include_mem=include_mem,
        )
        if query_arg(request, "format") == "json":
            return v1_json(doc)
        return v1_text(stats_text(doc))

    # -- publishing ------------------------------------------------------------------

    def _topic_arg(self, request: web.Request) -> str | web.StreamResponse:
        name = query_arg(request, "topic")
        if name is None:
            return v1_error("MISSING_ARG_TOPIC", 400)
        if not valid_topic_name(name):
            return v1_error("INVALID_TOPIC", 400)
        return name

    async def _read_body(self, request: web.Request, limit: int, too_big: str) -> bytes | web.StreamResponse:
        if request.content_length is not None and request.content_length > limit:
            return v1_error(too_big, 413)
        body = await request.content.read(limit + 1)
        if len(body) > limit:
            return v1_error(too_big, 413)
        return body

    async def _publish(self, topic_name: str, bodies: list[bytes], defer_ms: int) -> web.StreamResponse:
        topic = self.broker.topic(topic_name)
        if topic.deleted:
            return v1_error("EXITING", 503)
        deliver_at = self.broker.clock() + defer_ms * 1_000_000 if defer_ms else 0
        try:
            await self.server.publish_and_wait(topic, bodies, deliver_at, PubFailed)
        except (ProtocolError, OSError):
            return v1_error("INTERNAL_ERROR", 500)
        return v1_text("OK")

    async def pub(self, request: web.Request) -> web.StreamResponse:
        body = await self._read_body(request, self.opts.max_msg_size, "MSG_TOO_BIG")
        if isinstance(body, web.StreamResponse):
            return body
        if not body:
            return v1_error("MSG_EMPTY", 400)
        name = self._topic_arg(request)
        if not isinstance(name, str):
            return name
        defer_ms = 0
        raw = query_arg(request, "defer")
        if raw is not None:
            try:
                defer_ms = int(raw)
            except ValueError:
                return v1_error("INVALID_DEFER", 400)
            if not 0 <= defer_ms <= self.opts.max_req_timeout_ms:
                return v1_error("INVALID_DEFER", 400)
        return await self._publish(name, [body], defer_ms)

    async def mpub(self, request: web.Request) -> web.StreamResponse:
        name = self._topic_arg(request)
        if not isinstance(name, str):
            return name
        body = await self._read_body(request, self.opts.max_body_size, "BODY_TOO_BIG")
        if isinstance(body, web.StreamResponse):
            return body
        binary = query_arg(request, "binary")
        if binary is not None and binary not in ("false", "0"):
            parsed = self._parse_binary_mpub(body)
        else:
            parsed = [line for line in body.split(b"\n") if line]
            if any(len(m) > self.opts.max_msg_size for m in parsed):
                return v1_error("MSG_TOO_BIG", 413)
        if isinstance(parsed, web.StreamResponse):
            return parsed
        if not parsed:
            return v1_text("OK")
        return await self._publish(name, parsed, 0)

    def _parse_binary_mpub(self, body: bytes) -> list[bytes] | web.StreamResponse:
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

    def _existing_topic(self, request: web.Request) -> Topic | web.StreamResponse:
        name = query_arg(request, "topic")
        if name is None:
            return v1_error("MISSING_ARG_TOPIC", 400)
        topic = self.broker.get_topic(name)
        if topic is None:
            return v1_error("TOPIC_NOT_FOUND", 404)
        return topic

    async def topic_create(self, request: web.Request) -> web.StreamResponse:
        name = self._topic_arg(request)
        if not isinstance(name, str):
            return name
        self.broker.topic(name)
        return v1_empty()

    async def topic_delete(self, request: web.Request) -> web.StreamResponse:
        topic = self._existing_topic(request)
        if not isinstance(topic, Topic):
            return topic
        self.broker.delete_topic(topic.name)
        self.server.after_change()
        return v1_empty()

    async def topic_empty(self, request: web.Request) -> web.StreamResponse:
        name = query_arg(request, "topic")
        if name is not None and not valid_topic_name(name):
            return v1_error("INVALID_TOPIC", 400)
        topic = self._existing_topic(request)
        if not isinstance(topic, Topic):
            return topic
        topic.empty()
        self.broker.save_metadata()
        return v1_empty()

    async def _topic_pause(self, request: web.Request, paused: bool) -> web.StreamResponse:
        topic = self._existing_topic(request)
        if not isinstance(topic, Topic):
            return topic
        topic.paused = paused
        self.broker.save_metadata()
        if not paused:
            self.broker.pump([topic])
            self.server.after_change()
        return v1_empty()

    async def topic_pause(self, request: web.Request) -> web.StreamResponse:
        return await self._topic_pause(request, True)

    async def topic_unpause(self, request: web.Request) -> web.StreamResponse:
        return await self._topic_pause(request, False)

    def _channel_args(self, request: web.Request) -> tuple[Topic, str] | web.StreamResponse:
        tname = query_arg(request, "topic")
        if tname is None:
            return v1_error("MISSING_ARG_TOPIC", 400)
        if not valid_topic_name(tname):
            return v1_error("INVALID_ARG_TOPIC", 400)
        cname = query_arg(request, "channel")
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
        aliases = {
            "id": "node_id",
            "nsqlookupd_tcp_addresses": "lookupd_tcp_addresses",
        }
        field = aliases.get(opt, opt)
        if field.endswith("_ms") or not hasattr(self.opts, field):
            ms_field = field + "_ms"
            if hasattr(self.opts, ms_field):
                return int(getattr(self.opts, ms_field)) * 1_000_000
            raise KeyError(opt)
        if field == "log_level":
            levels = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
            return levels.get(str(self.opts.log_level), 2)
        return getattr(self.opts, field)

    async def config_get(self, request: web.Request) -> web.StreamResponse:
        try:
            return v1_json(self._config_value(request.match_info["opt"]))
        except KeyError:
            return v1_error("INVALID_OPTION", 400)

    async def config_put(self, request: web.Request) -> web.StreamResponse:
        opt = request.match_info["opt"]
        body = await request.content.read(self.opts.max_msg_size + 1)
        if not body or len(body) > self.opts.max_msg_size:
            return v1_error("INVALID_VALUE", 413)
        if opt == "nsqlookupd_tcp_addresses":
            try:
                value = json.loads(body)
            except ValueError:
                return v1_error("INVALID_VALUE", 400)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                return v1_error("INVALID_VALUE", 400)
            self.opts.lookupd_tcp_addresses = value
            self.server.lookupd_addresses_changed()
            return v1_json(value)
        if opt == "log_level":
            level = body.decode(errors="replace").strip().lower()
            if level not in ("debug", "info", "warn", "error", "fatal"):
                return v1_error("INVALID_VALUE", 400)
            self.opts.log_level = level
            self.server.apply_log_level()
            return v1_json(self._config_value("log_level"))
        return v1_error("INVALID_OPTION", 400)

    async def free_memory(self, request: web.Request) -> web.StreamResponse:
        import gc

        gc.collect()
        return web.Response(text="")
