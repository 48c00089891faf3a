"""nsqlookupd's HTTP API (SPEC 3.2): the route table first, then one handler per endpoint.

Every response follows NSQ's V1 conventions through ``nsqpy.httpapi`` (``/ping`` is plain
text, as in NSQ). Arguments come from the URL query, parsed as Go's ``url.ParseQuery``
does (``httpapi.query_args``, as nsqd reads them): the first value wins, ``?topic=`` gives an empty topic, and a malformed query (a bad
``%`` escape, a ``;``) is 400 INVALID_REQUEST. As in nsqlookupd, ``*`` given as a topic
where names are not validated (/channels, /lookup, /topic/delete, /topic/tombstone) is a
wildcard. JSON objects keep nsqlookupd's key orders (Go sorts map keys, keeps struct
order). Handlers and their argument checks raise ``HttpError(status, code)``; the one
``nsq_middleware`` writes it. Imports aiohttp, nsqpy.httpapi, the registry and the metrics
exporter (which reads the daemon through ``LookupdView``); never the TCP side.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nsqpy import NSQ_VERSION
from nsqpy.httpapi import Args, HttpError, first, nsq_middleware, query_args, v1_empty, v1_json
from nsqpy.lookupd.registry import PeerInfo, Registry
from nsqpy.metrics.lookupd_metrics import LookupdView, add_lookupd_metrics
from nsqpy.protocol.names import valid_channel_name, valid_topic_name

if TYPE_CHECKING:
    from nsqpy.lookupd.cluster_http import ClusterHttpApi

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Go's zero time.Time in UnixNano (what /debug shows for a producer never tombstoned).
GO_ZERO_TIME_NS = -6795364578871345152


def make_app(daemon: LookupdView, cluster: ClusterHttpApi | None = None) -> web.Application:
    """The app; with ``cluster`` (``--etcd-endpoints``) its routes take the place of the
    registry's for the same paths and add Youzan's (``nsqpy.lookupd.cluster_http``)."""
    api = HttpApi(daemon.registry)
    app = web.Application(middlewares=[nsq_middleware])
    routes: list[tuple[str, str, Handler]] = [
        ("GET", "/ping", api.ping),
        ("GET", "/info", api.info),
        ("GET", "/debug", api.debug),
        ("GET", "/lookup", api.lookup),
        ("GET", "/topics", api.topics),
        ("GET", "/channels", api.channels),
        ("GET", "/nodes", api.nodes),
        ("GET", "/listlookup", api.listlookup),
        ("POST", "/topic/create", api.topic_create),
        ("POST", "/topic/delete", api.topic_delete),
        ("POST", "/channel/create", api.channel_create),
        ("POST", "/channel/delete", api.channel_delete),
        ("POST", "/topic/tombstone", api.topic_tombstone),
    ]
    if cluster is not None:
        replaced = {(method, path): handler for method, path, handler in cluster.routes()}
        routes = [(m, p, replaced.pop((m, p), h)) for m, p, h in routes]
        routes += [(m, p, h) for (m, p), h in replaced.items()]
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
    add_lookupd_metrics(app, daemon)  # nsqpy: GET /metrics (Prometheus)
    return app


# -- query arguments ---------------------------------------------------------------------------


def _required(args: Args, name: str) -> str:
    """The argument's first value; 400 ``MISSING_ARG_<NAME>`` when it is absent."""
    value = first(args, name)
    if value is None:
        raise HttpError(400, f"MISSING_ARG_{name.upper()}")
    return value


def _topic_channel(args: Args) -> tuple[str, str]:
    """http_api.GetTopicChannelArgs: both present and valid, in that order."""
    topic = _required(args, "topic")
    if not valid_topic_name(topic):
        raise HttpError(400, "INVALID_ARG_TOPIC")
    channel = _required(args, "channel")
    if not valid_channel_name(channel):
        raise HttpError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


# -- JSON shapes -------------------------------------------------------------------------------


def peer_json(peer: PeerInfo) -> dict[str, Any]:
    """A producer in /lookup, in PeerInfo's field order."""
    return {
        "remote_address": peer.remote_address,
        "hostname": peer.hostname,
        "broadcast_address": peer.broadcast_address,
        "tcp_port": peer.tcp_port,
        "http_port": peer.http_port,
        "version": peer.version,
    }


def debug_json(registry: Registry) -> dict[str, list[dict[str, Any]]]:
    """/debug: ``category:key:subkey`` -> producers (registrations without any are absent)."""
    data: dict[str, list[dict[str, Any]]] = {}
    for reg, producers in registry.db.items():
        key = f"{reg.category}:{reg.key}:{reg.subkey}"
        for producer in producers.values():
            peer = producer.peer
            at = producer.tombstoned_at
            data.setdefault(key, []).append(
                {
                    "broadcast_address": peer.broadcast_address,
                    "hostname": peer.hostname,
                    "http_port": peer.http_port,
                    "id": peer.id,
                    "last_update": peer.last_update,
                    "tcp_port": peer.tcp_port,
                    "tombstoned": producer.tombstoned,
                    "tombstoned_at": GO_ZERO_TIME_NS if at is None else at,
                    "version": peer.version,
                }
            )
    return dict(sorted(data.items()))


# -- handlers ----------------------------------------------------------------------------------


class HttpApi:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    async def ping(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="OK")

    async def info(self, request: web.Request) -> web.StreamResponse:
        return v1_json({"version": NSQ_VERSION})

    async def debug(self, request: web.Request) -> web.StreamResponse:
        return v1_json(debug_json(self.registry))

    async def topics(self, request: web.Request) -> web.StreamResponse:
        return v1_json({"topics": self.registry.topics()})

    async def listlookup(self, request: web.Request) -> web.StreamResponse:
        """youzan's lookupd discovery: a lookupd of no cluster lists no others, and
        answers as youzan's does then (200, no data; youzan's clients keep the one they
        asked)."""
        return v1_empty()

    async def channels(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        topic = _required(args, "topic")
        return v1_json({"channels": self.registry.channels(topic)})

    async def lookup(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        topic = _required(args, "topic")
        found = self.registry.lookup(topic)
        if found is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        channels, peers = found
        doc: dict[str, Any] = {"channels": channels, "producers": [peer_json(p) for p in peers]}
        if "metainfo" in args:  # (youzan's clients ask so; NSQ's answer stays as it was)
            parts = self.registry.partitions(topic, peers)
            doc["partitions"] = {str(n): peer_json(p) for n, p in sorted(parts.items())}
            doc["meta"] = {
                "partition_num": len(parts),
                "replica": 1,
                "extend_support": True,
                "ordered": False,
                "multi_part": False,
                "disable_channel_auto_create": False,
            }
        return v1_json(doc)

    async def nodes(self, request: web.Request) -> web.StreamResponse:
        producers = [
            {**peer_json(peer), "tombstones": tombstones, "topics": topics}
            for peer, topics, tombstones in self.registry.nodes()
        ]
        return v1_json({"producers": producers})

    async def topic_create(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        topic = _required(args, "topic")
        if not valid_topic_name(topic):
            raise HttpError(400, "INVALID_ARG_TOPIC")
        self.registry.create_topic(topic)
        return v1_empty()

    async def topic_delete(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        topic = _required(args, "topic")
        self.registry.delete_topic(topic)
        return v1_empty()

    async def channel_create(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        names = _topic_channel(args)
        self.registry.create_channel(*names)
        return v1_empty()

    async def channel_delete(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        names = _topic_channel(args)
        if not self.registry.delete_channel(*names):
            raise HttpError(404, "CHANNEL_NOT_FOUND")
        return v1_empty()

    async def topic_tombstone(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        topic = _required(args, "topic")
        node = _required(args, "node")
        self.registry.tombstone(topic, node)
        return v1_empty()
