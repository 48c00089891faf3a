"""nsqlookupd's ``/metrics`` (beyond NSQ): the registry and the traffic as Prometheus metrics.

Gauges for the connected nsqd (``nsqlookupd_producers``), known topics and channels and
the live producers of each topic (label ``topic``); counters for the TCP commands received
(``nsqlookupd_tcp_commands_total{command=...}``), the cluster's calls on ``--rpc-address``
(``nsqlookupd_rpc_connections_total``) and, through ``routes``, the HTTP
responses. One call registers the route: ``add_lookupd_metrics(app, daemon)`` from
lookupd's HTTP module. Reads the registry; never changes it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from aiohttp import web

from nsqpy import NSQ_VERSION
from nsqpy.lookupd.registry import Registry
from nsqpy.metrics.exposition import Family
from nsqpy.metrics.routes import add_metrics_route


class Peer(Protocol):
    """A TCP connection of an nsqd: ``peer`` is set once it identified."""

    @property
    def peer(self) -> object: ...


class LookupdView(Protocol):
    """What the exporter (and lookupd's HTTP app) read of nsqlookupd: its registry and
    traffic. ``NsqLookupd`` is one; this module never names it."""

    @property
    def registry(self) -> Registry: ...

    @property
    def command_counts(self) -> Mapping[str, int]: ...

    @property
    def connections(self) -> Collection[Peer]: ...

    @property
    def rpc_connections(self) -> int:
        """Connections the cluster's daemons opened on ``--rpc-address`` (mutual TLS)."""
        ...


def lookupd_families(daemon: LookupdView) -> list[Family]:
    registry = daemon.registry
    topics = sorted(registry.topics())
    per_topic = Family(
        "nsqlookupd_topic_producers", "gauge", "live, untombstoned producers of the topic"
    )
    channels = 0
    for topic in topics:
        found = registry.lookup(topic)
        if found is not None:
            names, producers = found
            channels += len(names)
            per_topic.add(len(producers), topic=topic)
    commands = Family("nsqlookupd_tcp_commands", "counter", "V1 commands received, by command")
    for name, count in sorted(daemon.command_counts.items()):
        commands.add(count, command=name)
    identified = sum(1 for conn in daemon.connections if conn.peer is not None)
    return [
        Family("nsqlookupd_info", "gauge", "1, labelled with the NSQ version").add(
            1, version=NSQ_VERSION
        ),
        Family("nsqlookupd_producers", "gauge", "nsqd connected and identified").add(identified),
        Family("nsqlookupd_topics", "gauge", "topics known").add(len(topics)),
        Family("nsqlookupd_channels", "gauge", "channels known").add(channels),
        per_topic,
        commands,
        Family(
            "nsqlookupd_rpc_connections",
            "counter",
            "connections of the cluster's daemons on --rpc-address (mutual TLS, handshake done)",
        ).add(daemon.rpc_connections),
    ]


def add_lookupd_metrics(app: web.Application, daemon: LookupdView) -> None:
    """Register nsqlookupd's ``GET /metrics``."""
    add_metrics_route(app, "nsqlookupd", lambda: lookupd_families(daemon))
