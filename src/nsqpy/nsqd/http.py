"""nsqd's HTTP API (SPEC 2): the route table first, then one handler per endpoint.

Every response follows NSQ's V1 conventions through ``nsqpy.httpapi``. Arguments are read
from the raw query string as nsqd's Go code reads them (``nsqd.params``), checks run in
nsqd's order, and a failed write answers 503 ``EXITING`` as nsqd does for any publish
error. Publishing goes through the same group commit as TCP and answers only once the
message is written. Partitions (youzan's arguments, ``nsqd.http_extend``): /pub and /mpub
take ``partition`` or ``partition_key``, /topic/create ``partition_num`` and ``ordered``.

Handlers and the preludes they share (``nsqd.http_args``) raise ``HttpError(status, code)``;
``nsq_middleware`` writes NSQ's V1 error body. ``make_app`` sees the daemon only through
``NsqdHttpView`` (``NsqdServer`` is one) and hands each route module the same object, typed
by the narrower ``Protocol`` that module owns. Imports aiohttp, the broker, the metrics
exporter and the nsqd HTTP modules below it; never the server or the TCP side.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import struct
from collections.abc import Sized
from functools import partial
from typing import Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware

from nsqpy import NSQ_VERSION
from nsqpy.broker.health import Health, StorageFailed
from nsqpy.broker.partition import Partition
from nsqpy.broker.stats import stats, stats_text
from nsqpy.broker.topic import Topic
from nsqpy.errors import (
    NotLeader,
    NotWritable,
    ProtocolError,
    PubFailed,
    StorageError,
)
from nsqpy.flags import LOG_LEVELS
from nsqpy.httpapi import (
    Args,
    Handler,
    HttpError,
    first,
    nsq_middleware,
    v1_empty,
    v1_json,
    v1_text,
)
from nsqpy.metrics.nsqd_metrics import NodeFigures, add_nsqd_metrics
from nsqpy.nsqd import http_extend
from nsqpy.nsqd.gate import ABSENT
from nsqpy.nsqd.http_args import (
    HttpHost,
    cluster_topic,
    forwarded,
    named_topic_args,
    publish_target,
    query_args,
    read_at_most,
    read_message,
)
from nsqpy.nsqd.http_features import add_feature_routes, http_source, parse_trace_id
from nsqpy.nsqd.http_limits import body_deadline
from nsqpy.nsqd.logread import add_logread_routes
from nsqpy.nsqd.params import BOOL_PARAMS, parse_int64
from nsqpy.options import config_value
from nsqpy.protocol.extend import PubTrace, encode_extended
from nsqpy.protocol.names import is_ephemeral, valid_channel_name, valid_topic_name
from nsqpy.storage import Entry

log = logging.getLogger("nsqpy.nsqd")


class NsqdHttpView(HttpHost, Protocol):
    """What nsqd's HTTP app uses of the daemon (``NsqdServer`` is one; never named here):
    ``HttpHost`` plus what /info, /metrics and /config read and change."""

    @property
    def http_port(self) -> int: ...

    @property
    def tcp_port(self) -> int: ...

    @property
    def https_port(self) -> int:
        """The HTTPS listener's port; 0 without one (no --tls-cert)."""
        ...

    @property
    def start_time(self) -> int: ...

    @property
    def connections(self) -> Sized: ...

    def lookupd_addresses_changed(self) -> None:
        """PUT /config/nsqlookupd_tcp_addresses: reconnect to the new set."""
        ...

    def apply_log_level(self) -> None:
        """PUT /config/log_level: apply the new level."""
        ...

    def log_read_end(self, part: Partition) -> int | None:
        """Where the log-read API stops reading a partition (``nsqd.logread``)."""
        ...

    def cluster_id(self) -> str: ...

    def cluster_info(self) -> dict[str, object]:
        """What /info adds in a cluster (node id, cluster id); {} on a single node."""
        ...

    def cluster_figures(self) -> NodeFigures | None:
        """What /metrics adds in a cluster; None on a single node."""
        ...


def make_app(server: NsqdHttpView) -> web.Application:
    api = HttpApi(server)
    app = web.Application(
        middlewares=[
            nsq_middleware,
            storage_failures(server.broker.health_state),
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
        ("POST", "/topic/partition/expand", api.partition_expand),
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
    add_logread_routes(app, server)  # the binary log-read API (docs/logread.md)
    add_nsqd_metrics(app, server)  # nsqpy: GET /metrics (Prometheus), nsqpy.metrics
    add_feature_routes(app, server)  # replay, dead letters, TTL, depth bounds, tracing
    http_extend.add_extend_routes(app, server)  # youzan's /pub_ext, /pubtrace, /channel/setorder
    return app


def storage_failures(health: Health) -> Middleware:
    """Middleware: an action whose storage failed (a topic or channel that could not be
    created, a setting that could not be saved) answers 500 ``INTERNAL_ERROR``, as nsqd
    answers an action that failed, with the failure in the health state (/ping): one log
    line, never a traceback."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except StorageError as exc:
            if not isinstance(exc, StorageFailed):  # not reported where it happened
                health.failed_once(f"{request.method} {request.path} failed", exc)
            raise HttpError(500, "INTERNAL_ERROR") from None

    return middleware


class HttpApi:
    def __init__(self, server: NsqdHttpView) -> None:
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
                "hostname": socket.gethostname(),
                "http_port": self.server.http_port,
                "tcp_port": self.server.tcp_port,
                "start_time": self.server.start_time,
                "max_heartbeat_interval": self.opts.max_heartbeat_interval_ms * 1_000_000,
                "max_output_buffer_size": self.opts.max_output_buffer_size,
                "max_output_buffer_timeout": self.opts.max_output_buffer_timeout_ms * 1_000_000,
                "max_deflate_level": self.opts.max_deflate_level,
                # nsqpy: where the same API is served over TLS (clients that must use it,
                # such as the Spark source, find it here)
                **({"https_port": self.server.https_port} if self.server.https_port else {}),
                **self.server.cluster_info(),
            }
        )

    async def stats(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        doc = stats(
            self.broker,
            topic=first(args, "topic") or None,
            channel=first(args, "channel") or None,
            include_clients=BOOL_PARAMS.get(first(args, "include_clients") or "", True),
            include_mem=BOOL_PARAMS.get(first(args, "include_mem") or "", True),
        )
        if first(args, "format") == "json":
            return v1_json(doc)
        return v1_text(stats_text(doc, start_ns=self.broker.start_time_ns))

    # -- publishing ------------------------------------------------------------------

    async def _publish(
        self,
        topic: Topic | str,
        bodies: list[bytes],
        defer_ms: int,
        args: Args,
        partition: int = -1,
        *,
        trace_id: int = 0,
        source: str = "",
    ) -> web.StreamResponse:
        if isinstance(topic, str):  # (cluster) led elsewhere only: through its leader
            return await self._forward(topic, bodies, defer_ms, args, partition, trace_id)
        if topic.deleted:
            raise HttpError(503, "EXITING")
        now = self.broker.clock()
        deliver_at = now + defer_ms * 1_000_000 if defer_ms else 0
        key = (first(args, "partition_key") or "").encode()
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
        except NotLeader as exc:  # (cluster) the partition named or keyed is led elsewhere
            if self.server.cluster is None:
                raise HttpError(400, exc.code) from None
            return await self._forward(topic.name, bodies, defer_ms, args, partition, trace_id)
        except NotWritable as exc:  # (cluster mode: youzan's answer)
            raise HttpError(400, exc.code) from None
        except (ProtocolError, OSError, StorageError):
            raise HttpError(503, "EXITING") from None  # nsqd answers any PutMessage error so
        return v1_text("OK")

    async def _forward(
        self,
        topic: str,
        bodies: list[bytes],
        defer_ms: int,
        args: Args,
        partition: int,
        trace_id: int,
    ) -> web.StreamResponse:
        """A publish of a topic this node leads no partition of, or of a partition (named,
        or picked by a partition key) it does not lead (``nsqd.forward``): answered as the
        leader answered (a partition key picks the partition here). A traced one goes as
        PUB_TRACE; deferred and traced at once has no form to go in: 400
        ``E_FAILED_ON_NOT_LEADER``, to be sent to the leader itself."""
        gate = self.server.cluster
        assert gate is not None
        key = (first(args, "partition_key") or "").encode()
        if not trace_id:
            await forwarded(gate.forward(topic, partition, bodies, defer_ms, key))
        elif defer_ms:
            raise HttpError(400, NotLeader.code)
        else:
            encode = partial(encode_extended, PubTrace(topic, trace_id, bodies[0]))
            await forwarded(gate.forward_command(topic, partition, 1, encode, key))
        return v1_text("OK")

    async def pub(self, request: web.Request) -> web.StreamResponse:
        body = await read_message(request, self.opts.max_msg_size)
        args, topic, partition = await publish_target(self.server, request)
        defer_ms = 0
        raw = first(args, "defer")
        if raw is not None:
            parsed = parse_int64(raw)
            if parsed is None or not 0 <= parsed <= self.opts.max_req_timeout_ms:
                raise HttpError(400, "INVALID_DEFER")
            defer_ms = parsed
        trace_id = parse_trace_id(first(args, "trace_id"))  # nsqpy (README: Beyond NSQ)
        if trace_id is None:
            raise HttpError(400, "INVALID_TRACE_ID")
        return await self._publish(
            topic, [body], defer_ms, args, partition, trace_id=trace_id,
            source=http_source(request),
        )  # fmt: skip

    async def mpub(self, request: web.Request) -> web.StreamResponse:
        limit = self.opts.max_body_size
        if request.content_length is not None and request.content_length > limit:
            raise HttpError(413, "BODY_TOO_BIG")
        args, topic, partition = await publish_target(self.server, request)
        binary = first(args, "binary")
        # Text mode is the default; a value other than nsqd's four spellings means binary.
        binary_mode = binary is not None and BOOL_PARAMS.get(binary, True)
        body = await read_at_most(request, limit + 1)
        if binary_mode:
            if len(body) > limit:
                raise HttpError(413, "BODY_TOO_BIG")
            parsed = self._parse_binary_mpub(body)
        else:
            parsed = self._parse_text_mpub(body)
        if not parsed:
            return v1_text("OK")
        return await self._publish(topic, parsed, 0, args, partition, source=http_source(request))

    def _parse_text_mpub(self, body: bytes) -> list[bytes]:
        """Lines split on "\n" (a "\r" stays), empty ones skipped, as nsqd reads them."""
        max_body, max_msg = self.opts.max_body_size, self.opts.max_msg_size
        out: list[bytes] = []
        start, size = 0, len(body)
        while start < size:
            newline = body.find(b"\n", start)
            stop = size if newline < 0 else newline + 1
            if stop > max_body:
                raise HttpError(413, "BODY_TOO_BIG")
            line = body[start : stop - 1 if newline >= 0 else stop]
            start = stop
            if not line:
                continue
            if len(line) > max_msg:
                raise HttpError(413, "MSG_TOO_BIG")
            out.append(line)
        return out

    def _parse_binary_mpub(self, body: bytes) -> list[bytes]:
        """[int32 count] then [int32 size][bytes] per message; trailing bytes are ignored."""
        if len(body) < 4:
            raise HttpError(413, "BAD_BODY")
        (count,) = struct.unpack_from(">i", body, 0)
        if count <= 0 or count > (self.opts.max_body_size - 4) // 5:
            raise HttpError(413, "BAD_BODY")
        pos, out = 4, []
        for _ in range(count):
            if pos + 4 > len(body):
                raise HttpError(413, "BAD_MESSAGE")
            (size,) = struct.unpack_from(">i", body, pos)
            pos += 4
            if size <= 0 or size > self.opts.max_msg_size or pos + size > len(body):
                raise HttpError(413, "BAD_MESSAGE")
            out.append(body[pos : pos + size])
            pos += size
        return out

    # -- topic and channel actions ---------------------------------------------------

    def _existing_topic(self, request: web.Request, *, validate: bool = False) -> Topic:
        """The ``topic`` named (not validated unless ``validate``); 404 TOPIC_NOT_FOUND."""
        name = named_topic_args(request, None)[1]
        if validate and not valid_topic_name(name):
            raise HttpError(400, "INVALID_TOPIC")
        topic = self.broker.get_topic(name)
        if topic is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        return topic

    async def topic_create(self, request: web.Request) -> web.StreamResponse:
        args, name = named_topic_args(request)
        gate = self.server.cluster
        if gate is None or is_ephemeral(name):
            http_extend.create_topic(self.broker, name, args)
            return v1_empty()
        # In a cluster the topic is etcd's: created through the coordinator (the cluster's
        # defaults, at least ``partition_num`` partitions), as a PUB of a new topic would.
        count = http_extend.create_args(args)[0]
        try:
            if count is None:
                await cluster_topic(gate, name)
            else:
                await gate.create_partitions(name, count)
        except ProtocolError as exc:
            raise HttpError(400, exc.code) from None
        return v1_empty()

    async def partition_expand(self, request: web.Request) -> web.StreamResponse:
        if self.server.cluster is not None:  # (etcd's topic: the coordinator grows it)
            raise HttpError(400, "E_EXPAND_THROUGH_NSQLOOKUPD")
        topic = self._existing_topic(request, validate=True)
        http_extend.expand_topic(self.broker, topic, query_args(request))
        self.server.after_change()
        return v1_empty()

    async def topic_delete(self, request: web.Request) -> web.StreamResponse:
        topic = self._existing_topic(request)  # nsqd does not validate the name here
        if self.server.cluster is not None and not is_ephemeral(topic.name):
            raise HttpError(400, "E_DELETE_THROUGH_NSQLOOKUPD")  # (etcd's: the coordinator's)
        self.broker.delete_topic(topic.name)
        self.server.after_change()
        return v1_empty()

    async def topic_empty(self, request: web.Request) -> web.StreamResponse:
        topic = self._existing_topic(request, validate=True)
        topic.empty()
        self.broker.save_metadata()
        return v1_empty()

    async def _topic_pause(self, request: web.Request, paused: bool) -> web.StreamResponse:
        topic = self._existing_topic(request)
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

    def _channel_args(self, request: web.Request) -> tuple[Topic, str]:
        args, tname = named_topic_args(request, "INVALID_ARG_TOPIC")
        cname = first(args, "channel")
        if cname is None:
            raise HttpError(400, "MISSING_ARG_CHANNEL")
        if not valid_channel_name(cname):
            raise HttpError(400, "INVALID_ARG_CHANNEL")
        topic = self.broker.get_topic(tname)
        if topic is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        return topic, cname

    async def channel_create(self, request: web.Request) -> web.StreamResponse:
        gate = self.server.cluster
        if gate is not None:
            # A topic etcd has, and this node is to hold, may not be taken up here yet (it
            # was created a moment ago, or this node's watch has not brought it): it is
            # taken up now, as a SUB would, rather than answered 404
            name = named_topic_args(request, "INVALID_ARG_TOPIC")[1]
            local = self.broker.get_topic(name) is not None or is_ephemeral(name)
            if not local and gate.where(name) == ABSENT:  # (``where`` takes up what it can)
                with contextlib.suppress(ProtocolError):
                    await gate.prepare(name, create=False)
        topic, cname = self._channel_args(request)
        self.broker.channel(topic, cname)
        return v1_empty()

    async def _channel_action(self, request: web.Request, action: str) -> web.StreamResponse:
        topic, cname = self._channel_args(request)
        channel = topic.channels.get(cname)
        if channel is None:
            raise HttpError(404, "CHANNEL_NOT_FOUND")
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
        try:
            return config_value(self.opts, opt)
        except KeyError:  # not one of nsqd's /config names
            raise HttpError(400, "INVALID_OPTION") from None

    async def config_get(self, request: web.Request) -> web.StreamResponse:
        return v1_json(self._config_value(request.match_info["opt"]))

    async def config_put(self, request: web.Request) -> web.StreamResponse:
        opt = request.match_info["opt"]
        limit = self.opts.max_msg_size
        body = await read_at_most(request, limit + 1)
        if not body or len(body) > limit:
            raise HttpError(413, "INVALID_VALUE")
        if opt == "nsqlookupd_tcp_addresses":
            try:
                value = json.loads(body)
            except (ValueError, RecursionError):  # RecursionError: nested too deep
                raise HttpError(400, "INVALID_VALUE") from None
            if value is None:  # Go unmarshals null into a nil slice
                value = []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise HttpError(400, "INVALID_VALUE")
            self.opts.lookupd_tcp_addresses = value
            self.server.lookupd_addresses_changed()
            return v1_json(value)
        if opt == "log_level":
            level = body.decode(errors="replace").lower()  # lg.ParseLogLevel: no trimming
            if level not in LOG_LEVELS:
                raise HttpError(400, "INVALID_VALUE")
            self.opts.log_level = level
            self.server.apply_log_level()
            return v1_json(self._config_value("log_level"))
        raise HttpError(400, "INVALID_OPTION")

    async def free_memory(self, request: web.Request) -> web.StreamResponse:
        import gc

        gc.collect()
        return web.Response(text="")
