"""The shapes nsqadmin's JSON API returns, built from nsqd's /stats and nsqlookupd's replies.

Pure functions and one dataclass, no I/O: a producer (an nsqd as lookupd or /info sees it),
per-node TopicStats/ChannelStats/ClientStats in NSQ's nsqadmin field names (SPEC 4), their
aggregation across nodes (``node: "*"``, summed counts, ``nodes`` per-node lists, clients
merged, end-to-end latency percentiles combined as min/max/weighted average), and semver
for the out-of-date flag. Upstream JSON is read defensively: a missing or mistyped field is
zero/empty, never a crash. Imports only the standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

_SEMVER = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


def semver(text: str) -> tuple[int, int, int, int, str]:
    """A sortable semver key; anything unparsable is 0.0.0 (as nsqadmin does)."""
    m = _SEMVER.fullmatch(text.strip())
    if m is None:
        return (0, 0, 0, 1, "")
    pre = m.group(4) or ""
    # A release sorts after its pre-releases: (..., 1, "") > (..., 0, "alpha").
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)), 0 if pre else 1, pre)


def as_int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value == value and abs(value) < 2**63:
        return int(value)
    return 0


def as_float(value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and value == value and abs(value) < 2**63:
        return float(value)
    return 0.0


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> Json:
    return value if isinstance(value, dict) else {}


@dataclass
class Producer:
    """One nsqd: where to reach it, what it reports about itself, its topics."""

    broadcast_address: str
    http_port: int
    tcp_port: int = 0
    hostname: str = ""
    version: str = ""
    remote_address: str = ""
    remote_addresses: list[str] = field(default_factory=list)
    topics: list[tuple[str, bool]] = field(default_factory=list)  # (topic, tombstoned)
    out_of_date: bool = False
    address: str = ""  # where nsqadmin sends HTTP requests (defaults to the node name)
    node_id: str = ""  # an nsqpy cluster member's id (its /info ``node_id``)

    @property
    def node(self) -> str:
        """NSQ's node id: ``broadcast_address:http_port`` (plain ``%s:%d``)."""
        return f"{self.broadcast_address}:{self.http_port}"

    @property
    def http_address(self) -> str:
        return self.address or self.node

    @property
    def tcp_address(self) -> str:
        return f"{self.broadcast_address}:{self.tcp_port}"

    def to_json(self) -> Json:
        doc: Json = {
            "remote_addresses": list(self.remote_addresses),
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
            "topics": [{"topic": t, "tombstoned": tomb} for t, tomb in self.topics],
            "out_of_date": self.out_of_date,
        }
        if self.node_id:  # cluster mode only: a single node's document stays NSQ's
            doc["node_id"] = self.node_id
        return doc


def producer_from_peer(peer: Json) -> Producer | None:
    """A producer from a lookupd /lookup or /nodes entry (None when unusable)."""
    addr = as_str(peer.get("broadcast_address"))
    port = as_int(peer.get("http_port"))
    if not addr or port <= 0:
        return None
    topics = [t for t in as_list(peer.get("topics")) if isinstance(t, str)]
    tombs = as_list(peer.get("tombstones"))
    return Producer(
        broadcast_address=addr,
        http_port=port,
        tcp_port=as_int(peer.get("tcp_port")),
        hostname=as_str(peer.get("hostname")),
        version=as_str(peer.get("version")),
        remote_address=as_str(peer.get("remote_address")),
        node_id=as_str(peer.get("distributed_id")) or as_str(peer.get("id")),
        topics=sorted(
            (t, bool(tombs[i]) if i < len(tombs) else False) for i, t in enumerate(topics)
        ),
    )


def producer_from_info(address: str, info: Json, topic_names: list[str]) -> Producer:
    """A producer from nsqd's /info (and its /stats topic names), reached at ``address``."""
    host, _, port = address.rpartition(":")
    broadcast = as_str(info.get("broadcast_address")) or host.removeprefix("http://")
    http_port = as_int(info.get("http_port")) or as_int(port if port.isdigit() else 0)
    return Producer(
        broadcast_address=broadcast,
        http_port=http_port,
        tcp_port=as_int(info.get("tcp_port")),
        hostname=as_str(info.get("hostname")) or broadcast,
        version=as_str(info.get("version")),
        topics=[(t, False) for t in sorted(set(topic_names))],
        address=address,
        node_id=as_str(info.get("node_id")),
    )


def merge_lookupd_nodes(replies: list[tuple[str, list[Json]]]) -> list[Producer]:
    """Union of /nodes replies keyed by TCP address; ``remote_addresses`` = ``lookupd/peer``."""
    by_tcp: dict[str, Producer] = {}
    for lookupd, peers in replies:
        for peer in peers:
            producer = producer_from_peer(as_dict(peer))
            if producer is None:
                continue
            kept = by_tcp.setdefault(producer.tcp_address, producer)
            kept.remote_addresses.append(f"{lookupd}/{producer.remote_address or 'N/A'}")
    return mark_out_of_date(list(by_tcp.values()))


def mark_out_of_date(producers: list[Producer]) -> list[Producer]:
    """Flag every producer older than the newest one; sort by hostname then node."""
    if producers:
        newest = max(semver(p.version) for p in producers)
        for p in producers:
            p.out_of_date = semver(p.version) < newest
    return sorted(producers, key=lambda p: (p.hostname, p.node))


# -- end-to-end latency -------------------------------------------------------------------


def latency(raw: Any, topic: str, channel: str, host: str) -> Json:
    """nsqd's ``{"count","percentiles":[{"quantile","value"}]}`` in nsqadmin's aggregate form."""
    doc = as_dict(raw)
    count = as_int(doc.get("count"))
    percentiles = []
    for p in as_list(doc.get("percentiles")):
        p = as_dict(p)
        q, v = p.get("quantile"), p.get("value")
        if not isinstance(q, (int, float)) or not isinstance(v, (int, float)):
            continue
        value = float(v)
        percentiles.append(
            {
                "quantile": float(q),
                "value": value,
                "min": value,
                "max": value,
                "average": value,
                "count": float(count),
            }
        )
    percentiles.sort(key=lambda p: -p["quantile"])
    return {
        "count": count,
        "percentiles": percentiles or None,
        "topic": topic,
        "channel": channel,
        "host": host,
    }


def add_latency(total: Json, part: Json) -> None:
    """Fold one node's latency into an aggregate (min, max, count-weighted average)."""
    total["host"] = "*"
    total["count"] += part["count"]
    mine = {p["quantile"]: p for p in total["percentiles"] or []}
    for p in part["percentiles"] or []:
        have = mine.get(p["quantile"])
        if have is None:
            mine[p["quantile"]] = dict(p)
            continue
        have["max"] = max(have["max"], p["max"])
        have["min"] = min(have["min"], p["min"])
        count = have["count"] + p["count"]
        if count:
            have["average"] += (p["average"] - have["average"]) * p["count"] / count
        have["count"] = count
        have["value"] = have["max"]
    merged = sorted(mine.values(), key=lambda p: -p["quantile"])
    total["percentiles"] = merged or None


# -- per-node stats from nsqd's /stats ------------------------------------------------------


CLIENT_FIELDS_STR = (
    "remote_address",
    "name",
    "version",
    "client_id",
    "hostname",
    "user_agent",
    "auth_identity",
    "auth_identity_url",
    "tls_cipher_suite",
    "tls_version",
    "tls_negotiated_protocol",
)
CLIENT_FIELDS_INT = (
    "connect_ts",
    "in_flight_count",
    "ready_count",
    "finish_count",
    "requeue_count",
    "message_count",
    "sample_rate",
    "state",
)
CLIENT_FIELDS_BOOL = ("deflate", "snappy", "authed", "tls", "tls_negotiated_protocol_is_mutual")


def client_stats(node: str, raw: Any, now_s: int) -> Json:
    """One client connection as nsqadmin shows it; ``connected`` is in nanoseconds."""
    doc = as_dict(raw)
    out: Json = {"node": node}
    out.update({k: as_str(doc.get(k)) for k in CLIENT_FIELDS_STR})
    out.update({k: as_int(doc.get(k)) for k in CLIENT_FIELDS_INT})
    out.update({k: bool(doc.get(k)) for k in CLIENT_FIELDS_BOOL})
    out["connected"] = max(0, now_s - out["connect_ts"]) * 1_000_000_000
    if not out["client_id"]:
        port = out["remote_address"].rpartition(":")[2] or "NA"
        out["client_id"] = f"{out['name']}:{port}"
    return out


def node_channel(node: str, hostname: str, topic: str, raw: Any, now_s: int) -> Json:
    """One node's ChannelStats."""
    doc = as_dict(raw)
    name = as_str(doc.get("channel_name"))
    depth, backend = as_int(doc.get("depth")), as_int(doc.get("backend_depth"))
    clients = [client_stats(node, c, now_s) for c in as_list(doc.get("clients"))]
    return {
        "node": node,
        "hostname": hostname,
        "topic_name": topic,
        "channel_name": name,
        "depth": depth,
        "memory_depth": max(0, depth - backend),
        "backend_depth": backend,
        "in_flight_count": as_int(doc.get("in_flight_count")),
        "deferred_count": as_int(doc.get("deferred_count")),
        "requeue_count": as_int(doc.get("requeue_count")),
        "timeout_count": as_int(doc.get("timeout_count")),
        "message_count": as_int(doc.get("message_count")),
        "client_count": as_int(doc.get("client_count")) or len(clients),
        "nodes": None,
        "clients": sorted(clients, key=lambda c: (c["hostname"], c["client_id"])),
        "paused": bool(doc.get("paused")),
        "e2e_processing_latency": latency(doc.get("e2e_processing_latency"), topic, name, node),
    }


def node_topic(node: str, hostname: str, raw: Any, now_s: int) -> Json:
    """One node's TopicStats, its channels included."""
    doc = as_dict(raw)
    name = as_str(doc.get("topic_name"))
    depth, backend = as_int(doc.get("depth")), as_int(doc.get("backend_depth"))
    channels = [node_channel(node, hostname, name, c, now_s) for c in as_list(doc.get("channels"))]
    return {
        "node": node,
        "hostname": hostname,
        "topic_name": name,
        "depth": depth,
        "memory_depth": max(0, depth - backend),
        "backend_depth": backend,
        "message_count": as_int(doc.get("message_count")),
        "message_bytes": as_int(doc.get("message_bytes")),
        "nodes": None,
        "channels": sorted(
            (c for c in channels if c["channel_name"]), key=lambda c: c["channel_name"]
        ),
        "paused": bool(doc.get("paused")),
        "e2e_processing_latency": latency(doc.get("e2e_processing_latency"), name, "", node),
    }


# -- aggregation across nodes --------------------------------------------------------------

_CHANNEL_SUMS = (
    "depth",
    "memory_depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "message_count",
    "client_count",
)
_TOPIC_SUMS = ("depth", "memory_depth", "backend_depth", "message_count", "message_bytes")


def aggregate_channel(topic: str, channel: str, per_node: list[Json]) -> Json:
    """ChannelStats over every node: sums, ``nodes`` and all clients."""
    total: Json = {"node": "*", "hostname": "", "topic_name": topic, "channel_name": channel}
    total.update({k: sum(n[k] for n in per_node) for k in _CHANNEL_SUMS})
    nodes = sorted(per_node, key=lambda n: (n["hostname"], n["node"]))
    total["nodes"] = nodes
    clients = [c for n in nodes for c in n["clients"]]
    total["clients"] = sorted(clients, key=lambda c: (c["hostname"], c["node"], c["client_id"]))
    total["paused"] = any(n["paused"] for n in per_node)
    total["e2e_processing_latency"] = _sum_latency(per_node, topic, channel)
    return total


def aggregate_topic(topic: str, per_node: list[Json]) -> Json:
    """TopicStats over every node: sums, ``nodes``, and channels aggregated by name."""
    total: Json = {"node": "*", "hostname": "", "topic_name": topic}
    total.update({k: sum(n[k] for n in per_node) for k in _TOPIC_SUMS})
    total["nodes"] = sorted(per_node, key=lambda n: (n["hostname"], n["node"]))
    by_name: dict[str, list[Json]] = {}
    for n in per_node:
        for c in n["channels"]:
            by_name.setdefault(c["channel_name"], []).append(c)
    total["channels"] = [aggregate_channel(topic, c, by_name[c]) for c in sorted(by_name)]
    total["paused"] = any(n["paused"] for n in per_node)
    total["e2e_processing_latency"] = _sum_latency(per_node, topic, "")
    return total


def _sum_latency(per_node: list[Json], topic: str, channel: str) -> Json:
    total: Json = {"count": 0, "percentiles": None, "topic": topic, "channel": channel, "host": "*"}
    for n in per_node:
        add_latency(total, n["e2e_processing_latency"])
    return total
