"""nsqlookupd's HTTP API in a cluster: Youzan's forms over the etcd view (CLUSTER.md).

With ``--etcd-endpoints`` these handlers take the place of the registry's for the routes
below (``lookupd.http.make_app`` picks them); everything else stays NSQ's:

- ``GET /lookup?topic=T[&partition=P][&access=r|w][&metainfo=…]``: the topic's partition
  leaders from etcd as ``producers`` (so NSQ's own clients find the right nodes) and as
  ``partitions`` {"P": node}; channels from nsqd's registrations; with ``metainfo`` (any
  value, as Youzan) ``meta`` {partition_num, replica, extend_support, ordered, multi_part,
  disable_channel_auto_create}, and per partition nsqpy's ``isr``, ``catchup``, ``epoch``.
  An unknown topic: 404 ``TOPIC_NOT_FOUND`` as NSQ (200 with empty lists for ``access=r``,
  404 ``Key not found`` for ``access=w``, as Youzan).
- ``POST /topic/create`` (``partition_num``, ``replicator``, ``syncdisk``, ``retention``,
  ``orderedmulti``, ``extend``, ``multipart``; nsqpy's ``implicit=true`` uses the cluster
  defaults and ``suggest_leader`` a node id to lead partition 0), ``POST /topic/delete``
  (``partition`` ``**``, ``all`` or absent: the whole topic; one partition is refused as
  Youzan does), ``POST /topic/meta/update`` (``syncdisk``, ``retention``),
  ``POST /topic/partition/expand`` (``partition_num``: never fewer),
  ``POST /topic/partition/move`` (``partition``, ``move_leader``, ``move_from``, ``move_to``:
  either node may be left out, see ``Coordinator.move_partition``; answered when the move
  has started, ``/cluster/stats`` and ``/lookup?metainfo`` show it until done),
  ``POST /cluster/node/remove`` (``remove_node``: drained, then forgotten): on the
  coordinator, else forwarded to it.
- ``GET /listlookup``, ``GET /cluster/stats``: Youzan's shapes; the stats add nsqpy's
  ``balanced`` (no rebalancing move left to make), ``moving_partitions`` and
  ``removing_nodes`` (each with the replicas it still holds), and per node
  ``replica_load`` and ``leader_load`` (the rebalancer's weights, ``cluster.balance``,
  relative to a node's fair share: 1.0).

Booleans are on only for the exact text ``true`` (Youzan's rule). Imports aiohttp, the
cluster package and the lookupd registry; never nsqd.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from nsqpy.cluster.balance import imbalance, loads
from nsqpy.cluster.coordinator import Coordinator, CoordinatorError
from nsqpy.cluster.model import NodeInfo, Replicas, Snapshot, TopicMeta, partition_health
from nsqpy.cluster.placement import MAX_PARTITION_NUM, MAX_REPLICATOR
from nsqpy.flags.cluster import cluster_tls_on
from nsqpy.httpapi import Args, HttpError, first, query_args, v1_empty, v1_json
from nsqpy.lookupd.cluster import LookupdCluster
from nsqpy.lookupd.registry import Registry
from nsqpy.protocol.names import valid_topic_name

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
FORWARD_VIEW_WAIT_S = 5.0
MAX_SYNCDISK = 4000  # Youzan clamps syncdisk to this
MAX_RETENTION_DAYS = 60
_GO_INT = re.compile(r"[+-]?[0-9]{1,20}")  # longer: out of range anyway


def node_json(node: NodeInfo) -> dict[str, Any]:
    """A node as Youzan's lookupd lists a producer (PeerInfo with ``distributed_id``)."""
    return {
        "id": node.id,
        "remote_address": f"{node.broadcast_address}:{node.tcp_port}",
        "hostname": node.hostname,
        "broadcast_address": node.broadcast_address,
        "tcp_port": node.tcp_port,
        "http_port": node.http_port,
        "version": node.version,
        "distributed_id": node.id,
    }


def meta_json(meta: TopicMeta | None) -> dict[str, Any]:
    m = meta or TopicMeta(1, 1)
    return {
        "partition_num": m.partition_num if meta else 0,
        "replica": m.replicator if meta else 0,
        "extend_support": m.ext,
        "ordered": m.ordered,
        "multi_part": m.multipart,
        "disable_channel_auto_create": False,
    }


def _int_arg(args: Args, name: str, code: str, lo: int, hi: int, default: int | None) -> int:
    text = first(args, name)
    if text is None:
        if default is None:
            raise HttpError(400, f"MISSING_ARG_{code}")
        return default
    if _GO_INT.fullmatch(text) is None:  # Go's Atoi: no spaces, "_" or non-ASCII digits
        raise HttpError(400, f"INVALID_ARG_{code}")
    value = int(text)
    if not lo <= value <= hi:
        raise HttpError(400, f"INVALID_ARG_{code}")
    return value


def _topic_arg(args: Args) -> str:
    topic = first(args, "topic")
    if topic is None:
        raise HttpError(400, "MISSING_ARG_TOPIC")
    if not valid_topic_name(topic) or topic in (".", ".."):  # (no etcd key segment)
        raise HttpError(400, "INVALID_ARG_TOPIC")
    return topic


def _refused(exc: CoordinatorError) -> HttpError:
    """Youzan's code as the ``message`` its clients read; why, in ``detail`` beside it."""
    return HttpError(exc.status, exc.code, **({"detail": exc.detail} if exc.detail else {}))


class ClusterHttpApi:
    """The cluster routes (see the module docstring)."""

    def __init__(self, cluster: LookupdCluster, registry: Registry) -> None:
        self.cluster = cluster
        self.registry = registry

    def routes(self) -> list[tuple[str, str, Handler]]:
        return [
            ("GET", "/lookup", self.lookup),
            ("GET", "/topics", self.topics),
            ("GET", "/channels", self.channels),
            ("POST", "/topic/create", self.topic_create),
            ("PUT", "/topic/create", self.topic_create),
            ("POST", "/topic/delete", self.topic_delete),
            ("POST", "/topic/meta/update", self.topic_meta_update),
            ("POST", "/topic/partition/expand", self.partition_expand),
            ("POST", "/topic/partition/move", self.partition_move),
            ("POST", "/topic/partition/recover", self.partition_recover),
            ("POST", "/cluster/node/remove", self.node_remove),
            ("GET", "/listlookup", self.listlookup),
            ("GET", "/cluster/stats", self.cluster_stats),
        ]

    async def _forwarded(
        self, request: web.Request, done: Callable[[Snapshot], bool]
    ) -> web.StreamResponse:
        """The coordinator's answer; after a success, once this lookupd's own view shows
        it too (so a client reads its own write from the lookupd it wrote through)."""
        answer = await self.cluster.forward(request)
        if answer.status == 200 and self.cluster.view is not None:
            await self.cluster.view.wait_until(done, FORWARD_VIEW_WAIT_S)
        return answer

    async def _coordinate(
        self,
        request: web.Request,
        act: Callable[[Coordinator], Awaitable[object]],
        done: Callable[[Snapshot], bool] | None = None,
    ) -> web.StreamResponse:
        """``act`` on the coordinator when this lookupd holds the lock (a dict it returns
        is the answer's JSON; a refusal its code), else the coordinator's own answer
        (forwarded; with ``done``, once this lookupd's view shows the write too)."""
        if not await self.cluster.coordinates():
            if done is None:
                return await self.cluster.forward(request)
            return await self._forwarded(request, done)
        assert self.cluster.coordinator is not None
        try:
            result = await act(self.cluster.coordinator)
        except CoordinatorError as exc:
            raise _refused(exc) from None
        return v1_json(result) if isinstance(result, dict) else v1_empty()

    def _snapshot(self) -> Snapshot:
        assert self.cluster.view is not None
        return self.cluster.view.snapshot()

    # -- reads -------------------------------------------------------------------------------

    async def lookup(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        topic = first(args, "topic")
        if topic is None:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        access = first(args, "access")
        if access not in (None, "r", "w"):
            raise HttpError(400, "INVALID_ACCESS_MODE")
        only = first(args, "partition")
        snap = self._snapshot()
        meta = snap.topics.get(topic)
        if meta is None:
            if access == "w":
                raise HttpError(404, "Key not found")
            if access is None:
                raise HttpError(404, "TOPIC_NOT_FOUND")
        channels = self.registry.channels(topic)
        producers: dict[str, dict[str, Any]] = {}
        partitions: dict[str, dict[str, Any]] = {}
        for p, versioned in snap.partitions(topic):
            if only not in (None, "*", str(p)):
                continue
            r = versioned.value
            node = snap.nodes.get(r.leader)
            if node is None:  # the leader is gone: no one serves it until a new one leads
                continue
            peer = node_json(node)
            producers.setdefault(node.id, peer)
            partitions[str(p)] = {**peer, **_replicas_json(r)}
        body: dict[str, Any] = {"channels": channels}
        if first(args, "metainfo"):
            body["meta"] = meta_json(meta)
        body["producers"] = list(producers.values())
        body["partitions"] = partitions
        return v1_json(body)

    async def topics(self, request: web.Request) -> web.StreamResponse:
        # etcd's topics, and the ones nsqd hold outside it (ephemeral ones): a registration
        # without a producer of a topic etcd lacks is what a deleted topic left behind (an
        # nsqd's REGISTER that arrived after the deletion, then its UNREGISTER)
        names = set(self._snapshot().topics) | set(self.registry.produced_topics())
        return v1_json({"topics": sorted(names)})

    async def channels(self, request: web.Request) -> web.StreamResponse:
        topic = first(query_args(request), "topic")
        if topic is None:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        if topic in self._snapshot().topics:
            return v1_json({"channels": self.registry.channels(topic)})
        return v1_json({"channels": self.registry.produced_channels(topic)})

    async def listlookup(self, request: web.Request) -> web.StreamResponse:
        view = self.cluster.view
        assert view is not None
        view.snapshot()
        nodes = [_lookupd_json(info.id, info.broadcast_address, info.tcp_port, info.http_port)
                 for info in sorted(view.lookupds.values(), key=lambda i: i.id)]  # fmt: skip
        leader: dict[str, Any] = {}
        if view.coordinator is not None:
            found = view.lookupds.get(view.coordinator.id)
            if found is not None:
                leader = _lookupd_json(found.id, found.broadcast_address, found.tcp_port,
                                       found.http_port)  # fmt: skip
        return v1_json({"lookupdnodes": nodes, "lookupdleader": leader})

    async def cluster_stats(self, request: web.Request) -> web.StreamResponse:
        snap = self._snapshot()
        leaders, held = snap.counts()
        health = partition_health(snap)
        coordinator = self.cluster.coordinator
        stuck = list(coordinator.stuck) if coordinator is not None and self.cluster.leading else []
        degraded = [
            f"{t}/{p}"
            for (t, p), v in sorted(snap.replicas.items())
            if v.value.catchup or any(n not in snap.nodes for n in v.value.isr)
        ]
        shares = loads(snap)
        nodes = [
            {
                "id": node.id,
                "hostname": node.hostname,
                "broadcast_address": node.broadcast_address,
                "tcp_port": node.tcp_port,
                "http_port": node.http_port,
                "leader_load_factor": float(leaders.get(node.id, 0)),
                "node_load_factor": float(held.get(node.id, 0)),
                "load": node.load.to_dict(),
                "secure": node.secure,
                **(
                    {"replica_load": shares[node.id][0], "leader_load": shares[node.id][1]}
                    if node.id in shares
                    else {}
                ),
            }
            for node in sorted(snap.nodes.values(), key=lambda n: n.id)
        ]
        view = self.cluster.view
        holder = view.coordinator.id if view is not None and view.coordinator else ""
        moving = {f"{t}/{p}": m.to_dict() for (t, p) in snap.moving
                  if (m := snap.replicas[(t, p)].value.move) is not None}  # fmt: skip
        return v1_json(
            {
                "stable": not stuck and not degraded,
                "balanced": imbalance(snap) is None,
                "node_stat_list": nodes,
                "topn_topics": [],
                "coordinator": holder,
                "unavailable_partitions": stuck,
                "degraded_partitions": degraded,
                # nsqpy: no live leader; an ISR short or with a dead member
                "offline_partitions": [f"{t}/{p}" for t, p in health["offline"]],
                "under_replicated_partitions": [f"{t}/{p}" for t, p in health["under_replicated"]],
                "moving_partitions": moving,
                "removing_nodes": {n: held.get(n, 0) for n in sorted(snap.removing)},
                # every link between daemons is mutual TLS: this lookupd's and each node's
                "secure": cluster_tls_on(self.cluster.opts)
                and all(node.secure for node in snap.nodes.values()),
            }
        )

    # -- writes (on the coordinator) ---------------------------------------------------------

    async def topic_create(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        topic = _topic_arg(args)
        implicit = first(args, "implicit") == "true"
        meta: TopicMeta | None = None
        if not implicit:
            meta = TopicMeta(
                partition_num=_int_arg(
                    args, "partition_num", "TOPIC_PARTITION_NUM", 1, MAX_PARTITION_NUM, None
                ),
                replicator=_int_arg(
                    args, "replicator", "TOPIC_REPLICATOR", 1, MAX_REPLICATOR, None
                ),
                syncdisk=min(
                    MAX_SYNCDISK, _int_arg(args, "syncdisk", "TOPIC_SYNC_DISK", 0, 1 << 31, 0)
                ),
                retention_days=_int_arg(
                    args, "retention", "TOPIC_RETENTION", 0, MAX_RETENTION_DAYS, 0
                ),
                ordered=first(args, "orderedmulti") == "true",
                ext=first(args, "extend") == "true",
                multipart=first(args, "multipart") == "true",
            )
        hint = first(args, "suggest_leader")
        return await self._coordinate(
            request,
            lambda c: c.create_topic(topic, meta, leader_hint=hint),
            lambda s: topic in s.topics,
        )

    async def topic_delete(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        topic = first(args, "topic")
        if topic is None:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        if first(args, "partition") not in (None, "**", "all"):
            raise HttpError(400, "REMOVE_SINGLE_PARTITION_NOT_ALLOWED")

        async def delete(c: Coordinator) -> None:
            await c.delete_topic(topic)
            self.registry.delete_topic(topic)

        return await self._coordinate(request, delete, lambda s: topic not in s.topics)

    async def topic_meta_update(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        topic = _topic_arg(args)
        syncdisk = first(args, "syncdisk")
        retention = first(args, "retention")
        changes: dict[str, int] = {}
        if syncdisk is not None:
            changes["syncdisk"] = min(
                MAX_SYNCDISK, _int_arg(args, "syncdisk", "TOPIC_SYNC_DISK", 0, 1 << 31, 0)
            )
        if retention is not None:
            changes["retention_days"] = _int_arg(
                args, "retention", "TOPIC_RETENTION", 0, MAX_RETENTION_DAYS, 0
            )
        if first(args, "replicator") is not None:
            _int_arg(args, "replicator", "TOPIC_REPLICATOR", 1, MAX_REPLICATOR, None)
            raise HttpError(400, "E_NOT_SUPPORTED")  # replica changes: cluster operations
        return await self._coordinate(
            request,
            lambda c: c.update_topic(
                topic,
                syncdisk=changes.get("syncdisk"),
                retention_days=changes.get("retention_days"),
            ),
        )

    async def partition_expand(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        topic = _topic_arg(args)
        count = _int_arg(args, "partition_num", "TOPIC_PARTITION_NUM", 1, MAX_PARTITION_NUM, None)
        return await self._coordinate(
            request,
            lambda c: c.expand_topic(topic, count),
            lambda s: (m := s.topics.get(topic)) is None or m.partition_num >= count,
        )

    async def partition_move(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        topic = _topic_arg(args)
        partition = _int_arg(args, "partition", "TOPIC_PARTITION", 0, MAX_PARTITION_NUM - 1, None)
        leader_only = first(args, "move_leader") == "true"
        source = first(args, "move_from") or ""
        target = first(args, "move_to") or ""

        async def move(c: Coordinator) -> dict[str, Any]:
            started = await c.move_partition(
                topic, partition, leader_only=leader_only, source=source, target=target
            )
            return {"move": started.to_dict()}

        return await self._coordinate(request, move)

    async def partition_recover(self, request: web.Request) -> web.StreamResponse:
        """Forced recovery of a partition none of whose ISR members is live
        (``Coordinator.recover_partition``): what may be lost is in the answer."""
        args = query_args(request)
        topic = _topic_arg(args)
        partition = _int_arg(args, "partition", "TOPIC_PARTITION", 0, MAX_PARTITION_NUM - 1, None)

        async def recover(c: Coordinator) -> dict[str, Any]:
            new, end = await c.recover_partition(topic, partition)
            return {
                "leader": new.leader,
                "leader_epoch": new.leader_epoch,
                "offset": end,
                "warning": f"messages the dead ISR members held at offset {end} and beyond "
                "are lost (unless the new leader had them)",
            }

        return await self._coordinate(request, recover)

    async def node_remove(self, request: web.Request) -> web.StreamResponse:
        node = first(query_args(request), "remove_node")
        if not node:
            raise HttpError(400, "MISSING_ARG_REMOVE_NODE")
        return await self._coordinate(
            request, lambda c: c.remove_node(node), lambda s: node in s.removing
        )


def _replicas_json(r: Replicas) -> dict[str, Any]:
    move = {"move": r.move.to_dict()} if r.move is not None else {}
    return {"isr": list(r.isr), "catchup": list(r.catchup), "epoch": r.epoch,
            "leader_epoch": r.leader_epoch, **move}  # fmt: skip


def _lookupd_json(node_id: str, address: str, tcp_port: int, http_port: int) -> dict[str, Any]:
    """Youzan's NsqLookupdNodeInfo: Go field names, ports as strings."""
    return {"ID": node_id, "NodeIP": address, "TcpPort": str(tcp_port),
            "HttpPort": str(http_port), "RpcPort": str(http_port), "Epoch": 0}  # fmt: skip
