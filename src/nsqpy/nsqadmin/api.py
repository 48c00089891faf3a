"""nsqadmin's JSON API (SPEC 4): the route table first, then one handler per endpoint.

V1 conventions through ``nsqpy.httpapi``. Every body carries ``"message"``: "" or
``"WARNING: ..."`` naming the upstreams that failed; when all failed, 502
``UPSTREAM_ERROR: ...``. Privileged actions answer 403 FORBIDDEN unless the caller is an
``--admin-user`` (by the ``--acl-http-header``). Bad input is always a 4xx JSON error,
raised as ``HttpError`` and written by ``nsq_middleware``: a bad topic/channel name in the
path is 400 INVALID_TOPIC/INVALID_CHANNEL, an unparsable body 400 INVALID_BODY, an unknown
action 400 INVALID_ACTION, an unknown topic, channel or node 404
TOPIC_NOT_FOUND/CHANNEL_NOT_FOUND/NODE_NOT_FOUND. Also ``/api/history`` (nsqpy: the sampled
series behind the built-in graphs), ``/config/:opt`` and the nsqpy cluster's operations
(``POST /api/cluster/topics``: create with partitions and replicas; ``POST
/api/cluster/topics/:topic``: ``expand`` or ``move``; ``POST /api/cluster/nodes/:id``:
``remove``, a drain), sent through the first lookupd that answers to the coordinator, whose
refusal comes back with its status and code. ``cluster_errors``, the middleware
the server mounts, turns the cluster's ``NotFound`` into 404 and ``AllFailed`` into 502 for
every route (the pages catch both first and render them). Handlers are given an
``AdminContext``; imports aiohttp, ``nsqpy.httpapi`` and the nsqadmin modules below the
handlers, never ``server``.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from nsqpy.errors import ConfigError
from nsqpy.flags import LOG_LEVELS
from nsqpy.httpapi import HttpError, query_arg, v1_json, v1_text
from nsqpy.nsqadmin import queries
from nsqpy.nsqadmin.cluster import AllFailed, Cluster, Errors, NotFound, find_producer
from nsqpy.nsqadmin.context import AdminContext
from nsqpy.nsqadmin.graphite import fetch_rate
from nsqpy.nsqadmin.options import check_upstream, config_value
from nsqpy.nsqadmin.upstream import UpstreamError
from nsqpy.protocol.names import valid_channel_name, valid_topic_name

log = logging.getLogger("nsqpy.nsqadmin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_BODY = 1024 * 1024


def routes(api: Api) -> list[tuple[str, str, Handler]]:
    return [
        ("GET", "/ping", api.ping),
        ("GET", "/api/topics", api.topics),
        ("GET", "/api/topics/{topic}", api.topic),
        ("GET", "/api/topics/{topic}/{channel}", api.channel),
        ("GET", "/api/nodes", api.nodes),
        ("GET", "/api/nodes/{node}", api.node),
        ("POST", "/api/topics", api.create_topic_channel),
        ("POST", "/api/topics/{topic}", api.topic_action),
        ("POST", "/api/topics/{topic}/{channel}", api.channel_action),
        ("POST", "/api/cluster/topics", api.cluster_create),
        ("POST", "/api/cluster/topics/{topic}", api.cluster_topic_action),
        ("POST", "/api/cluster/nodes/{node}", api.cluster_node_action),
        ("DELETE", "/api/nodes/{node}", api.tombstone_topic_producer),
        ("DELETE", "/api/topics/{topic}", api.delete_topic),
        ("DELETE", "/api/topics/{topic}/{channel}", api.delete_channel),
        ("GET", "/api/counter", api.counter),
        ("GET", "/api/graphite", api.graphite),
        ("GET", "/api/history", api.history),
        ("GET", "/config/{opt}", api.config),
        ("PUT", "/config/{opt}", api.config),
    ]


def path_topic(request: web.Request) -> str:
    name = request.match_info["topic"]
    if not valid_topic_name(name):
        raise HttpError(400, "INVALID_TOPIC")
    return name


def path_channel(request: web.Request) -> str:
    name = request.match_info["channel"]
    if not valid_channel_name(name):
        raise HttpError(400, "INVALID_CHANNEL")
    return name


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object, else 400 INVALID_BODY."""
    raw = await request.content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise HttpError(413, "INVALID_BODY")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        raise HttpError(400, "INVALID_BODY") from None
    if not isinstance(doc, dict):
        raise HttpError(400, "INVALID_BODY")
    return doc


def body_name(doc: dict[str, Any], key: str, *, required: bool) -> str:
    value = doc.get(key, "")
    if value is None:
        value = ""
    code, valid = (
        ("INVALID_TOPIC", valid_topic_name)
        if key == "topic"
        else ("INVALID_CHANNEL", valid_channel_name)
    )
    if not isinstance(value, str) or (required and not value) or (value and not valid(value)):
        raise HttpError(400, code)
    return value


def _params(doc: dict[str, Any], *names: str, optional: tuple[str, ...] = ()) -> dict[str, str]:
    """Query arguments for lookupd from a JSON body: numbers or strings (a form's fields);
    the lookupd checks the values. 400 ``MISSING_ARG_<NAME>`` for a required one missing."""
    out = {}
    for name in (*names, *optional):
        value = doc.get(name)
        if value is None or value == "":
            if name in names:
                raise HttpError(400, f"MISSING_ARG_{name.upper()}")
            continue
        if isinstance(value, bool) or not isinstance(value, int | str) or len(str(value)) > 300:
            raise HttpError(400, f"INVALID_ARG_{name.upper()}")
        out[name] = str(value)
    return out


def answer(errors: Errors, payload: dict[str, Any] | None = None) -> web.Response:
    return v1_json({**(payload or {}), "message": errors.warning()})


@web.middleware
async def cluster_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The cluster's failures as HTTP errors: an unknown topic, channel or node is 404 with
    its code, every upstream failing 502 ``UPSTREAM_ERROR: ...`` (logged)."""
    try:
        return await handler(request)
    except NotFound as exc:
        raise HttpError(404, exc.code) from None
    except AllFailed as exc:
        log.warning("%s %s: %s", request.method, request.path, exc)
        raise HttpError(502, f"UPSTREAM_ERROR: {exc}") from None


class Api:
    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx
        self.opts = ctx.opts

    @property
    def cluster(self) -> Cluster:
        return self.ctx.cluster

    def authorize(self, request: web.Request) -> None:
        """403 FORBIDDEN unless ``--admin-user`` is unset or the ACL header names one."""
        if self.opts.admin_users:
            user = request.headers.get(self.opts.acl_http_header, "")
            if user not in self.opts.admin_users:
                raise HttpError(403, "FORBIDDEN")

    async def ping(self, request: web.Request) -> web.StreamResponse:
        return v1_text("OK")

    # -- reads -----------------------------------------------------------------------------

    async def topics(self, request: web.Request) -> web.StreamResponse:
        errors = Errors()
        if query_arg(request, "inactive") == "true":
            inactive = await queries.inactive_topics(self.cluster, errors)
            return answer(errors, {"topics": inactive})
        return answer(errors, {"topics": await queries.topics(self.cluster, errors)})

    async def topic(self, request: web.Request) -> web.StreamResponse:
        name, errors = path_topic(request), Errors()
        doc = await queries.topic(self.cluster, name, errors)
        return answer(errors, queries.with_rates(self.ctx.history, doc, name))

    async def channel(self, request: web.Request) -> web.StreamResponse:
        topic, channel, errors = path_topic(request), path_channel(request), Errors()
        doc = await queries.channel(self.cluster, topic, channel, errors)
        return answer(errors, queries.with_rates(self.ctx.history, doc, topic, channel))

    async def nodes(self, request: web.Request) -> web.StreamResponse:
        errors = Errors()
        found, summary = await queries.nodes_and_cluster(self.cluster, errors)
        return answer(errors, {"nodes": found, **({"cluster": summary} if summary else {})})

    async def node(self, request: web.Request) -> web.StreamResponse:
        errors = Errors()
        doc = await queries.node(self.cluster, request.match_info["node"], errors)
        return answer(errors, doc)

    async def counter(self, request: web.Request) -> web.StreamResponse:
        errors = Errors()
        return answer(errors, {"stats": await queries.counter(self.cluster, errors)})

    async def history(self, request: web.Request) -> web.StreamResponse:
        topic = query_arg(request, "topic") or ""
        channel = query_arg(request, "channel") or ""
        node = query_arg(request, "node") or "*"
        if topic and not valid_topic_name(topic):
            raise HttpError(400, "INVALID_TOPIC")
        if channel and (not topic or not valid_channel_name(channel)):
            raise HttpError(400, "INVALID_CHANNEL")
        history = self.ctx.history
        return v1_json(
            {
                "topic": topic,
                "channel": channel,
                "node": node,
                "interval_ms": self.opts.stats_sample_interval_ms,
                "size": history.size,
                "samples": history.generation,
                **history.series_json((topic, channel, node)),
                "message": "",
            }
        )

    async def graphite(self, request: web.Request) -> web.StreamResponse:
        if query_arg(request, "metric") != "rate":
            raise HttpError(400, "INVALID_ARG_METRIC")
        target = query_arg(request, "target")
        if not target:
            raise HttpError(400, "INVALID_ARG_TARGET")
        if not self.opts.graphite_url:
            raise HttpError(400, "GRAPHITE_NOT_CONFIGURED")
        interval_s = max(1, self.opts.statsd_interval_ms // 1000)
        try:
            rate = await fetch_rate(self.ctx.upstream, self.opts.graphite_url, target, interval_s)
        except UpstreamError as exc:
            raise HttpError(502, f"UPSTREAM_ERROR: {exc}") from None
        return v1_json({"rate": rate})

    # -- actions ---------------------------------------------------------------------------

    async def create_topic_channel(self, request: web.Request) -> web.StreamResponse:
        self.authorize(request)
        doc = await json_body(request)
        topic = body_name(doc, "topic", required=True)
        channel = body_name(doc, "channel", required=False)
        errors = Errors()
        await self.cluster.create_topic_channel(topic, channel, errors)
        self.ctx.notifier.notify(request, "create_topic", topic)
        if channel:
            self.ctx.notifier.notify(request, "create_channel", topic, channel)
        return answer(errors)

    async def topic_action(self, request: web.Request) -> web.StreamResponse:
        self.authorize(request)
        return await self._action(request, path_topic(request), "")

    async def channel_action(self, request: web.Request) -> web.StreamResponse:
        self.authorize(request)
        return await self._action(request, path_topic(request), path_channel(request))

    async def _action(self, request: web.Request, topic: str, channel: str) -> web.StreamResponse:
        action = (await json_body(request)).get("action")
        if action not in ("pause", "unpause", "empty"):
            raise HttpError(400, "INVALID_ACTION")
        errors = Errors()
        kind = "channel" if channel else "topic"
        params = {"topic": topic, "channel": channel} if channel else {"topic": topic}
        await self.cluster.producer_action(topic, f"/{kind}/{action}", params, errors)
        self.ctx.notifier.notify(request, f"{action}_{kind}", topic, channel)
        return answer(errors)

    # -- cluster operations (nsqpy cluster: through lookupd to the coordinator) -------------

    async def _coordinator(self, path: str, params: dict[str, str]) -> web.StreamResponse:
        if not self.cluster.uses_lookupd:
            raise HttpError(400, "E_NO_LOOKUPD")
        try:
            doc = await self.cluster.coordinator_action(path, params)
        except AllFailed:
            raise
        except UpstreamError as exc:  # the coordinator refused: its status and code
            log.info("cluster action %s %s refused: %s", path, params, exc)
            raise HttpError(exc.status if 400 <= exc.status < 600 else 502, exc.code or str(exc),
                            **({"detail": exc.detail} if exc.detail else {})) from None  # fmt: skip
        return v1_json({**doc, "message": ""})

    async def cluster_create(self, request: web.Request) -> web.StreamResponse:
        """``{"topic", "partition_num", "replicator", "multipart"?, "ordered"?}``."""
        self.authorize(request)
        doc = await json_body(request)
        topic = body_name(doc, "topic", required=True)
        params = {"topic": topic, **_params(doc, "partition_num", "replicator")}
        for flag, arg in (("multipart", "multipart"), ("ordered", "orderedmulti")):
            if doc.get(flag) in (True, "true", "on"):
                params[arg] = "true"
        answered = await self._coordinator("/topic/create", params)
        self.ctx.notifier.notify(request, "create_topic", topic)
        return answered

    async def cluster_topic_action(self, request: web.Request) -> web.StreamResponse:
        """``{"action": "expand", "partition_num"}`` or ``{"action": "move", "partition",
        "move_leader"?, "move_from"?, "move_to"?}``."""
        self.authorize(request)
        topic, doc = path_topic(request), await json_body(request)
        action = doc.get("action")
        if action == "expand":
            path, params = "/topic/partition/expand", _params(doc, "partition_num")
        elif action == "move":
            path = "/topic/partition/move"
            params = _params(doc, "partition", optional=("move_from", "move_to"))
            if doc.get("move_leader") in (True, "true", "on"):
                params["move_leader"] = "true"
        else:
            raise HttpError(400, "INVALID_ACTION")
        answered = await self._coordinator(path, {"topic": topic, **params})
        self.ctx.notifier.notify(request, f"{action}_topic", topic)
        return answered

    async def cluster_node_action(self, request: web.Request) -> web.StreamResponse:
        """``{"action": "remove"}``: drain the node (its nsqpy node id in the path)."""
        self.authorize(request)
        node = request.match_info["node"]
        if (await json_body(request)).get("action") != "remove":
            raise HttpError(400, "INVALID_ACTION")
        answered = await self._coordinator("/cluster/node/remove", {"remove_node": node})
        self.ctx.notifier.notify(request, "remove_node", "", node=node)
        return answered

    async def delete_topic(self, request: web.Request) -> web.StreamResponse:
        self.authorize(request)
        topic, errors = path_topic(request), Errors()
        await self.cluster.delete_topic(topic, errors)
        self.ctx.notifier.notify(request, "delete_topic", topic)
        return answer(errors)

    async def delete_channel(self, request: web.Request) -> web.StreamResponse:
        self.authorize(request)
        topic, channel, errors = path_topic(request), path_channel(request), Errors()
        await self.cluster.delete_channel(topic, channel, errors)
        self.ctx.notifier.notify(request, "delete_channel", topic, channel)
        return answer(errors)

    async def tombstone_topic_producer(self, request: web.Request) -> web.StreamResponse:
        self.authorize(request)
        node = request.match_info["node"]
        topic = body_name(await json_body(request), "topic", required=True)
        errors = Errors()
        producer = find_producer(await self.cluster.producers(errors), node)
        if producer is None:
            raise NotFound("NODE_NOT_FOUND")
        await self.cluster.tombstone(topic, producer, errors)
        self.ctx.notifier.notify(request, "tombstone_topic_producer", topic, "", node)
        return answer(errors)

    # -- /config ---------------------------------------------------------------------------

    async def config(self, request: web.Request) -> web.StreamResponse:
        self._config_allowed(request)
        opt = request.match_info["opt"]
        if request.method == "PUT":
            raw = await request.content.read(MAX_BODY + 1)
            if not raw or len(raw) > MAX_BODY:
                raise HttpError(413, "INVALID_VALUE")
            self._config_put(opt, raw)
        try:
            return v1_json(config_value(self.opts, opt))
        except KeyError:
            raise HttpError(400, "INVALID_OPTION") from None

    def _config_allowed(self, request: web.Request) -> None:
        cidr = self.opts.allow_config_from_cidr
        if not cidr:
            return
        peer = request.transport.get_extra_info("peername") if request.transport else None
        try:
            ip = ipaddress.ip_address(peer[0]) if peer else None
        except ValueError:
            ip = None
        if ip is None:
            raise HttpError(400, "INVALID_REMOTE_ADDR")
        if ip not in ipaddress.ip_network(cidr, strict=False):
            raise HttpError(403, "FORBIDDEN")

    def _config_put(self, opt: str, raw: bytes) -> None:
        if opt == "log_level":
            level = raw.decode("utf-8", "replace").strip().lower()
            if level not in LOG_LEVELS:
                raise HttpError(400, "INVALID_VALUE")
            self.opts.log_level = level
            logging.getLogger("nsqpy.nsqadmin").setLevel(LOG_LEVELS[level])
            return
        if opt != "nsqlookupd_http_addresses":
            raise HttpError(400, "INVALID_OPTION")
        try:
            addresses = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested too deep
            raise HttpError(400, "INVALID_VALUE") from None
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise HttpError(400, "INVALID_VALUE")
        if not addresses or self.opts.nsqd_http_addresses:
            raise HttpError(400, "INVALID_VALUE")  # exactly one of lookupd / nsqd lists is in use
        try:
            for a in addresses:
                check_upstream("lookupd-http-address", a)  # what the flag accepts
        except ConfigError:
            raise HttpError(400, "INVALID_VALUE") from None
        self.opts.lookupd_http_addresses = list(addresses)
        self.cluster.lookupd = list(addresses)
