"""nsqlookupd's HTTP API (SPEC 3.2): the route table first, then one handler per endpoint.

Every response follows NSQ's V1 conventions through ``nsqpy.httpapi`` (``/ping`` is plain
text, as in NSQ). Arguments come from the URL query, parsed as Go's ``url.ParseQuery``
does: the first value wins, ``?topic=`` gives an empty topic, and a malformed query (a bad
``%`` escape, a ``;``) is 400 INVALID_REQUEST. As in nsqlookupd, ``*`` given as a topic
where names are not validated (/channels, /lookup, /topic/delete, /topic/tombstone) is a
wildcard. JSON objects keep nsqlookupd's key orders (Go sorts map keys, keeps struct
order). Imports aiohttp, nsqpy.httpapi and the registry; never the TCP side.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from nsqpy import NSQ_VERSION
from nsqpy.httpapi import nsq_middleware, v1_empty, v1_error, v1_json
from nsqpy.lookupd.registry import PeerInfo, Registry
from nsqpy.metrics.lookupd_metrics import LookupdView, add_lookupd_metrics
from nsqpy.protocol.names import valid_channel_name, valid_topic_name

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Go's zero time.Time in UnixNano (what /debug shows for a producer never tombstoned).
GO_ZERO_TIME_NS = -6795364578871345152
_HEX = "0123456789abcdefABCDEF"


def make_app(daemon: LookupdView) -> web.Application:
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
        ("POST", "/topic/create", api.topic_create),
        ("POST", "/topic/delete", api.topic_delete),
        ("POST", "/channel/create", api.channel_create),
        ("POST", "/channel/delete", api.channel_delete),
        ("POST", "/topic/tombstone", api.topic_tombstone),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
    add_lookupd_metrics(app, daemon)  # nsqpy: GET /metrics (Prometheus)
    return app


# -- query arguments ---------------------------------------------------------------------------


def _unescape(text: str) -> str:
    """Go's url.QueryUnescape: ``+`` is a space, ``%XX`` a byte; a bad escape is a ValueError."""
    if "%" not in text:
        return text.replace("+", " ")
    raw = bytearray()
    i = 0
    data = text.encode("utf-8", "surrogateescape")
    while i < len(data):
        byte = data[i]
        if byte == 0x25:  # %
            pair = data[i + 1 : i + 3].decode("latin-1")
            if len(pair) != 2 or pair[0] not in _HEX or pair[1] not in _HEX:
                raise ValueError(f"invalid URL escape {data[i : i + 3]!r}")
            raw.append(int(pair, 16))
            i += 3
            continue
        raw.append(0x20 if byte == 0x2B else byte)
        i += 1
    return raw.decode("utf-8", "surrogateescape")


def parse_query(raw_query: str) -> dict[str, list[str]]:
    """Go's url.ParseQuery; raises ValueError where Go returns an error."""
    values: dict[str, list[str]] = {}
    for part in raw_query.split("&"):
        if ";" in part:
            raise ValueError("invalid semicolon separator in query")
        if not part:
            continue
        key, _, value = part.partition("=")
        values.setdefault(_unescape(key), []).append(_unescape(value))
    return values


class Args:
    """The query arguments of one request (``None`` when the query was malformed)."""

    def __init__(self, request: web.Request) -> None:
        try:
            self.values: dict[str, list[str]] | None = parse_query(request.rel_url.raw_query_string)
        except ValueError:
            self.values = None

    def get(self, name: str) -> str | None:
        assert self.values is not None
        found = self.values.get(name)
        return found[0] if found else None


def _args(request: web.Request) -> Args | web.Response:
    args = Args(request)
    return args if args.values is not None else v1_error("INVALID_REQUEST", 400)


def _topic_channel(args: Args) -> tuple[str, str] | web.Response:
    """http_api.GetTopicChannelArgs: both present and valid, in that order."""
    topic = args.get("topic")
    if topic is None:
        return v1_error("MISSING_ARG_TOPIC", 400)
    if not valid_topic_name(topic):
        return v1_error("INVALID_ARG_TOPIC", 400)
    channel = args.get("channel")
    if channel is None:
        return v1_error("MISSING_ARG_CHANNEL", 400)
    if not valid_channel_name(channel):
        return v1_error("INVALID_ARG_CHANNEL", 400)
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

    async def channels(self, request: web.Request) -> web.StreamResponse:
        args = _args(request)
        if isinstance(args, web.Response):
            return args
        topic = args.get("topic")
        if topic is None:
            return v1_error("MISSING_ARG_TOPIC", 400)
        return v1_json({"channels": self.registry.channels(topic)})

    async def lookup(self, request: web.Request) -> web.StreamResponse:
        args = _args(request)
        if isinstance(args, web.Response):
            return args
        topic = args.get("topic")
        if topic is None:
            return v1_error("MISSING_ARG_TOPIC", 400)
        found = self.registry.lookup(topic)
        if found is None:
            return v1_error("TOPIC_NOT_FOUND", 404)
        channels, peers = found
        return v1_json({"channels": channels, "producers": [peer_json(p) for p in peers]})

    async def nodes(self, request: web.Request) -> web.StreamResponse:
        producers = [
            {**peer_json(peer), "tombstones": tombstones, "topics": topics}
            for peer, topics, tombstones in self.registry.nodes()
        ]
        return v1_json({"producers": producers})

    async def topic_create(self, request: web.Request) -> web.StreamResponse:
        args = _args(request)
        if isinstance(args, web.Response):
            return args
        topic = args.get("topic")
        if topic is None:
            return v1_error("MISSING_ARG_TOPIC", 400)
        if not valid_topic_name(topic):
            return v1_error("INVALID_ARG_TOPIC", 400)
        self.registry.create_topic(topic)
        return v1_empty()

    async def topic_delete(self, request: web.Request) -> web.StreamResponse:
        args = _args(request)
        if isinstance(args, web.Response):
            return args
        topic = args.get("topic")
        if topic is None:
            return v1_error("MISSING_ARG_TOPIC", 400)
        self.registry.delete_topic(topic)
        return v1_empty()

    async def channel_create(self, request: web.Request) -> web.StreamResponse:
        args = _args(request)
        if isinstance(args, web.Response):
            return args
        names = _topic_channel(args)
        if isinstance(names, web.Response):
            return names
        self.registry.create_channel(*names)
        return v1_empty()

    async def channel_delete(self, request: web.Request) -> web.StreamResponse:
        args = _args(request)
        if isinstance(args, web.Response):
            return args
        names = _topic_channel(args)
        if isinstance(names, web.Response):
            return names
        if not self.registry.delete_channel(*names):
            return v1_error("CHANNEL_NOT_FOUND", 404)
        return v1_empty()

    async def topic_tombstone(self, request: web.Request) -> web.StreamResponse:
        args = _args(request)
        if isinstance(args, web.Response):
            return args
        topic = args.get("topic")
        if topic is None:
            return v1_error("MISSING_ARG_TOPIC", 400)
        node = args.get("node")
        if node is None:
            return v1_error("MISSING_ARG_NODE", 400)
        self.registry.tombstone(topic, node)
        return v1_empty()
