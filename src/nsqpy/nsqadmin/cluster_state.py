"""What nsqadmin asks an nsqpy cluster (etcd mode) beyond NSQ's API, over HTTP only.

A cluster nsqlookupd answers ``/cluster/stats`` (the nodes whose etcd lease is alive, each
with its leader and replica counts; the coordinator; degraded partitions) and
``/listlookup`` (every lookupd and the one that coordinates). ``cluster_state`` asks every
configured lookupd for both and merges them into a ``ClusterState``; a lookupd that is not
in a cluster answers 404, and then there is no state and every page stays NSQ's exactly
(its failures are shown only once some lookupd has answered as a cluster). ``with_leases``
adds the cluster fields to the node list, ``topic_partitions`` the partitions table of a
topic: it fetches the ``/stats`` of the holders the leaders' reports name (all live nodes
when a partition's leader did not report) and merges them (``partitions``). Imports
cluster, partitions, stats and upstream; never aiohttp's server side.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from nsqpy.nsqadmin import partitions
from nsqpy.nsqadmin.cluster import AllFailed, Cluster, Errors, NotFound
from nsqpy.nsqadmin.stats import Json, Producer, as_dict, as_float, as_int, as_list, as_str
from nsqpy.nsqadmin.upstream import UpstreamError


@dataclass
class ClusterState:
    """The cluster as its lookupds see it: live nodes by id, lookupds, the coordinator."""

    nodes: dict[str, Json] = field(default_factory=dict)  # node id -> /cluster/stats entry
    lookupds: dict[str, Json] = field(default_factory=dict)  # lookupd id -> /listlookup entry
    coordinator: str = ""
    stable: bool = True
    degraded: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    offline: list[str] = field(default_factory=list)  # no live leader
    under_replicated: list[str] = field(default_factory=list)  # ISR short or with a dead member
    balanced: bool = True
    moving: dict[str, Json] = field(default_factory=dict)  # "topic/p" -> {from, to, leader}
    removing: dict[str, int] = field(default_factory=dict)  # node id -> replicas it holds
    secure: bool = True  # every lookupd says every link between daemons is mutual TLS

    def address(self, node_id: str) -> str:
        """nsqadmin's name of a live node: ``broadcast_address:http_port`` ("" if unknown)."""
        n = self.nodes.get(node_id)
        return f"{n['broadcast_address']}:{n['http_port']}" if n else ""

    def addresses(self) -> dict[str, str]:
        return {node_id: self.address(node_id) for node_id in self.nodes}

    def by_tcp(self) -> dict[str, Json]:
        return {f"{n['broadcast_address']}:{n['tcp_port']}": n for n in self.nodes.values()}

    def to_json(self) -> Json:
        return {
            "coordinator": self.coordinator,
            "lookupds": [
                {**entry, "coordinator": lookupd_id == self.coordinator}
                for lookupd_id, entry in sorted(self.lookupds.items())
            ],
            "live_nodes": sorted(self.nodes),
            "stable": self.stable,
            "degraded_partitions": self.degraded,
            "unavailable_partitions": self.unavailable,
            "offline_partitions": self.offline,
            "under_replicated_partitions": self.under_replicated,
            "balanced": self.balanced,
            "moving_partitions": self.moving,
            "removing_nodes": self.removing,
            "secure": self.secure,
        }


def _node_entry(raw: Any) -> Json | None:
    n = as_dict(raw)
    node_id = as_str(n.get("id"))
    if not node_id:
        return None
    return {
        "id": node_id,
        "hostname": as_str(n.get("hostname")),
        "broadcast_address": as_str(n.get("broadcast_address")),
        "tcp_port": as_int(n.get("tcp_port")),
        "http_port": as_int(n.get("http_port")),
        "leaders": int(as_float(n.get("leader_load_factor"))),
        "replicas": int(as_float(n.get("node_load_factor"))),
        "msgs_per_sec": as_float(as_dict(n.get("load")).get("msgs_per_sec")),
        "bytes": as_int(as_dict(n.get("load")).get("bytes")),
        # the rebalancer's weights, relative to a fair share (absent: not reported)
        "replica_load": as_float(n["replica_load"]) if "replica_load" in n else None,
        "leader_load": as_float(n["leader_load"]) if "leader_load" in n else None,
    }


def _lookupd_entry(raw: Any) -> Json | None:
    n = as_dict(raw)
    lookupd_id = as_str(n.get("ID"))
    if not lookupd_id:
        return None
    ip = as_str(n.get("NodeIP"))
    return {
        "id": lookupd_id,
        "tcp_address": f"{ip}:{as_str(n.get('TcpPort')) or as_int(n.get('TcpPort'))}",
        "http_address": f"{ip}:{as_str(n.get('HttpPort')) or as_int(n.get('HttpPort'))}",
    }


def _merge(state: ClusterState, stats: Json, listing: Json) -> None:
    for raw in as_list(stats.get("node_stat_list")):
        entry = _node_entry(raw)
        if entry is not None:
            state.nodes.setdefault(entry["id"], entry)
    state.coordinator = state.coordinator or as_str(stats.get("coordinator"))
    state.stable = state.stable and stats.get("stable") is not False
    state.balanced = state.balanced and stats.get("balanced") is not False
    state.secure = state.secure and stats.get("secure") is True
    for name, move in as_dict(stats.get("moving_partitions")).items():
        if isinstance(move, dict):
            state.moving.setdefault(name, move)
    for node_id, left in as_dict(stats.get("removing_nodes")).items():
        state.removing.setdefault(node_id, as_int(left))
    for key, into in (("degraded_partitions", state.degraded),
                      ("unavailable_partitions", state.unavailable),
                      ("offline_partitions", state.offline),
                      ("under_replicated_partitions", state.under_replicated)):  # fmt: skip
        into.extend(p for p in as_list(stats.get(key)) if isinstance(p, str) and p not in into)
    for raw in as_list(listing.get("lookupdnodes")):
        found = _lookupd_entry(raw)
        if found is not None:
            state.lookupds.setdefault(found["id"], found)
    leader = _lookupd_entry(listing.get("lookupdleader"))
    if leader is not None:
        state.lookupds.setdefault(leader["id"], leader)
        state.coordinator = state.coordinator or leader["id"]


async def cluster_state(cluster: Cluster, errors: Errors) -> ClusterState | None:
    """Every lookupd's ``/cluster/stats`` and ``/listlookup`` merged; None when none of them
    is a cluster lookupd (or nsqadmin is given nsqd addresses only)."""
    if not cluster.uses_lookupd:
        return None
    get = cluster.upstream.get_object

    async def one(address: str) -> tuple[Json, Json] | UpstreamError | None:
        try:  # one after the other: a plain lookupd's 404 ends it at once
            stats = await get(address, "/cluster/stats")
            return stats, await get(address, "/listlookup")
        except UpstreamError as exc:
            return None if exc.status == 404 else exc

    replies = await asyncio.gather(*(one(a) for a in cluster.lookupd))
    answered = [r for r in replies if isinstance(r, tuple)]
    if not answered:
        return None
    errors.add(*(str(r) for r in replies if isinstance(r, UpstreamError)))
    state = ClusterState()
    for stats, listing in answered:
        _merge(state, stats, listing)
    return state


def with_leases(nodes: list[Json], state: ClusterState) -> list[Json]:
    """The node list (``Producer.to_json`` docs) with each node's ``node_id``, ``lease``
    (listed live by lookupd), ``leaders`` and ``replicas``; live nodes that no lookupd
    lists in ``/nodes`` are added."""
    live = state.by_tcp()
    out = []
    for n in nodes:
        entry = live.pop(f"{n['broadcast_address']}:{n['tcp_port']}", None)
        out.append(_leased(n, entry))
    for entry in live.values():
        doc = Producer(
            broadcast_address=entry["broadcast_address"],
            http_port=entry["http_port"],
            tcp_port=entry["tcp_port"],
            hostname=entry["hostname"],
            node_id=entry["id"],
        ).to_json()
        out.append(_leased(doc, entry))
    return sorted(out, key=lambda n: (n["hostname"], n["node_id"]))


def _leased(n: Json, entry: Json | None) -> Json:
    return {
        **n,
        "node_id": entry["id"] if entry is not None else n.get("node_id", ""),
        "lease": entry is not None,
        "leaders": entry["leaders"] if entry is not None else 0,
        "replicas": entry["replicas"] if entry is not None else 0,
        "msgs_per_sec": entry.get("msgs_per_sec", 0.0) if entry is not None else 0.0,
        "bytes": entry.get("bytes", 0) if entry is not None else 0,
        "replica_load": entry.get("replica_load") if entry is not None else None,
        "leader_load": entry.get("leader_load") if entry is not None else None,
    }


def node_cluster(producer: Producer, state: ClusterState) -> Json:
    """One node's cluster fields for its page."""
    entry = state.by_tcp().get(producer.tcp_address)
    doc = _leased({"node_id": producer.node_id}, entry)
    return {**doc, "coordinator": state.coordinator}


async def topic_partitions(
    cluster: Cluster,
    topic: str,
    producers: list[Producer],
    per_node: list[Json],
    state: ClusterState | None,
    errors: Errors,
) -> list[Json]:
    """The partitions rows of ``topic`` (see ``partitions.merge``): the leaders' reports in
    ``per_node`` plus the followers' ``/stats``, fetched here."""
    addresses = {p.node_id: p.node for p in producers if p.node_id}
    if state is not None:
        addresses.update(state.addresses())
    asked = {t["node"] for t in per_node}
    wanted = partitions.holders(per_node)
    num = max((as_int(t.get("partition_num")) for t in per_node), default=0)
    if len(partitions.reported_partition_nums(per_node)) < num:
        wanted |= set(addresses)  # some leader is silent: ask everyone who may hold it
    extra = []
    for node_id in sorted(wanted):
        host, _, port = addresses.get(node_id, "").rpartition(":")
        if host and port.isdigit() and f"{host}:{port}" not in asked:
            extra.append(Producer(broadcast_address=host, http_port=int(port), node_id=node_id))
    followers: list[Json] = []
    if extra:
        try:
            followers = await cluster.node_stats(extra, errors, topic=topic, include_clients=False)
        except (AllFailed, NotFound) as exc:
            errors.add(str(exc))
    return partitions.merge([*per_node, *followers], addresses)
