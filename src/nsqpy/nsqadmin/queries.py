"""The read side of nsqadmin: each API resource and page's data, in NSQ's JSON shapes.

One async function per resource (topics, topic, channel, nodes, node, counter, the
topic overview of the list page), shared by the JSON API and the HTML pages so both
always show the same thing. Each returns its payload and fills an ``Errors`` with the
upstreams that failed; ``AllFailed`` (from cluster) and ``NotFound`` propagate. In an
nsqpy cluster (``cluster_state``) a topic adds ``partitions`` (leader, ISR, lag per
partition), the node list each node's lease and counts plus a ``cluster`` summary, a node
its ``cluster`` fields; a single node's documents are NSQ's, unchanged. Imports cluster,
cluster_state, stats and history; no aiohttp.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from nsqpy.nsqadmin import partitions
from nsqpy.nsqadmin.cluster import Cluster, Errors, NotFound, find_producer
from nsqpy.nsqadmin.cluster_state import (
    cluster_state,
    node_cluster,
    topic_partitions,
    with_leases,
)
from nsqpy.nsqadmin.history import History
from nsqpy.nsqadmin.stats import Json, aggregate_topic

__all__ = ["Cluster", "NotFound"]

A = TypeVar("A")
B = TypeVar("B")


async def topics(cluster: Cluster, errors: Errors) -> list[str]:
    return await cluster.topics(errors)


async def inactive_topics(cluster: Cluster, errors: Errors) -> dict[str, list[str]]:
    """lookupd topics that no nsqd produces, with their registered channels."""
    if not cluster.uses_lookupd:
        return {}
    limit = asyncio.Semaphore(16)

    async def channels_if_inactive(topic: str) -> list[str] | None:
        async with limit:
            if await cluster.lookupd_topic_producers(topic, errors):
                return None
            return await cluster.topic_channels(topic, errors)

    topics = await cluster.topics(errors)
    found = await asyncio.gather(*(channels_if_inactive(t) for t in topics))
    return {t: c for t, c in zip(topics, found, strict=True) if c is not None}


async def topic(cluster: Cluster, name: str, errors: Errors) -> Json:
    """Aggregated TopicStats of ``name`` over every node that has it."""
    producers = await cluster.topic_producers(name, errors)
    if producers is None:
        raise NotFound("TOPIC_NOT_FOUND")
    per_node = await cluster.node_stats(producers, errors, topic=name, include_clients=False)
    doc = aggregate_topic(name, per_node)
    if partitions.is_cluster_topic(per_node):
        state = await cluster_state(cluster, errors)
        doc["partitions"] = await topic_partitions(
            cluster, name, producers, per_node, state, errors
        )
    return doc


async def channel(cluster: Cluster, topic_name: str, name: str, errors: Errors) -> Json:
    """Aggregated ChannelStats (per-node stats and every client) of one channel."""
    producers = await cluster.topic_producers(topic_name, errors)
    if producers is None:
        raise NotFound("TOPIC_NOT_FOUND")
    per_node = await cluster.node_stats(producers, errors, topic=topic_name, channel=name)
    found = cluster.channel_stats(per_node).get((topic_name, name))
    if found is None:
        raise NotFound("CHANNEL_NOT_FOUND")
    return found


async def nodes(cluster: Cluster, errors: Errors) -> list[Json]:
    return [p.to_json() for p in await cluster.producers(errors)]


async def nodes_and_cluster(cluster: Cluster, errors: Errors) -> tuple[list[Json], Json | None]:
    """The node list and, in an nsqpy cluster, each node's lease and counts and the
    cluster summary (lookupds, coordinator); ``None`` for a plain NSQ cluster."""
    found, state = await _both(nodes(cluster, errors), cluster_state(cluster, errors))
    if state is None:
        return found, None
    return with_leases(found, state), state.to_json()


async def node(cluster: Cluster, name: str, errors: Errors) -> Json:
    """One nsqd's topics (with channels and clients) and totals."""
    producer = find_producer(await cluster.producers(errors), name)
    if producer is None:
        raise NotFound("NODE_NOT_FOUND")
    per_node, state = await _both(
        cluster.node_stats([producer], errors), cluster_state(cluster, errors)
    )
    doc = {
        "node": name,
        "topics": per_node,
        "total_messages": sum(t["message_count"] for t in per_node),
        "total_clients": sum(len(c["clients"]) for t in per_node for c in t["channels"]),
        "producer": producer.to_json(),
    }
    if state is not None:
        doc["cluster"] = node_cluster(producer, state)
    return doc


async def _both(first: Awaitable[A], second: Awaitable[B]) -> tuple[A, B]:
    """Both results; when one fails, the other is still awaited, then the failure raised."""
    a, b = await asyncio.gather(first, second, return_exceptions=True)
    if isinstance(a, BaseException):
        raise a
    if isinstance(b, BaseException):
        raise b
    return a, b


async def counter(cluster: Cluster, errors: Errors) -> dict[str, Json]:
    """``topic:channel:node`` -> that channel's message count on that node."""
    producers = await cluster.producers(errors)
    per_node = await cluster.node_stats(producers, errors, include_clients=False)
    stats: dict[str, Json] = {}
    for (t, c), agg in cluster.channel_stats(per_node).items():
        for n in agg["nodes"]:
            key = f"{t}:{c}:{n['node']}"
            entry = stats.setdefault(
                key, {"node": n["node"], "topic_name": t, "channel_name": c, "message_count": 0}
            )
            entry["message_count"] += n["message_count"]
    return stats


async def overview(cluster: Cluster, history: History, errors: Errors) -> list[Json]:
    """Every topic (with producers) aggregated, plus its latest sampled rate, for the list."""
    names = await cluster.topics(errors)
    producers = await cluster.producers(errors)
    per_node = await cluster.node_stats(producers, errors, include_clients=False)
    grouped: dict[str, list[Json]] = {n: [] for n in names}
    for t in per_node:
        grouped.setdefault(t["topic_name"], []).append(t)
    out = []
    for name in sorted(grouped):
        agg = aggregate_topic(name, grouped[name])
        agg["rate"] = history.latest_rate((name, "", "*"))
        out.append(agg)
    return out


def with_rates(history: History, doc: Json, topic_name: str, channel_name: str = "") -> Json:
    """Add the latest sampled ``rate`` to a topic/channel and each of its nodes/channels."""
    doc["rate"] = history.latest_rate((topic_name, channel_name, "*"))
    for n in doc.get("nodes") or []:
        n["rate"] = history.latest_rate((topic_name, channel_name, n["node"]))
    if not channel_name:
        for c in doc.get("channels") or []:
            with_rates(history, c, topic_name, c["channel_name"])
    return doc
