"""nsqlookupd's ``/metrics`` (beyond NSQ): the registry and the traffic as Prometheus metrics.

Gauges for the connected nsqd (``nsqlookupd_producers``), known topics and channels and
the live producers of each topic (label ``topic``); counters for the TCP commands received
(``nsqlookupd_tcp_commands_total{command=...}``), the cluster's calls on ``--rpc-address``
(``nsqlookupd_rpc_connections_total``) and, through ``routes``, the HTTP
responses. In a cluster (``--etcd-endpoints``), the cluster's health as this lookupd's
view of etcd shows it (``cluster_families``): whether it is the coordinator, live nodes,
partitions offline (no live leader), under-replicated (an ISR smaller than the topic's
replicas, or with a member that is not live), catching up and moving, per topic and in
all, and the coordinator's applied changes and etcd compaction. Every lookupd of a
cluster reports the same partitions (alert on ``max``). One call registers the route:
``add_lookupd_metrics(app, daemon)`` from lookupd's HTTP module. Reads the registry and
the view; never changes them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from nsqpy import NSQ_VERSION
from nsqpy.cluster.model import HEALTH_KINDS, Snapshot, partition_health
from nsqpy.lookupd.registry import Registry
from nsqpy.metrics.exposition import Family, etcd_latency_family
from nsqpy.metrics.routes import add_metrics_route


class Peer(Protocol):
    """A TCP connection of an nsqd: ``peer`` is set once it identified."""

    @property
    def peer(self) -> object: ...


@dataclass(frozen=True)
class ClusterFigures:
    """A cluster lookupd's side, for its metrics: its view of etcd and its coordinator's
    counts (those of its own terms as the coordinator)."""

    snapshot: Snapshot
    coordinator: bool  # this lookupd holds the coordinator lock
    changes_applied: int
    compacted_revision: int
    elections: int = 0  # of the changes: a new leader
    isr_shrinks: int = 0  # an ISR that lost a member
    isr_expands: int = 0  # an ISR that gained one
    # etcd calls' times by kind: kind -> (cumulative counts per LATENCY_BUCKETS, sum, count)
    etcd_latency: Mapping[str, tuple[Sequence[int], float, int]] = field(default_factory=dict)


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

    def cluster_figures(self) -> ClusterFigures | None:
        """None outside a cluster (or before its view started)."""
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
        *cluster_families(daemon.cluster_figures()),
    ]


def cluster_families(figures: ClusterFigures | None) -> list[Family]:
    """The cluster's health as one lookupd sees it (none outside a cluster)."""
    if figures is None:
        return []
    snap = figures.snapshot
    live = snap.nodes
    health = partition_health(snap)
    per_topic = {k: dict.fromkeys(snap.topics, 0) for k in HEALTH_KINDS}
    for kind, found in health.items():
        for topic, _ in found:
            per_topic[kind][topic] += 1
    partitions = sum(1 for t, p in snap.replicas
                     if (meta := snap.topics.get(t)) is not None and p < meta.partition_num)  # fmt: skip
    out = [
        Family("nsqlookupd_cluster_coordinator", "gauge",
               "1 while this lookupd is the cluster's coordinator").add(int(figures.coordinator)),
        Family("nsqlookupd_cluster_nodes", "gauge", "nsqd with a live lease").add(len(live)),
        Family("nsqlookupd_cluster_nodes_draining", "gauge", "nsqd being drained").add(
            len(snap.removing)
        ),
        Family("nsqlookupd_cluster_partitions", "gauge", "partitions of every topic").add(
            partitions
        ),
    ]  # fmt: skip
    texts = {
        "offline": "partitions whose leader is not live: no publish or delivery",
        "under_replicated": "partitions whose ISR is smaller than the topic's replicas or "
        "has a member that is not live",
        "catching_up": "partitions with a replica copying the log (not yet in the ISR)",
        "moving": "partitions being moved by the rebalancer or a drain",
    }
    for kind in HEALTH_KINDS:
        total = Family(f"nsqlookupd_cluster_partitions_{kind}", "gauge", texts[kind])
        out.append(total.add(sum(per_topic[kind].values())))
        topics = Family(f"nsqlookupd_cluster_topic_partitions_{kind}", "gauge",
                        f"{texts[kind]}, by topic")  # fmt: skip
        for topic, count in sorted(per_topic[kind].items()):
            topics.add(count, topic=topic)
        out.append(topics)
    out += [
        Family("nsqlookupd_cluster_changes_applied", "counter",
               "changes of partitions' leaders and replicas this lookupd wrote as the "
               "coordinator (elections, ISR changes, repairs, moves)").add(
            figures.changes_applied
        ),
        Family("nsqlookupd_cluster_leader_elections", "counter",
               "partitions this lookupd gave a new leader as the coordinator").add(
            figures.elections
        ),
        Family("nsqlookupd_cluster_isr_shrinks", "counter",
               "ISRs this lookupd took a member out of as the coordinator").add(
            figures.isr_shrinks
        ),
        Family("nsqlookupd_cluster_isr_expands", "counter",
               "ISRs this lookupd added a member to as the coordinator").add(
            figures.isr_expands
        ),
        etcd_latency_family("nsqlookupd", figures.etcd_latency),
        Family("nsqlookupd_cluster_etcd_revision", "gauge",
               "the etcd revision this lookupd's view is at").add(snap.revision),
        Family("nsqlookupd_cluster_etcd_compacted_revision", "gauge",
               "the revision etcd's history was compacted up to by this lookupd").add(
            figures.compacted_revision
        ),
    ]  # fmt: skip
    return out


def add_lookupd_metrics(app: web.Application, daemon: LookupdView) -> None:
    """Register nsqlookupd's ``GET /metrics``."""
    add_metrics_route(app, "nsqlookupd", lambda: lookupd_families(daemon))
