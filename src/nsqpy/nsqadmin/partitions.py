"""A cluster topic's partitions as nsqadmin shows them, merged from what each nsqd reports.

In cluster mode every nsqd's ``/stats`` lists, per topic, the partitions it holds, each
with its ``role`` (leader or follower), ``leader`` (node id), ``isr``, ``catchup``,
``epoch``, ``leader_epoch``, ``committed_offset`` and its log's ``high_watermark`` (the
end of what it has). ``node_partitions`` keeps those fields of one node's topic (None for
a single node's document: no roles, nothing shown), ``merge`` makes one row per partition:
the leader's report is authoritative for the assignment, depth, messages and committed
offset (with a stale leader still around, the higher ``(leader_epoch, epoch)`` wins), and
every holder (leader, ISR, then catch-up) is listed with its end and its lag (the
leader's committed offset minus that end, never below 0). A partition whose leader did
not report is still shown, from its followers' view, with ``leader_reported`` false.
Pure: no I/O. Imports only ``stats`` (its defensive JSON readers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nsqpy.nsqadmin.stats import Json, as_dict, as_int, as_list, as_str

LEADER = "leader"


def _ids(value: Any) -> list[str]:
    return [v for v in as_list(value) if isinstance(v, str)]


def node_partitions(node: str, raw_topic: Any) -> list[Json] | None:
    """The cluster fields of one node's topic partitions; None unless it has roles."""
    entries = [p for p in as_list(as_dict(raw_topic).get("partitions")) if isinstance(p, dict)]
    if not any(isinstance(p.get("role"), str) for p in entries):
        return None
    return [
        {
            "node": node,
            "partition": as_int(p.get("partition")),
            "role": as_str(p.get("role")),
            "leader": as_str(p.get("leader")),
            "isr": _ids(p.get("isr")),
            "catchup": _ids(p.get("catchup")),
            "epoch": as_int(p.get("epoch")),
            "leader_epoch": as_int(p.get("leader_epoch")),
            "committed_offset": as_int(p.get("committed_offset")),
            "high_watermark": as_int(p.get("high_watermark")),
            "depth": as_int(p.get("depth")),
            "message_count": as_int(p.get("message_count")),
            "move": as_dict(p.get("move")) or None,
        }
        for p in entries
    ]


def is_cluster_topic(per_node: list[Json]) -> bool:
    """Whether any node reported the topic's partitions with roles (cluster mode)."""
    return any(t.get("partitions") is not None for t in per_node)


def holders(per_node: list[Json]) -> set[str]:
    """Every node id the reports name as a leader, ISR or catch-up member."""
    found: set[str] = set()
    for t in per_node:
        for p in t.get("partitions") or []:
            found.update([p["leader"], *p["isr"], *p["catchup"]])
    found.discard("")
    return found


def reported_partition_nums(per_node: list[Json]) -> set[int]:
    """The partitions some leader reported."""
    return {
        p["partition"] for t in per_node for p in t.get("partitions") or [] if p["role"] == LEADER
    }


def merge(per_node: list[Json], addresses: Mapping[str, str]) -> list[Json]:
    """One row per partition (sorted); ``addresses`` maps node ids to nsqadmin's node names
    (``broadcast_address:http_port``) so ids can be linked and followers' reports found."""
    node_ids = {addr: node_id for node_id, addr in addresses.items()}
    by_partition: dict[int, list[Json]] = {}
    for t in per_node:
        for p in t.get("partitions") or []:
            by_partition.setdefault(p["partition"], []).append(p)
    return [
        _row(number, entries, addresses, node_ids)
        for number, entries in sorted(by_partition.items())
    ]


def _freshest(entries: list[Json]) -> Json:
    return max(entries, key=lambda p: (p["leader_epoch"], p["epoch"]))


def _row(
    number: int, entries: list[Json], addresses: Mapping[str, str], node_ids: Mapping[str, str]
) -> Json:
    leaders = [p for p in entries if p["role"] == LEADER]
    base = _freshest(leaders or entries)
    reported = bool(leaders)
    leader_id = base["leader"] or (node_ids.get(base["node"], "") if reported else "")
    reports: dict[str, Json] = {}
    for p in entries:
        node_id = node_ids.get(p["node"]) or (p["leader"] if p["role"] == LEADER else "")
        if node_id and (node_id not in reports or p is base):
            reports[node_id] = p
    committed = base["committed_offset"] if reported else None
    replicas = []
    for node_id in dict.fromkeys([leader_id, *base["isr"], *base["catchup"]]):
        if not node_id:
            continue
        seen = reports.get(node_id)
        end = seen["high_watermark"] if seen is not None else None
        lag = max(0, committed - end) if committed is not None and end is not None else None
        role = LEADER if node_id == leader_id else ("isr" if node_id in base["isr"] else "catchup")
        replicas.append(
            {
                "id": node_id,
                "node": addresses.get(node_id, ""),
                "role": role,
                "reported_role": seen["role"] if seen is not None else "",
                "end": end,
                "lag": 0 if role == LEADER and end is not None else lag,
            }
        )
    return {
        "partition": number,
        "leader": leader_id,
        "leader_node": addresses.get(leader_id, ""),
        "leader_reported": reported,
        "isr": list(base["isr"]),
        "catchup": list(base["catchup"]),
        "epoch": base["epoch"],
        "leader_epoch": base["leader_epoch"],
        "depth": base["depth"] if reported else None,
        "message_count": base["message_count"] if reported else None,
        "committed_offset": committed,
        "replicas": replicas,
        "move": base.get("move"),
    }
