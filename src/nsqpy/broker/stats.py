"""/stats of nsqd: the JSON document (field names and order of NSQ 1.3.0) and the text form.

Reads broker state only. Must not import asyncio or any server.
"""

from __future__ import annotations

import gc
import resource
import time

from nsqpy import NSQ_VERSION
from nsqpy.broker.broker import Broker
from nsqpy.broker.channel import Channel
from nsqpy.broker.topic import Topic


def _latency(samples: list[int], percentiles: list[float]) -> dict[str, object]:
    if not percentiles:
        return {"count": 0, "percentiles": None}
    ordered = sorted(samples)
    out = []
    for q in sorted(percentiles, reverse=True):
        value = float(ordered[min(len(ordered) - 1, int(q * len(ordered)))]) if ordered else 0.0
        out.append({"quantile": q, "value": value})
    return {"count": len(ordered), "percentiles": out}


def channel_stats(
    channel: Channel, include_clients: bool, percentiles: list[float]
) -> dict[str, object]:
    clients = [c.stats() for c in channel.consumers] if include_clients else None
    return {
        "channel_name": channel.name,
        "depth": channel.depth,
        "backend_depth": 0 if channel.topic.ephemeral else channel.depth,
        "in_flight_count": channel.in_flight_count,
        "deferred_count": channel.deferred_count,
        "message_count": channel.message_count,
        "requeue_count": channel.requeue_count,
        "timeout_count": channel.timeout_count,
        "client_count": len(channel.consumers),
        "clients": clients,
        "paused": channel.paused,
        "e2e_processing_latency": _latency(channel.e2e_latencies, percentiles),
    }


def topic_stats(
    topic: Topic, channel_filter: str | None, include_clients: bool, percentiles: list[float]
) -> dict[str, object]:
    channels = [
        channel_stats(topic.channels[name], include_clients, percentiles)
        for name in sorted(topic.channels)
        if channel_filter is None or name == channel_filter
    ]
    samples: list[int] = []
    for ch in topic.channels.values():
        samples.extend(ch.e2e_latencies)
    return {
        "topic_name": topic.name,
        "channels": channels,
        "depth": topic.depth,
        "backend_depth": 0 if topic.ephemeral else topic.depth,
        "message_count": topic.message_count,
        "message_bytes": topic.message_bytes,
        "paused": topic.paused,
        "e2e_processing_latency": _latency(samples, percentiles),
    }


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
    """The /stats?format=json document."""
    pct = broker.opts.e2e_processing_latency_percentiles
    topics: list[dict[str, object]] | None
    if topic is not None and topic not in broker.topics:
        topics = None
    else:
        topics = [
            topic_stats(broker.topics[name], channel, include_clients, pct)
            for name in sorted(broker.topics)
            if topic is None or name == topic
        ]
    doc: dict[str, object] = {
        "version": NSQ_VERSION,
        "health": broker.health,
        "start_time": broker.start_time,
        "topics": topics,
    }
    if include_mem:
        doc["memory"] = memory_stats()
    producers = None
    if include_clients:
        producers = [c.stats() for c in broker.clients.values() if c.pub_counts] or None
    doc["producers"] = producers
    return doc


def _duration(seconds: int) -> str:
    h, rem = divmod(max(0, seconds), 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m}m{s}s" if h else (f"{m}m{s}s" if m else f"{s}s")


def stats_text(doc: dict[str, object]) -> str:
    """NSQ's plain-text /stats layout."""
    now = int(time.time())
    start = int(doc["start_time"])  # type: ignore[call-overload]
    lines = [
        f"nsqd v{NSQ_VERSION} (nsqpy)",
        f"start_time {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(start))}",
        f"uptime {_duration(now - start)}",
        "",
        f"Health: {doc['health']}",
        "",
    ]
    mem = doc.get("memory")
    if isinstance(mem, dict):
        lines.append("Memory:")
        lines += [f"   {k:<25}\t{v}" for k, v in mem.items()]
        lines.append("")
    topics = doc.get("topics") or []
    if not topics:
        lines.append("Topics: None")
    else:
        lines.append("Topics:")
    for t in topics:  # type: ignore[attr-defined]
        mark = "*P " if t["paused"] else ""
        lines.append(
            f"   {mark}[{t['topic_name']:<15}] depth: {t['depth']:<5} be-depth: "
            f"{t['backend_depth']:<5} msgs: {t['message_count']:<8}"
        )
        for c in t["channels"]:
            cmark = "*P " if c["paused"] else ""
            lines.append(
                f"      {cmark}[{c['channel_name']:<25}] depth: {c['depth']:<5} be-depth: "
                f"{c['backend_depth']:<5} inflt: {c['in_flight_count']:<4} def: "
                f"{c['deferred_count']:<4} re-q: {c['requeue_count']:<5} timeout: "
                f"{c['timeout_count']:<5} msgs: {c['message_count']:<8}"
            )
            for cl in c["clients"] or []:
                lines.append(
                    f"        [V2 {cl['remote_address']:<21} {cl['user_agent']}] state: "
                    f"{cl['state']} inflt: {cl['in_flight_count']:<4} rdy: {cl['ready_count']:<4} "
                    f"fin: {cl['finish_count']:<8} re-q: {cl['requeue_count']:<8} msgs: "
                    f"{cl['message_count']:<8} connected: {_duration(now - cl['connect_ts'])}"
                )
    producers = doc.get("producers") or []
    lines.append("")
    if not producers:
        lines.append("Producers: None")
    else:
        lines.append("Producers:")
        for p in producers:  # type: ignore[attr-defined]
            counts = " ".join(f"{pc['topic']}={pc['count']}" for pc in p.get("pub_counts", []))
            lines.append(
                f"   [V2 {p['remote_address']:<21} {p['user_agent']}] msgs: "
                f"{p['message_count']:<8} topics: {counts} connected: "
                f"{_duration(now - p['connect_ts'])}"
            )
    return "\n".join(lines) + "\n"
