"""nsqd in a cluster: the broker's partitions as etcd assigns them (``--etcd-endpoints``).

``NsqdCluster`` connects to etcd, follows the cluster (``ClusterView``) and runs this
node's ``Member`` (``nsqpy.cluster.member``): registration under a lease, partitions held,
led or followed as the ``replicas`` keys say. It is the broker's ``PartitionHost`` and the
servers' ``TopicGate`` (``nsqd.gate``): a topic is usable here when this node leads one of
its partitions; one the cluster lacks is created through the coordinator (unless
``--disable-auto-create``) with this node leading its first partition. Ephemeral topics
stay local, as on a single node.

A data path that holds topics from single-node mode cannot join a cluster (they are not in
etcd, and the member would release them): start it with an empty data path. Imports
asyncio, the cluster package and the broker; never the TCP or HTTP handlers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from nsqpy import NSQ_VERSION, __version__
from nsqpy.broker.broker import Broker, PartitionCountMismatch
from nsqpy.broker.partition import LEADER, Partition
from nsqpy.broker.topic import key_partition
from nsqpy.cluster.etcd import Etcd, EtcdUnavailable
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.member import (
    IDENTITY_FILE,
    Member,
    MemberSettings,
    TopicUnavailable,
    fresh_node_id,
    node_identity,
)
from nsqpy.cluster.model import Load, NodeInfo, Replicas, Snapshot, partition_name
from nsqpy.cluster.tls import INSECURE, ClusterTls
from nsqpy.cluster.view import ClusterView
from nsqpy.errors import ConfigError, CreateTopicFailed, TopicNotExist
from nsqpy.flags import check_host_port, etcd_endpoints
from nsqpy.nsqd.forward import Forwarder, Route
from nsqpy.nsqd.gate import ABSENT, ELSEWHERE, HERE
from nsqpy.nsqd.load import Rates
from nsqpy.nsqd.replicas import Replication
from nsqpy.nsqd.tls import TlsSettings
from nsqpy.options import NsqdOptions

log = logging.getLogger("nsqpy.nsqd")

# What the version of a clustered nsqd looks like to Youzan's clients ("-HA." marks a
# node that knows partitions), still a semantic version for nsqadmin.
CLUSTER_VERSION = f"{NSQ_VERSION}-HA.nsqpy.{__version__}"


class ClusterHost(Protocol):
    """What the cluster side reads of its nsqd (``NsqdServer`` is one)."""

    @property
    def broker(self) -> Broker: ...

    @property
    def opts(self) -> NsqdOptions: ...

    @property
    def tcp_port(self) -> int: ...

    @property
    def http_port(self) -> int: ...

    def lookupd_addresses_changed(self) -> None:
        """Register with the lookupds named by ``--lookupd-tcp-address`` and the cluster."""
        ...

    def replicated(self, part: Partition) -> None:
        """The committed offset of a led partition moved: answer the publishes it covers
        and let its channels deliver up to it."""
        ...

    def cursors_replicated(self, part: Partition) -> None:
        """A follower took a led partition's channel cursors: its ordered channels may
        deliver their next message."""
        ...


class BrokerPartitions:
    """The broker as ``member.PartitionHost``: cluster topics only (not ephemeral ones)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def held_partitions(self) -> dict[tuple[str, int], tuple[str, int, int]]:
        return {
            (topic.name, part.number): (part.role, part.leader_epoch, part.log.high_watermark)
            for topic in self.broker.topics.values()
            if not topic.ephemeral
            for part in topic.partitions
        }

    def held_bytes(self) -> dict[tuple[str, int], int]:
        """The bytes each held partition's log keeps."""
        return {
            (topic.name, part.number): part.log.size_bytes
            for topic in self.broker.topics.values()
            if not topic.ephemeral
            for part in topic.partitions
        }

    def hold_partition(
        self,
        topic: str,
        partition_count: int,
        number: int,
        role: str,
        leader_epoch: int,
        ordered: bool,
    ) -> None:
        hold = functools.partial(
            self.broker.hold_partition,
            topic,
            partition_count,
            number,
            role=role,
            leader_epoch=leader_epoch,
            ordered=ordered,
        )
        try:
            hold()
        except PartitionCountMismatch:
            # Deleted and created again with another count while this node was away: what
            # it kept is of the old topic (its offsets stay reserved, IDs stay unique).
            log.warning("cluster: %s changed partition count; dropping the old copy", topic)
            self.broker.delete_topic(topic)
            hold()

    def set_role(self, topic: str, number: int, role: str, leader_epoch: int) -> None:
        self.broker.set_role(topic, number, role, leader_epoch)

    def release_partition(self, topic: str, number: int) -> None:
        self.broker.release_partition(topic, number)

    def set_retention(self, topic: str, days: int) -> None:
        found = self.broker.topics.get(topic)
        if found is not None:
            found.set_retention(days * 86_400_000 if days else None)

    def set_sync_every(self, topic: str, messages: int) -> None:
        found = self.broker.topics.get(topic)
        if found is not None:
            found.set_sync_every(messages or None)

    def grow_topic(self, topic: str, partition_count: int) -> None:
        found = self.broker.topics.get(topic)
        if found is not None and found.partition_count < partition_count:
            self.broker.expand_topic(topic, partition_count, hold=False)


class NsqdCluster:
    """One nsqd's part in a cluster (see the module docstring)."""

    def committed_end(self, part: Partition) -> int:
        """How far a log reader (``/log/read``, Spark) may read a partition held here: to
        its committed offset, as its replica state knows it whether leading or following
        (nothing a failover could take back is ever read)."""
        state = self.replication.state(part) if self.replication is not None else None
        return state.readable_offset if state is not None else part.log.low_watermark

    def __init__(self, host: ClusterHost) -> None:
        self.host = host
        opts = host.opts
        self.opts = opts
        self.keys = Keys(opts.cluster_id)
        self.partitions = BrokerPartitions(host.broker)
        self.settings = MemberSettings(
            lease_ttl_s=opts.etcd_lease_ttl_ms / 1000,
            report_s=min(2.0, opts.etcd_lease_ttl_ms / 5000),
            ends_report_s=opts.etcd_report_ends_interval_ms / 1000,
        )
        self.etcd: Etcd | None = None
        self.view: ClusterView | None = None
        self.member: Member | None = None
        self.node_id = ""
        self.replication: Replication | None = None
        self.tls: ClusterTls | None = None  # (``start``: from the --cluster-tls-* flags)
        self.peer_tls: TlsSettings | None = None  # (``TopicGate``: forwarders' upgrade)
        self.forwarder = Forwarder(self.route)
        self._turns: dict[str, int] = {}  # per topic: the last partition forwarded to
        self.started = asyncio.Event()
        # The cluster's lookupds (TCP), registered with as --lookupd-tcp-address ones are,
        # so NSQ's tools see this node's channels and clients through any lookupd.
        self.lookupd_tcp_addresses: list[str] = []
        self.started_ns = time.time_ns()
        self.incarnation = secrets.token_hex(16)  # (``NodeInfo.incarnation``)
        self._node_rate = Rates()  # messages put into its topics (``Load.msgs_per_sec``)
        self._partition_rates = Rates()  # each held partition's log end (``NodeInfo.loads``)
        host.broker.cluster_mode = True

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Join: ConfigError when etcd cannot be reached or the data path cannot join."""
        opts = self.opts
        self.tls = ClusterTls.from_options(opts)
        if self.tls is None:
            log.warning(INSECURE)
        else:
            self.forwarder.tls = self.tls.client
            self.peer_tls = TlsSettings(
                self.tls.server,
                tcp_required=False,
                http_required=False,
                handshake_timeout=self.tls.handshake_timeout,
                cluster_peer=True,
            )
        self.node_id = self._identity(Path(opts.data_path))
        self.replication = Replication(
            self.host.broker,
            self.node_id,
            opts.cluster_id,
            self._replicas,
            self.host.replicated,
            on_cursors=self.host.cursors_replicated,
            tls=self.tls,
            incarnation=self.incarnation,
        )
        rpc_host, rpc_port = check_host_port("rpc-address", opts.rpc_address)
        await self.replication.start(rpc_host, rpc_port)  # (its port goes in the NodeInfo)
        try:
            self.etcd = await Etcd.connect(
                etcd_endpoints(opts.etcd_endpoints), security=opts.etcd_security()
            )
            self.view = ClusterView(self.etcd, self.keys)
            await self.view.start()
            self.member = Member(
                self.etcd, self.view, self.node_info, self.partitions, self.settings
            )
            self.member.tls = self.tls
            self.member.on_applied.append(self.replication.apply)
            self.member.on_reported.append(self.replication.reported)
            await self.member.start()
        except EtcdUnavailable as exc:
            await self.stop()
            raise ConfigError(f"--etcd-endpoints: etcd unreachable: {exc}") from exc
        self.host.broker.partition_info = self.member.partition_info
        self.view.listeners.append(self._lookupds_changed)
        self._lookupds_changed()
        self.started.set()

    async def stop(self) -> None:
        await self.forwarder.close()
        if self.replication is not None:
            await self.replication.stop()
        if self.member is not None:
            await self.member.stop()
        if self.view is not None:
            await self.view.stop()
        if self.etcd is not None:
            await self.etcd.close()

    def _identity(self, data_path: Path) -> str:
        broker = self.host.broker
        if not (data_path / IDENTITY_FILE).exists():
            local = [t for t in broker.topics.values() if not t.ephemeral]
            if local:
                raise ConfigError(
                    f"--data-path {data_path} holds {len(local)} single-node topic(s) "
                    f"({', '.join(sorted(t.name for t in local)[:5])}); a node joins a "
                    "cluster with an empty data path"
                )
        _host, rpc_port = check_host_port("rpc-address", self.opts.rpc_address)
        fresh = fresh_node_id(
            self.opts.broadcast_address, rpc_port, self.host.tcp_port, self.opts.node_id
        )
        return node_identity(data_path, self.opts.cluster_id, fresh)

    def _lookupds_changed(self) -> None:
        assert self.view is not None
        found = sorted(f"{i.broadcast_address}:{i.tcp_port}" for i in self.view.lookupds.values())
        if found != self.lookupd_tcp_addresses:
            self.lookupd_tcp_addresses = found
            self.host.lookupd_addresses_changed()

    # -- what the node reports ---------------------------------------------------------------

    def node_info(self) -> NodeInfo:
        opts = self.opts
        held = self.partitions.held_partitions()
        sizes = self.partitions.held_bytes()
        names = {key: partition_name(*key) for key in held}
        rates = self._partition_rates.update({
            names[k]: end for k, (_r, _e, end) in held.items()
            if (r := self._replicas(*k)) is not None and self.node_id in r.isr
        })  # fmt: skip
        put = sum(t.message_count for t in self.host.broker.topics.values())
        _host, rpc_port = check_host_port("rpc-address", opts.rpc_address)
        if self.replication is not None and self.replication.address is not None:
            rpc_port = self.replication.address[1]  # (the bound port: 0 picks one)
        return NodeInfo(
            id=self.node_id,
            hostname=socket.gethostname(),
            broadcast_address=opts.broadcast_address,
            tcp_port=opts.broadcast_tcp_port or self.host.tcp_port,
            http_port=opts.broadcast_http_port or self.host.http_port,
            rpc_address=f"{opts.broadcast_address}:{rpc_port}",
            version=CLUSTER_VERSION,
            started_ns=self.started_ns,
            secure=self.tls is not None,
            incarnation=self.incarnation,
            load=Load(
                partitions=len(held),
                leaders=sum(1 for role, _e, _end in held.values() if role == LEADER),
                msgs_per_sec=self._node_rate.update({"": put})[""],
                bytes=sum(t.message_bytes for t in self.host.broker.topics.values()),
            ),
            ends={partition_name(t, p): (epoch, end) for (t, p), (_r, epoch, end) in held.items()},
            lagging=self.replication.lagging() if self.replication is not None else {},
            caught_up=self.replication.caught_up() if self.replication is not None else {},
            failing=self._failing(),
            loads={names[k]: (rates.get(names[k], 0.0), sizes.get(k, 0)) for k in held},
        )

    def _failing(self) -> dict[str, int]:
        """(``NodeInfo.failing``) Partitions this node leads and cannot write, and those
        it was to lead and could not take up: each with its leader epoch."""
        out = self.replication.failing() if self.replication is not None else {}
        if self.member is not None:
            for (topic, p), epoch in self.member.lead_failures.items():
                out.setdefault(partition_name(topic, p), epoch)
        return out

    def _replicas(self, topic: str, partition: int) -> Replicas | None:
        return self.member.replicas(topic, partition) if self.member is not None else None

    def flushed(self, part: Partition) -> None:
        """The server flushed or synced a partition's log (replication ships it)."""
        if self.replication is not None:
            self.replication.flushed(part)

    # -- nsqd.gate.TopicGate -----------------------------------------------------------------

    def where(self, topic: str, partition: int = -1) -> str:
        if self.view is None or not self.started.is_set():
            return ABSENT
        snap = self.view.snapshot()
        if topic not in snap.topics:
            return ABSENT
        if partition >= 0:
            if (topic, partition) not in snap.replicas:
                return ABSENT  # (not in etcd, or not yet in this node's view: prepare tells)
            # A partition just added (as below): taken up when this node holds it, and
            # the topic grown to the new count either way (a publish naming a partition
            # led elsewhere is forwarded, not refused by a count this node has not grown)
            found = self.host.broker.get_topic(topic)
            if (
                found is not None
                and found.partition(partition) is None
                and self.member is not None
                and (found.partition_count <= partition or self._untaken(snap, topic))
            ):
                self.member.apply(snap, first=topic)
        if self._leads(topic):
            return HERE
        if self.member is not None and self._untaken(snap, topic):
            # The watch brought the topic but the member's round has not applied it yet
            # (another client's create, a moment ago): take it up now rather than send
            # this client away from a topic this node is to lead.
            self.member.apply(snap, first=topic)
            if self._leads(topic):
                return HERE
        return ELSEWHERE

    def cursor_moved(self, topic: str, partition: int = -1) -> None:
        if self.replication is not None:
            self.replication.feed.cursors_now(topic, partition)

    def _leads(self, topic: str) -> bool:
        found = self.host.broker.get_topic(topic)
        return found is not None and any(p.role == LEADER for p in found.partitions)

    def _untaken(self, snap: Snapshot, topic: str) -> bool:
        """Whether ``snap`` gives this node a partition of ``topic`` it does not hold yet."""
        assert self.member is not None
        me = self.member.node_id
        found = self.host.broker.get_topic(topic)
        meta = snap.topics[topic]
        for number in range(meta.partition_num):  # (its keys only: this runs per publish)
            versioned = snap.replicas.get((topic, number))
            if versioned is None or me not in versioned.value.holders:
                continue
            if found is None or found.partition(number) is None:
                return True
        return False

    async def forward(
        self, topic: str, partition: int, bodies: Sequence[bytes], defer_ms: int, key: bytes
    ) -> None:
        if partition < 0 and key and self.view is not None:
            meta = self.view.snapshot().topics.get(topic)
            if meta is not None:
                partition = key_partition(key, meta.partition_num)
        await self.forwarder.publish(topic, partition, bodies, defer_ms)

    async def forward_command(
        self, topic: str, partition: int, count: int, encode: Callable[[int], bytes], key: bytes
    ) -> bytes:
        if partition < 0 and key and self.view is not None:
            meta = self.view.snapshot().topics.get(topic)
            if meta is not None:
                partition = key_partition(key, meta.partition_num)
        return await self.forwarder.publish_command(topic, partition, count, encode)

    def route(self, topic: str, partition: int, tried: frozenset[int]) -> Route | None:
        """(``nsqd.forward``) The leader of ``partition`` of ``topic`` (-1: of the next
        partition in turn not in ``tried``) when it is live. It may be this node (it took
        the lead while the publish waited): the publish then comes back here over TCP and
        is taken as any other once the broker leads."""
        if self.view is None:
            return None
        snap = self.view.snapshot()
        routes: list[Route] = []
        for number, versioned in snap.partitions(topic):
            leader = versioned.value.leader
            node = snap.nodes.get(leader)
            if node is None or number in tried:
                continue
            if partition < 0 or number == partition:
                routes.append(Route(number, f"{node.broadcast_address}:{node.tcp_port}"))
        if not routes:
            return None
        turn = self._turns.get(topic, -1)
        chosen = next((r for r in routes if r.partition > turn), routes[0])
        self._turns[topic] = chosen.partition
        return chosen

    async def prepare(self, topic: str, *, create: bool = True, partition: int = -1) -> None:
        await self.started.wait()
        assert self.member is not None
        create = create and not self.opts.disable_auto_create
        try:
            await self.member.ensure_topic(topic, partition + 1, create=create)
        except TopicUnavailable as exc:
            log.info("cluster: topic %s not taken up: %s", topic, exc.detail)
            raise TopicNotExist() from None  # (no text, as youzan's nsqd answers it)

    async def create_partitions(self, topic: str, count: int) -> None:
        await self.started.wait()
        assert self.member is not None
        if self.opts.disable_auto_create:
            raise CreateTopicFailed(
                "CREATE_TOPIC is not allowed here while cluster feature enabled."
            )
        try:
            await self.member.ensure_topic(topic, count)
        except TopicUnavailable as exc:
            log.info("cluster: topic %s not created: %s", topic, exc.detail)
            raise CreateTopicFailed(f"CREATE_TOPIC {topic} failed: {exc.detail}") from None
