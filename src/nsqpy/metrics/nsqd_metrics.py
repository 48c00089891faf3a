"""nsqd's ``/metrics`` (beyond NSQ): /stats as Prometheus counters and gauges.

Per topic (label ``topic``) and channel (``topic``, ``channel``): NSQ's running counts as
counters (``nsqd_topic_messages_total``, ``nsqd_channel_requeued_total``, …) and the levels
as gauges (depth, backend depth, in-flight, deferred, clients, paused), e2e latency
percentiles as gauges in seconds with a ``quantile`` label when configured, plus node-wide
gauges and the garbage collector's counts. In a cluster, per partition held here (labels
``topic``, ``partition``): whether this node leads it, its ISR size, committed and end
offsets; per partition led here and each other holder (``follower``): how far behind it
is, in messages and in seconds since it was last heard; the node's lease, report writes
and forwarded publishes. One call registers the route:
``add_nsqd_metrics(app, daemon)`` from nsqd's HTTP module. Sees nsqd only through
``NsqdView`` (never imports ``nsqpy.nsqd``); reads the broker through ``broker.stats``;
never changes anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from nsqpy import NSQ_VERSION
from nsqpy.broker.broker import Broker
from nsqpy.broker.stats import stats
from nsqpy.metrics.exposition import Family, etcd_latency_family
from nsqpy.metrics.routes import add_metrics_route
from nsqpy.options import NsqdOptions

TOPIC_METRICS = [  # (/stats field, family name, kind, help)
    ("message_count", "nsqd_topic_messages", "counter", "messages published to the topic"),
    ("message_bytes", "nsqd_topic_message_bytes", "counter", "bytes of message bodies published"),
    ("depth", "nsqd_topic_depth", "gauge", "messages not yet handed to every channel"),
    ("backend_depth", "nsqd_topic_backend_depth", "gauge", "of the depth, messages on disk"),
    ("paused", "nsqd_topic_paused", "gauge", "1 while the topic is paused"),
]
CHANNEL_METRICS = [
    ("message_count", "nsqd_channel_messages", "counter", "messages delivered to the channel"),
    ("requeue_count", "nsqd_channel_requeued", "counter", "messages requeued (REQ)"),
    ("timeout_count", "nsqd_channel_timed_out", "counter", "in-flight messages that timed out"),
    ("depth", "nsqd_channel_depth", "gauge", "messages waiting to be sent"),
    ("backend_depth", "nsqd_channel_backend_depth", "gauge", "of the depth, messages on disk"),
    ("in_flight_count", "nsqd_channel_in_flight", "gauge", "messages sent, not yet FIN'd"),
    ("deferred_count", "nsqd_channel_deferred", "gauge", "messages deferred (DPUB, REQ delay)"),
    ("client_count", "nsqd_channel_clients", "gauge", "consumers subscribed"),
    ("paused", "nsqd_channel_paused", "gauge", "1 while the channel is paused"),
]


@dataclass(frozen=True)
class NodeFigures:
    """An nsqd's cluster side, for its metrics."""

    live: bool  # its lease is held: it takes part in the cluster
    reports_written: int
    forwarded: int  # publishes forwarded to a partition's leader elsewhere
    forward_failures: int
    # (topic, partition, follower, messages behind, seconds since heard; -1: never)
    lags: Sequence[tuple[str, int, str, int, float]] = ()
    lease_left: float = -1.0  # seconds its lease has left, as last renewed (-1: none)
    # etcd calls' times by kind: kind -> (cumulative counts per LATENCY_BUCKETS, sum, count)
    etcd_latency: Mapping[str, tuple[Sequence[int], float, int]] = field(default_factory=dict)


class NsqdView(Protocol):
    """What the exporter reads of nsqd: its broker, options (the broadcast address) and TCP
    connections (counted). ``NsqdServer`` is one; this module never names it."""

    @property
    def broker(self) -> Broker: ...

    @property
    def opts(self) -> NsqdOptions: ...

    @property
    def connections(self) -> Sized: ...

    def cluster_figures(self) -> NodeFigures | None:
        """None outside a cluster."""
        ...


def _latency(family: Family, latency: Any, **labels: str) -> None:
    for item in (latency or {}).get("percentiles") or []:
        family.add(float(item["value"]) / 1e9, quantile=f"{item['quantile']:g}", **labels)


def nsqd_families(daemon: NsqdView) -> list[Family]:
    """Every family of one scrape, from a single /stats document."""
    doc = stats(daemon.broker, include_clients=False, include_mem=True)
    topics: list[dict[str, Any]] = doc["topics"] or []  # type: ignore[assignment]
    node = [
        Family("nsqd_info", "gauge", "1, labelled with the NSQ version and broadcast address").add(
            1, version=NSQ_VERSION, broadcast_address=daemon.opts.broadcast_address
        ),
        Family("nsqd_start_time_seconds", "gauge", "start time, Unix seconds").add(
            int(doc["start_time"])  # type: ignore[call-overload]
        ),
        Family("nsqd_healthy", "gauge", "1 while nsqd is healthy").add(int(daemon.broker.healthy)),
        Family("nsqd_topics", "gauge", "topics").add(len(topics)),
        Family("nsqd_channels", "gauge", "channels").add(sum(len(t["channels"]) for t in topics)),
        Family("nsqd_clients", "gauge", "TCP clients connected").add(len(daemon.connections)),
    ]
    by_topic = {name: Family(name, kind, text) for _, name, kind, text in TOPIC_METRICS}
    by_channel = {name: Family(name, kind, text) for _, name, kind, text in CHANNEL_METRICS}
    topic_e2e = Family(
        "nsqd_topic_e2e_processing_latency_seconds", "gauge", "e2e latency percentiles"
    )
    channel_e2e = Family(
        "nsqd_channel_e2e_processing_latency_seconds", "gauge", "e2e latency percentiles"
    )
    for t in topics:
        topic = str(t["topic_name"])
        for key, name, _, _ in TOPIC_METRICS:
            by_topic[name].add(int(t[key]), topic=topic)
        _latency(topic_e2e, t["e2e_processing_latency"], topic=topic)
        for c in t["channels"]:
            channel = str(c["channel_name"])
            for key, name, _, _ in CHANNEL_METRICS:
                by_channel[name].add(int(c[key]), topic=topic, channel=channel)
            _latency(channel_e2e, c["e2e_processing_latency"], topic=topic, channel=channel)
    mem: dict[str, int] = doc.get("memory") or {}  # type: ignore[assignment]
    runtime = [
        Family(
            "nsqd_heap_objects",
            "gauge",
            "objects allocated and not yet examined by a garbage collection (gc.get_count summed)",
        ).add(mem.get("heap_objects", 0)),
        Family("nsqd_gc_runs", "counter", "garbage collector runs").add(
            mem.get("gc_total_runs", 0)
        ),
    ]
    return [
        *node,
        *by_topic.values(),
        topic_e2e,
        *by_channel.values(),
        channel_e2e,
        *runtime,
        *cluster_families(topics, daemon.cluster_figures()),
    ]


def cluster_families(topics: list[dict[str, Any]], figures: NodeFigures | None) -> list[Family]:
    """The partitions held here and their followers (none outside a cluster)."""
    if figures is None:
        return []
    leader = Family("nsqd_partition_leader", "gauge", "1 while this nsqd leads the partition")
    isr = Family("nsqd_partition_isr", "gauge", "in-sync replicas of the partition, as in etcd")
    committed = Family(
        "nsqd_partition_committed_offset",
        "gauge",
        "offset below which every ISR member has the partition's messages",
    )
    end = Family("nsqd_partition_end_offset", "gauge", "offset after the last message here")
    for t in topics:
        for p in t.get("partitions") or []:
            labels = {"topic": str(t["topic_name"]), "partition": str(p["partition"])}
            leader.add(int(p.get("role") == "leader"), **labels)
            isr.add(len(p.get("isr") or ()), **labels)
            committed.add(int(p.get("committed_offset") or 0), **labels)
            end.add(int(p["high_watermark"]), **labels)
    behind = Family(
        "nsqd_partition_follower_lag_messages",
        "gauge",
        "messages a holder of a partition led here is behind the leader",
    )
    silent = Family(
        "nsqd_partition_follower_silent_seconds",
        "gauge",
        "seconds since the leader last heard a holder (-1: not in this epoch)",
    )
    for topic, partition, follower, lag, quiet in figures.lags:
        labels = {"topic": topic, "partition": str(partition), "follower": follower}
        behind.add(lag, **labels)
        silent.add(round(quiet, 3), **labels)
    return [
        Family("nsqd_cluster_live", "gauge",
               "1 while this nsqd holds its lease and takes part in the cluster").add(
            int(figures.live)
        ),
        Family("nsqd_cluster_lease_remaining_seconds", "gauge",
               "seconds this nsqd's etcd lease has left as of its last renewal (renewed every "
               "third of its TTL: a value falling toward 0 means keep-alives fail; -1: none)").add(
            round(figures.lease_left, 3)
        ),
        Family("nsqd_cluster_reports_written", "counter",
               "writes of this nsqd's report to etcd (only when it changed)").add(
            figures.reports_written
        ),
        Family("nsqd_cluster_forwarded_messages", "counter",
               "publishes forwarded to the partition's leader on another nsqd").add(
            figures.forwarded
        ),
        Family("nsqd_cluster_forward_failures", "counter",
               "forwarded publishes that failed").add(figures.forward_failures),
        etcd_latency_family("nsqd", figures.etcd_latency),
        leader, isr, committed, end, behind, silent,
    ]  # fmt: skip


def add_nsqd_metrics(app: web.Application, daemon: NsqdView) -> None:
    """Register nsqd's ``GET /metrics``."""
    add_metrics_route(app, "nsqd", lambda: nsqd_families(daemon))
