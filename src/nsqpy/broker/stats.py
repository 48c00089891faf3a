"""/stats of nsqd: the JSON document (field names and order of NSQ 1.3.0) and the text form.

A topic and each of its channels appear once, with the totals of all partitions. A topic
with several partitions (or an ordered channel) adds fields after NSQ's, so NSQ's readers
are unaffected: the topic's ``partition_num`` and ``partitions`` (per partition: number,
depth, message count, low/high watermarks), a channel's ``ordered`` and ``partitions``
(per partition: depth, in flight, deferred, counters and, when ordered, the owning
client's id). In cluster mode (``Broker.cluster_mode``) every topic and channel lists its
partitions (those held here), a topic's each with its ``role``, ``leader_epoch`` and
``committed_offset`` and what ``Broker.partition_info`` adds (leader, ISR...); a single
node's document is NSQ's as before. The e2e latency of a channel is one window shared by
its partitions; a topic merges its channels'. Reads broker state only. Must not import asyncio or any server.
"""

from __future__ import annotations

import gc
import resource
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import partial

from nsqpy import NSQ_VERSION
from nsqpy.broker.broker import Broker
from nsqpy.broker.channel import Channel
from nsqpy.broker.e2e import LatencyWindow, latency_result
from nsqpy.broker.partition import Partition
from nsqpy.broker.topic import Topic

PartitionInfo = Callable[[str, int], dict[str, object]]  # Broker.partition_info


def _windows(channels: Iterable[Channel]) -> list[LatencyWindow]:
    return [c.e2e for c in channels if c.e2e is not None]


def _channel_partitions(channel: Channel) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for part in channel.parts:
        number = part.number
        entry: dict[str, object] = {
            "partition": number,
            "depth": part.depth,
            "in_flight_count": part.in_flight_count,
            "deferred_count": part.deferred_count,
            "message_count": part.message_count,
            "requeue_count": part.requeue_count,
            "timeout_count": part.timeout_count,
            "confirmed_offset": part.cursor.confirmed,
        }
        if channel.delivery is not None:
            owner = channel.delivery.owner_of(number)
            entry["owner"] = owner.client_id if owner is not None else None
        out.append(entry)
    return out


def _topic_partitions(
    topic: Topic, cluster: bool, info: PartitionInfo | None
) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for part in topic.partitions:
        entry: dict[str, object] = {
            "partition": part.number,
            "depth": part.depth,
            "message_count": part.message_count,
            "low_watermark": part.log.low_watermark,
            "high_watermark": part.log.flushed_offset,
        }
        if cluster:
            entry.update(_roles(part, info))
        out.append(entry)
    return out


def _roles(part: Partition, info: PartitionInfo | None) -> dict[str, object]:
    """A partition's cluster fields: what this node knows, then the cluster layer's."""
    entry: dict[str, object] = {
        "role": part.role,
        "leader_epoch": part.leader_epoch,
        "committed_offset": part.committed_offset,
        "durable_offset": part.log.durable_offset,  # (fsynced on this node)
    }
    if info is not None:
        entry.update(info(part.name, part.number))
    return entry


def channel_stats(
    channel: Channel,
    include_clients: bool,
    percentiles: list[float],
    topic_filter: str | None = None,
    now: int = 0,
    cluster: bool = False,
) -> dict[str, object]:
    clients = [c.stats(topic_filter) for c in channel.consumers] if include_clients else None
    doc: dict[str, object] = {
        "channel_name": channel.name,
        "depth": channel.depth,
        "backend_depth": 0 if channel.topic.ephemeral or channel.ephemeral else channel.depth,
        "in_flight_count": channel.in_flight_count,
        "deferred_count": channel.deferred_count,
        "message_count": channel.message_count,
        "requeue_count": channel.requeue_count,
        "timeout_count": channel.timeout_count,
        "client_count": len(channel.consumers),
        "clients": clients,
        "paused": channel.paused,
        "e2e_processing_latency": latency_result(_windows([channel]), percentiles, now),
    }
    if channel.ordered:
        doc["ordered"] = True
    if channel.ordered or len(channel.parts) > 1 or cluster:
        doc["partitions"] = _channel_partitions(channel)
    return doc


def topic_stats(
    topic: Topic,
    channel_filter: str | None,
    include_clients: bool,
    percentiles: list[float],
    topic_filter: str | None = None,
    now: int = 0,
    *,
    cluster: bool = False,
    info: PartitionInfo | None = None,
) -> dict[str, object]:
    """A topic's document; ``cluster``: with its partitions' roles (``info`` adds the
    cluster layer's fields)."""
    channels = [
        channel_stats(
            topic.channels[name], include_clients, percentiles, topic_filter, now, cluster
        )
        for name in sorted(topic.channels)
        if channel_filter is None or name == channel_filter
    ]
    doc: dict[str, object] = {
        "topic_name": topic.name,
        "channels": channels,
        "depth": topic.depth,
        "backend_depth": 0 if topic.ephemeral else topic.depth,
        "message_count": topic.message_count,
        "message_bytes": topic.message_bytes,
        "paused": topic.paused,
        "e2e_processing_latency": latency_result(
            _windows(topic.channels.values()), percentiles, now
        ),
    }
    if topic.partition_count > 1 or cluster:
        doc["partition_num"] = topic.partition_count
        if cluster:
            doc["retention_ms"] = topic.retention_ms
            doc["sync_every"] = topic.sync_every
        doc["partitions"] = _topic_partitions(topic, cluster, info)
    if topic.ordered:
        doc["ordered"] = True
    return doc


def memory_stats() -> dict[str, int]:
    counts = gc.get_count()
    gc_stats = gc.get_stats()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "heap_objects": sum(counts),
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": rss,
        "heap_released_bytes": 0,
        "gc_pause_usec_100": 0,
        "gc_pause_usec_99": 0,
        "gc_pause_usec_95": 0,
        "next_gc_bytes": 0,
        "gc_total_runs": sum(int(s.get("collections", 0)) for s in gc_stats),
    }


def stats(
    broker: Broker,
    *,
    topic: str | None = None,
    channel: str | None = None,
    include_clients: bool = True,
    include_mem: bool = True,
) -> dict[str, object]:
    """The /stats?format=json document, filtered as nsqd 1.3.0 filters it.

    A ``topic`` filter naming no topic gives ``topics`` and ``producers`` null; a
    ``channel`` filter leaves out the topics that have no such channel.
    """
    pct = broker.opts.e2e_processing_latency_percentiles
    now = broker.clock()
    topics: list[dict[str, object]] | None = None
    producers: list[dict[str, object]] | None = None
    if topic is None or topic in broker.topics:
        one = partial(topic_stats, cluster=broker.cluster_mode, info=broker.partition_info)
        topics = [
            one(broker.topics[name], channel, include_clients, pct, topic, now)
            for name in sorted(broker.topics)
            if (topic is None or name == topic)
            and (channel is None or channel in broker.topics[name].channels)
        ]
        broker.features.add_stats(topics)  # nsqpy's extra fields (README "Beyond NSQ")
        if include_clients:
            producers = [c.stats(topic) for c in broker.clients.values() if c.pub_counts] or None
    doc: dict[str, object] = {
        "version": NSQ_VERSION,
        "health": broker.health,
        "start_time": broker.start_time,
        "topics": topics,
    }
    if include_mem:
        doc["memory"] = memory_stats()
    doc["producers"] = producers
    return doc


def _fraction(value: int, unit: int) -> str:
    """``value/unit`` in decimal, trailing zeros of the fraction dropped (Go's fmtFrac)."""
    whole, frac = divmod(value, unit)
    digits = str(frac).rjust(len(str(unit)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


def go_duration(ns: int) -> str:
    """Go's ``time.Duration.String()``: 0s, 850ms, 1.5µs, 45s, 1m30.25s, 2h0m5.000000001s."""
    if ns == 0:
        return "0s"
    sign, u = ("-", -ns) if ns < 0 else ("", ns)
    if u < 1_000:
        return f"{sign}{u}ns"
    if u < 1_000_000:
        return f"{sign}{_fraction(u, 1_000)}\u00b5s"
    if u < 1_000_000_000:
        return f"{sign}{_fraction(u, 1_000_000)}ms"
    h, rem = divmod(u, 3_600_000_000_000)
    m, rem = divmod(rem, 60_000_000_000)
    head = f"{h}h{m}m" if h else (f"{m}m" if m else "")
    return f"{sign}{head}{_fraction(rem, 1_000_000_000)}s"


def _duration(seconds: int) -> str:
    """A Go duration truncated to whole seconds (a client's ``connected``)."""
    return go_duration(max(0, seconds) * 1_000_000_000)


def _rfc3339(unix_seconds: int) -> str:
    """Go's ``Time.Format(time.RFC3339)`` in the local time zone ("Z" for UTC)."""
    local = datetime.fromtimestamp(unix_seconds, tz=UTC).astimezone()
    text = local.isoformat(timespec="seconds")
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _human_ns(value: float) -> str:
    """NSQ's NanoSecondToHuman: the unit whose size the value exceeds, one decimal."""
    for unit, size in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if value > size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.1f}ns"


def _e2e(latency: object) -> str:
    """nsqd's e2e%: the percentile values, comma separated ("" when none are tracked)."""
    pcts = latency.get("percentiles") if isinstance(latency, dict) else None
    return ", ".join(_human_ns(float(p["value"])) for p in pcts or [])


def _client_line(cl: dict[str, object], now: int) -> str:
    """ClientV2Stats.String(): a producer line when it has pub_counts, else a consumer line."""
    port = str(cl["remote_address"]).rpartition(":")[2]
    ident = f"{cl['hostname']}:{port} {cl['user_agent']}"
    connected = _duration(now - int(cl["connect_ts"]))  # type: ignore[call-overload]
    counts = cl.get("pub_counts")
    if isinstance(counts, list) and counts:
        total = sum(int(c["count"]) for c in counts)
        topics = ",".join(f"{c['topic']}={c['count']}" for c in counts)
        return f"[V2 {ident:<21}] msgs: {total:<8} topics: {topics} connected: {connected}"
    return (
        f"[V2 {ident:<21}] state: {cl['state']} inflt: {cl['in_flight_count']:<4} "
        f"rdy: {cl['ready_count']:<4} fin: {cl['finish_count']:<8} "
        f"re-q: {cl['requeue_count']:<8} msgs: {cl['message_count']:<8} connected: {connected}"
    )


def stats_text(
    doc: dict[str, object], *, now_ns: int | None = None, start_ns: int | None = None
) -> str:
    """nsqd 1.3.0's plain-text /stats layout (printStats); ``start_ns`` gives the uptime its
    full precision (``start_time`` of the document otherwise)."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    now = now_ns // 1_000_000_000
    start = int(doc["start_time"])  # type: ignore[call-overload]
    uptime = now_ns - (start * 1_000_000_000 if start_ns is None else start_ns)
    out = [
        f"nsqd v{NSQ_VERSION} (nsqpy)\n",
        f"start_time {_rfc3339(start)}\n",
        f"uptime {go_duration(max(0, uptime))}\n",
        f"\nHealth: {doc['health']}\n",
    ]
    mem = doc.get("memory")
    if isinstance(mem, dict):
        out.append("\nMemory:\n")
        out += [f"   {k:<25}\t{v}\n" for k, v in mem.items()]
    topics = doc.get("topics") or []
    out.append("\nTopics: None\n" if not topics else "\nTopics:")
    for t in topics:  # type: ignore[attr-defined]
        mark = "*P " if t["paused"] else "   "
        out.append(
            f"\n{mark}[{t['topic_name']:<15}] depth: {t['depth']:<5} be-depth: "
            f"{t['backend_depth']:<5} msgs: {t['message_count']:<8} "
            f"e2e%: {_e2e(t['e2e_processing_latency'])}\n"
        )
        for c in t["channels"]:
            cmark = "   *P " if c["paused"] else "      "
            out.append(
                f"{cmark}[{c['channel_name']:<25}] depth: {c['depth']:<5} be-depth: "
                f"{c['backend_depth']:<5} inflt: {c['in_flight_count']:<4} def: "
                f"{c['deferred_count']:<4} re-q: {c['requeue_count']:<5} timeout: "
                f"{c['timeout_count']:<5} msgs: {c['message_count']:<8} "
                f"e2e%: {_e2e(c['e2e_processing_latency'])}\n"
            )
            out += [f"        {_client_line(cl, now)}\n" for cl in c["clients"] or []]
    producers = doc.get("producers") or []
    if not producers:
        out.append("\nProducers: None\n")
    else:
        out.append("\nProducers:\n")
        out += [f"   {_client_line(p, now)}\n" for p in producers]  # type: ignore[attr-defined]
    return "".join(out)
