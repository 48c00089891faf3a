"""The coordinator: the nsqlookupd holding the cluster's etcd lock, and what it does.

Every nsqlookupd of a cluster runs a ``Coordinator``: it registers itself under
``lookupds/<id>`` with a lease and campaigns for the ``coordinator`` key (created by txn
only where absent, bound to the same lease: when the lookupd dies or is cut off, the lease
expires and another one's campaign wins). The holder

- creates, updates, expands and deletes topics (``create_topic``, ``update_topic``,
  ``expand_topic``, ``delete_topic``): placement by ``nsqpy.cluster.placement``, every key
  of a topic written in one txn that holds only if the topic is absent;
- starts the operators' moves (``move_partition``) and drains (``remove_node``: the node's
  ``removing`` key; once it holds nothing and is gone, the key goes too: forgotten);
- reconciles, level-triggered (Kubernetes' controllers): on every change of the view and
  every ``tick_s``, the pure ``nsqpy.cluster.decisions.plan`` turns the snapshot into
  Changes, each written by a txn guarded on the key's mod_revision; every
  ``rebalance_interval_ns`` (0: never), when that round had nothing to do, the one move
  ``balance.rebalance`` finds (not again while etcd is at the revision it last found the
  cluster even at: at rest, the rebalancer costs nothing).

Every write is fenced: its txn also compares the ``coordinator`` key's create_revision
with the one this lookupd created, so a coordinator that lost the lock (paused, cut off)
can never write again, whatever it believes. Imports asyncio and the cluster package;
never a daemon (lookupd hands in what it is through ``LookupdInfo``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from nsqpy.cluster.balance import rebalance
from nsqpy.cluster.decisions import plan, track_missing
from nsqpy.cluster.etcd import (
    TXN_CHUNK,
    Compare,
    DeleteOp,
    Etcd,
    EtcdError,
    EtcdUnavailable,
    Lease,
    PutOp,
)
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.leaving import leave
from nsqpy.cluster.model import (
    Change,
    CoordinatorInfo,
    LookupdInfo,
    Move,
    Replicas,
    Snapshot,
    TopicMeta,
    Versioned,
    partition_name,
)
from nsqpy.cluster.placement import PlacementError, place_topic
from nsqpy.cluster.view import ClusterView

log = logging.getLogger("nsqpy.cluster")


class CoordinatorError(Exception):
    """A request the coordinator refuses: ``code`` in ``{"message": code}`` with ``status``,
    and ``detail`` (which value, which limit, what to do) beside it when there is one."""

    def __init__(self, status: int, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.status = status
        self.code = code
        self.detail = detail


class NotCoordinator(CoordinatorError):
    """This lookupd does not hold the lock (any more)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(500, "E_NOT_COORDINATOR", detail)


@dataclass(frozen=True)
class CoordinatorSettings:
    lease_ttl_s: float = 10.0
    tick_s: float = 1.0
    repair_delay_ns: int = 600 * 1_000_000_000
    emergency_delay_ns: int = 10 * 1_000_000_000
    default_partitions: int = 1
    default_replicas: int = 3  # at most the live nodes (``min(3, live)``)
    wait_s: float = 5.0  # how long a create waits to see its own write in the view
    rebalance_interval_ns: int = 0  # 0: no rebalancing
    compact_interval_ns: int = 0  # how often etcd's history is compacted (0: never)


class Coordinator:
    """One lookupd's part in the cluster: its registration, its campaign and, when it holds
    the lock, the coordinator's work."""

    def __init__(
        self,
        etcd: Etcd,
        view: ClusterView,
        me: LookupdInfo,
        http_address: str,
        settings: CoordinatorSettings,
        *,
        clock: Callable[[], int] = time.time_ns,
        rpc_address: str = "",
    ) -> None:
        self.etcd = etcd
        self.view = view
        self.keys: Keys = view.keys
        self.me = me
        self.http_address = http_address
        self.rpc_address = rpc_address  # (a secure cluster's: ``CoordinatorInfo``)
        self.settings = settings
        self.clock = clock
        self._lease: Lease | None = None
        self._lock_revision = 0  # create_revision of our coordinator key; 0: not leading
        self._attempt: asyncio.Future[None] | None = None  # a ``_campaign`` under way
        self._missing: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._create_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.stuck: list[str] = []  # partitions the last round could do nothing for
        self.changes_applied = 0
        # of those: new leaders, ISRs that lost a member, ISRs that gained one (/metrics)
        self.elections = self.isr_shrinks = self.isr_expands = 0
        self.elected_at = 0  # clock when this lookupd last took the lock
        self.rebalanced_at = 0  # clock of the last rebalancing look
        self.rebalance_looks = 0  # how many times the rebalancer weighed the cluster
        self._balanced_revision = 0  # the snapshot revision the rebalancer last found even
        # (clock, etcd revision) when the last compaction was looked at: the next one, an
        # interval later, compacts up to that revision (an interval of history is kept for
        # watchers to resume from)
        self._compact_mark = (0, 0)
        self.compacted = 0  # the revision etcd's history was compacted up to, by us

    @property
    def leading(self) -> bool:
        return self._lock_revision > 0 and self._lease is not None and not self._lease.lost.is_set()

    async def takeover(self, timeout: float) -> bool:
        """Whether this lookupd coordinates; while a campaign of its own is under way and
        etcd already names it (the lock is its own, read back before it leads), after
        waiting up to ``timeout`` for that campaign. A request taken in between would
        otherwise be forwarded to the coordinator etcd names: itself."""
        if self.leading:
            return True
        named, attempt = self.view.coordinator, self._attempt
        if named is None or named.id != self.me.id or attempt is None:
            return False
        await asyncio.wait([attempt], timeout=timeout)
        return self.leading

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self.view.listeners.append(self._wake.set)
        self._task = asyncio.create_task(self._run(), name="nsqpy coordinator")

    async def stop(self) -> None:
        """Leave: the lock and the registration go at once (the lease is revoked)."""
        if self._wake.set in self.view.listeners:
            self.view.listeners.remove(self._wake.set)
        task, self._task = self._task, None
        lease, self._lease = self._lease, None
        self._lock_revision = 0
        await leave(task, lease)

    async def _run(self) -> None:
        while True:
            try:
                await self._register()
                if not self.leading:
                    await self._campaign()
                if self.leading:
                    await self.reconcile_once()
            except EtcdUnavailable as exc:
                log.warning("coordinator: etcd unavailable (%s)", exc)
            except Exception:
                log.exception("coordinator: round failed")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.tick_s):
                    await self._wake.wait()

    async def _register(self) -> None:
        """A live lease with our ``lookupds/<id>`` key on it (a new one after a loss)."""
        if self._lease is not None and not self._lease.lost.is_set():
            return
        if self._lock_revision:
            log.error("coordinator: lease lost; no longer coordinating")
        self._lock_revision = 0
        self._lease = await self.etcd.lease(self.settings.lease_ttl_s)
        await self.etcd.put(self.keys.lookupd(self.me.id), self.me.to_json(), self._lease)

    async def _campaign(self) -> None:
        attempt = self._attempt = asyncio.get_running_loop().create_future()
        try:
            await self._take_lock()
        finally:
            self._attempt = None
            attempt.set_result(None)

    async def _take_lock(self) -> None:
        assert self._lease is not None
        key = self.keys.coordinator
        info = CoordinatorInfo(self.me.id, self.http_address, self.rpc_address)
        if await self.etcd.create(key, info.to_json(), self._lease):
            kv = await self.etcd.get(key)
            if kv is None or kv.lease != self._lease.id:
                return  # gone at once (lease lost meanwhile): campaign again next round
            self._lock_revision = kv.create_revision
            self._missing = {}
            self.elected_at = self.rebalanced_at = self.clock()
            self._compact_mark = (self.elected_at, self.view.snapshot().revision)
            log.info("coordinator: %s now coordinates cluster %s", self.me.id, self.keys.cluster_id)
            return
        kv = await self.etcd.get(key)
        if kv is not None and self._lease is not None and kv.lease == self._lease.id:
            self._lock_revision = kv.create_revision  # ours already (a retried create)

    def _fence(self) -> Compare:
        if not self.leading:
            raise NotCoordinator(f"{self.me.id} does not hold the coordinator lock")
        return Compare(self.keys.coordinator, "create", "==", self._lock_revision)

    async def _fenced(self, compares: list[Compare], ops: list[PutOp | DeleteOp]) -> bool:
        """The txn with our fence; NotCoordinator when it failed because we lost the lock."""
        # Safe to send again: once applied, its compares fail and the caller re-reads.
        ok = await self.etcd.txn([self._fence(), *compares], ops, retry=True)
        if not ok:
            kv = await self.etcd.get(self.keys.coordinator)
            if kv is None or kv.create_revision != self._lock_revision:
                self._lock_revision = 0
                raise NotCoordinator("the coordinator lock was lost")
        return ok

    # -- reconciling -------------------------------------------------------------------------

    async def reconcile_once(self) -> int:
        """One level-triggered round; the number of Changes written."""
        snap = self.view.snapshot()
        now = self.clock()
        self._missing = track_missing(self._missing, snap, now)
        result = plan(
            snap,
            now,
            self._missing,
            self.settings.repair_delay_ns,
            self.settings.emergency_delay_ns,
        )
        stuck = [f"{s.topic}/{s.partition}: {s.reason}" for s in result.stuck]
        if stuck != self.stuck:
            for line in stuck:
                if line not in self.stuck:
                    log.warning("coordinator: partition %s", line)
            self.stuck = stuck
        changes = list(result.changes)
        interval = self.settings.rebalance_interval_ns
        if not changes and not stuck and interval and now - self.rebalanced_at >= interval:
            self.rebalanced_at = now
            if snap.revision != self._balanced_revision:  # (nothing changed: still even)
                self.rebalance_looks += 1
                move = rebalance(snap)
                if move is not None:
                    changes.append(move)
                else:
                    self._balanced_revision = snap.revision
        written = await self._write_changes(changes)
        await self._forget_drained(snap)
        await self._compact(snap, now)
        return written

    async def _compact(self, snap: Snapshot, now: int) -> None:
        """Every ``compact_interval_ns``: compact etcd's history up to the revision seen an
        interval ago (Kubernetes' API server does the same every five minutes), so etcd's
        database stays flat however long the cluster runs. A refusal is logged and tried
        again an interval later (etcd 3.4 lets any user compact)."""
        interval = self.settings.compact_interval_ns
        then, target = self._compact_mark
        if not interval or now - then < interval:
            return
        self._compact_mark = (now, snap.revision)
        if target <= self.compacted:
            return
        try:
            await self.etcd.compact(target)
        except EtcdUnavailable:
            raise
        except EtcdError as exc:
            if "compacted" not in str(exc):  # (else: etcd compacted it already itself)
                log.warning(
                    "coordinator: compacting etcd failed (%s): its database grows until it "
                    "is compacted (etcd's --auto-compaction-retention does it too)", exc,
                )  # fmt: skip
            return
        self.compacted = target
        log.debug("coordinator: etcd history compacted up to revision %d", target)

    async def _write_changes(self, changes: list[Change]) -> int:
        """Write ``changes`` in as few txns as etcd takes (up to ``TXN_CHUNK`` compares
        each: a node's death elects new leaders for every partition it led at once, one
        revision, one watch event for every daemon); a batch whose compares do not all
        hold (a partition changed meanwhile) is written change by change, so each that
        still holds is. The number written."""
        written = 0
        batch: list[Change] = []
        compares = 1  # (the fence)

        async def flush() -> None:
            nonlocal written, compares
            if len(batch) > 1 and await self._fenced(
                [c for change in batch for c in self._compares(change)],
                [PutOp(self.keys.replicas(c.topic, c.partition), c.new.to_json()) for c in batch],
            ):
                for change in batch:
                    self._written(change)
                written += len(batch)
            else:
                for change in batch:
                    written += await self._write_change(change)
            batch.clear()
            compares = 1

        for change in changes:
            need = len(self._compares(change))
            if batch and (
                compares + need > TXN_CHUNK
                or any((c.topic, c.partition) == (change.topic, change.partition) for c in batch)
            ):  # (etcd refuses a txn that puts one key twice)
                await flush()
            batch.append(change)
            compares += need
        if batch:
            await flush()
        return written

    def _compares(self, change: Change) -> list[Compare]:
        """What a change is guarded by: its replicas key's revision and each node key's."""
        key = self.keys.replicas(change.topic, change.partition)
        guards = [Compare.mod_is(self.keys.node(n), rev) for n, rev in change.guards]
        return [Compare.mod_is(key, change.expected_revision), *guards]

    async def _write_change(self, change: Change) -> bool:
        key = self.keys.replicas(change.topic, change.partition)
        if not await self._fenced(self._compares(change), [PutOp(key, change.new.to_json())]):
            return False
        self._written(change)
        return True

    def _written(self, change: Change) -> None:
        new = change.new
        was = change.old
        self.changes_applied += 1
        if was is not None:  # (the partition as the decision read it)
            self.elections += new.leader != was.leader
            self.isr_shrinks += bool(set(was.isr) - set(new.isr))
            self.isr_expands += bool(set(new.isr) - set(was.isr))
        move = f" move {new.move.to_dict()}" if new.move is not None else ""
        log.info(
            "coordinator: %s/%d epoch %d leader %s isr %s catchup %s%s (%s)",
            change.topic, change.partition, new.epoch, new.leader, ",".join(new.isr),
            ",".join(new.catchup) or "-", move, change.reason,
        )  # fmt: skip

    async def _forget_drained(self, snap: Snapshot) -> None:
        """A drained node that holds nothing and is gone is forgotten (its key goes)."""
        _, held = snap.counts()
        for node in sorted(snap.removing):
            if node not in snap.nodes and not held.get(node):
                await self._fenced([], [DeleteOp(self.keys.removing(node))])
                log.info("coordinator: node %s drained and gone: forgotten", node)

    # -- topics ------------------------------------------------------------------------------

    def defaults(self, snap: Snapshot) -> TopicMeta:
        """The meta of a topic created implicitly (a PUB or SUB of an unknown topic)."""
        replicas = max(1, min(self.settings.default_replicas, len(snap.nodes)))
        return TopicMeta(self.settings.default_partitions, replicas, multipart=True)

    async def create_topic(
        self, name: str, meta: TopicMeta | None = None, *, leader_hint: str | None = None
    ) -> TopicMeta:
        """Create ``name`` (``meta`` None: the cluster defaults). A topic that exists with
        the same partitions and replicas is answered as created (Youzan's rule); with other
        settings, 400 ``TOPIC_ALREADY_EXIST``."""
        self._fence()  # NotCoordinator before anything else
        async with self._create_lock:
            snap = self.view.snapshot()
            wanted = meta or self.defaults(snap)
            existing = snap.topics.get(name)
            if existing is not None:
                return self._same(name, existing, wanted, meta is None)
            wanted = replace(wanted, created_ns=self.clock())
            try:
                placed = place_topic(name, wanted, snap, leader_hint=leader_hint)
            except PlacementError as exc:
                raise CoordinatorError(exc.status, exc.code, exc.detail) from exc
            meta_key = self.keys.topic_meta(name)
            if not await self._write_topic(name, wanted, placed):
                kv = await self.etcd.get(meta_key)
                if kv is None:
                    raise CoordinatorError(500, "E_CREATE_FAILED", "txn failed; try again")
                return self._same(name, TopicMeta.from_json(kv.value), wanted, meta is None)
            log.info(
                "coordinator: topic %s created: %d partitions x %d replicas",
                name,
                wanted.partition_num,
                wanted.replicator,
            )
        await self.view.wait_until(lambda s: name in s.topics, self.settings.wait_s)
        return wanted

    async def _write_topic(self, name: str, meta: TopicMeta, placed: list[Replicas]) -> bool:
        """Every key of a new topic, each txn guarded on the meta being absent: what an
        earlier attempt left goes, the replicas keys are written in chunks (etcd takes at
        most 128 operations per txn), the meta last. Nothing reads replicas keys without a
        meta, so the topic appears whole, when its meta does; False when it exists."""
        meta_key = self.keys.topic_meta(name)
        absent = [Compare.absent(meta_key)]
        if not await self._fenced(absent, [DeleteOp(self.keys.topic_prefix(name), prefix=True)]):
            return False
        puts = [PutOp(self.keys.replicas(name, p), r.to_json()) for p, r in enumerate(placed)]
        for start in range(0, len(puts), TXN_CHUNK):
            if not await self._fenced(absent, list(puts[start : start + TXN_CHUNK])):
                return False
        return await self._fenced(absent, [PutOp(meta_key, meta.to_json())])

    @staticmethod
    def _same(name: str, existing: TopicMeta, wanted: TopicMeta, implicit: bool) -> TopicMeta:
        if implicit or (
            existing.partition_num == wanted.partition_num
            and existing.replicator == wanted.replicator
        ):
            return existing
        raise CoordinatorError(
            400,
            "TOPIC_ALREADY_EXIST",
            f"topic {name} exists with {existing.partition_num} partitions x "
            f"{existing.replicator} replicas",
        )

    async def delete_topic(self, name: str) -> None:
        """Remove every key of the topic (its nsqd delete their replicas when they see it)."""
        self._fence()
        if name not in self.view.snapshot().topics:
            raise CoordinatorError(404, "TOPIC_NOT_FOUND", f"topic {name} is not created")
        await self._fenced([], [DeleteOp(self.keys.topic_prefix(name), prefix=True)])
        log.info("coordinator: topic %s deleted", name)
        await self.view.wait_until(lambda s: name not in s.topics, self.settings.wait_s)

    async def update_topic(
        self, name: str, *, syncdisk: int | None = None, retention_days: int | None = None
    ) -> TopicMeta:
        """Change a topic's ``syncdisk``/``retention_days`` (``replicator`` changes come with
        partition moves, in cluster operations)."""
        self._fence()
        kv = await self.etcd.get(self.keys.topic_meta(name))
        if kv is None:
            raise CoordinatorError(404, "TOPIC_NOT_FOUND", f"topic {name} is not created")
        meta = TopicMeta.from_json(kv.value)
        if syncdisk is not None:
            meta = replace(meta, syncdisk=syncdisk)
        if retention_days is not None:
            meta = replace(meta, retention_days=retention_days)
        if not await self._fenced(
            [Compare.mod_is(kv.key, kv.mod_revision)], [PutOp(kv.key, meta.to_json())]
        ):
            raise CoordinatorError(409, "E_CONFLICT", "the topic changed meanwhile; try again")
        return meta

    async def expand_topic(self, name: str, partition_num: int) -> TopicMeta:
        """Grow a topic to ``partition_num`` partitions (never fewer): the new partitions'
        replicas keys, placed as at creation with the existing ones counted as load, then
        the meta, each txn guarded on the meta as read (nothing reads a partition the meta
        does not count, so the new ones appear together)."""
        self._fence()
        async with self._create_lock:
            kv = await self.etcd.get(self.keys.topic_meta(name))
            if kv is None:
                raise CoordinatorError(404, "TOPIC_NOT_FOUND", f"topic {name} is not created")
            meta = TopicMeta.from_json(kv.value)
            if partition_num < meta.partition_num:
                raise CoordinatorError(400, "E_PARTITION_NUM_REDUCED", f"topic {name} has "
                                       f"{meta.partition_num} partitions; they cannot be fewer")  # fmt: skip
            if partition_num == meta.partition_num:
                return meta
            grown = replace(meta, partition_num=partition_num)
            try:
                placed = place_topic(name, grown, self.view.snapshot(),
                                     first_partition=meta.partition_num)  # fmt: skip
            except PlacementError as exc:
                raise CoordinatorError(500, exc.code, exc.detail) from exc
            same = [Compare.mod_is(kv.key, kv.mod_revision)]
            puts = [PutOp(self.keys.replicas(name, p), r.to_json())
                    for p, r in enumerate(placed, meta.partition_num)]  # fmt: skip
            for start in range(0, len(puts), TXN_CHUNK):
                if not await self._fenced(same, list(puts[start : start + TXN_CHUNK])):
                    raise CoordinatorError(409, "E_CONFLICT", "the topic changed; try again")
            if not await self._fenced(same, [PutOp(kv.key, grown.to_json())]):
                raise CoordinatorError(409, "E_CONFLICT", "the topic changed; try again")
            log.info("coordinator: topic %s expanded: %d -> %d partitions", name,
                     meta.partition_num, partition_num)  # fmt: skip
        await self.view.wait_until(
            lambda s: (m := s.topics.get(name)) is not None and m.partition_num >= partition_num,
            self.settings.wait_s,
        )
        return grown

    def _partition(self, topic: str, partition: int) -> tuple[Snapshot, Versioned[Replicas]]:
        """An operation's partition (fenced: NotCoordinator first), or 400 naming what is
        missing."""
        self._fence()
        snap = self.view.snapshot()
        versioned = snap.replicas.get((topic, partition))
        meta = snap.topics.get(topic)
        if meta is None:
            raise CoordinatorError(404, "TOPIC_NOT_FOUND", f"topic {topic} is not created")
        if versioned is None or partition >= meta.partition_num:
            raise CoordinatorError(400, "INVALID_ARG_TOPIC_PARTITION_NUM",
                                   f"topic {topic} has no partition {partition}")  # fmt: skip
        return snap, versioned

    async def recover_partition(self, topic: str, partition: int) -> tuple[Replicas, int]:
        """Forced recovery (Kafka's unclean leader election), on an operator's request only:
        when no ISR member of the partition is live, the live replica with the longest log
        (the end its nsqd reports, then its epoch) leads it alone, in a new leader epoch;
        the other holders become catch-up members. What the dead ISR members had beyond the
        new leader's end is lost: when they come back they truncate to the new leader's
        history. Returns the new replicas and the new leader's end; 400 when an ISR member
        is live (nothing to force) or no replica is."""
        snap, versioned = self._partition(topic, partition)
        r, live = versioned.value, snap.nodes
        alive = [n for n in r.isr if n in live]
        if alive:
            raise CoordinatorError(400, "E_ISR_ALIVE", f"{topic}/{partition}: ISR member "
                                   f"{alive[0]} is live; it is elected without forcing")  # fmt: skip
        name = partition_name(topic, partition)

        def log_of(node: str) -> tuple[int, int]:
            epoch, end = live[node].ends.get(name, (-1, -1))
            return end, epoch

        candidates = [n for n in r.holders if n in live]
        if not candidates:
            raise CoordinatorError(400, "E_NO_LIVE_REPLICA",
                                   f"{topic}/{partition}: no replica is live")  # fmt: skip
        chosen = max(candidates, key=lambda n: (*log_of(n), n))
        end = max(0, log_of(chosen)[0])
        new = Replicas(chosen, (chosen,), tuple(n for n in r.holders if n != chosen),
                       epoch=r.epoch + 1, leader_epoch=r.leader_epoch + 1)  # fmt: skip
        key = self.keys.replicas(topic, partition)
        if not await self._fenced([Compare.mod_is(key, versioned.mod_revision)],
                                  [PutOp(key, new.to_json())]):  # fmt: skip
            raise CoordinatorError(400, "E_CONFLICT", "the partition changed meanwhile; try again")
        self.elections += 1
        log.warning(
            "coordinator: %s/%d: FORCED RECOVERY: no ISR member (%s) is live; %s leads it "
            "from offset %d: what the ISR had beyond that offset is lost",
            topic, partition, ", ".join(r.isr), chosen, end,
        )  # fmt: skip
        return new, end

    async def move_partition(
        self, topic: str, partition: int, *, leader_only: bool, source: str, target: str
    ) -> Move:
        """Start moving a partition's replica (or, ``leader_only``, its lead) from ``source``
        to ``target`` ("" for either: the leader, and the live node the decisions would pick).
        The reconciling carries it out (``decisions``); 400 with the reason when it cannot."""
        snap, versioned = self._partition(topic, partition)
        r = versioned.value
        if r.move is not None:
            raise CoordinatorError(400, "E_MOVE_UNDER_WAY", f"{topic}/{partition} is moving: "
                                   f"{r.move.to_dict()}")  # fmt: skip
        source = source or r.leader
        if leader_only:
            move = self._lead_move(snap, r, source, target)
        else:
            move = self._replica_move(snap, r, source, target)
        new = replace(r, epoch=r.epoch + 1, move=move)
        key = self.keys.replicas(topic, partition)
        if not await self._fenced([Compare.mod_is(key, versioned.mod_revision)],
                                  [PutOp(key, new.to_json())]):  # fmt: skip
            raise CoordinatorError(400, "E_CONFLICT", "the partition changed meanwhile; try again")
        log.info("coordinator: %s/%d: move %s started", topic, partition, move.to_dict())
        return move

    @staticmethod
    def _lead_move(snap: Snapshot, r: Replicas, source: str, target: str) -> Move:
        if source != r.leader:
            raise CoordinatorError(
                400, "E_NOT_LEADER", f"{source} does not lead it ({r.leader} does)"
            )
        leaders, _ = snap.counts()
        followers = [n for n in r.followers if n in snap.nodes and n not in snap.removing]
        if not target:
            if not followers:
                raise CoordinatorError(400, "E_NO_TARGET", "no live ISR member to lead it")
            target = min(followers, key=lambda n: (leaders.get(n, 0), n))
        if target not in followers:
            raise CoordinatorError(400, "E_TARGET_NOT_IN_ISR",
                                   f"{target} is not a live ISR member (isr {list(r.isr)})")  # fmt: skip
        return Move(source, target, leader_only=True)

    @staticmethod
    def _replica_move(snap: Snapshot, r: Replicas, source: str, target: str) -> Move:
        if source not in r.holders:
            raise CoordinatorError(400, "E_SOURCE_NOT_HOLDER",
                                   f"{source} holds no replica of it (holders {list(r.holders)})")  # fmt: skip
        _, held = snap.counts()
        spare = [n for n in snap.nodes if n not in r.holders and n not in snap.removing]
        if not target:
            if not spare:
                raise CoordinatorError(400, "E_NO_TARGET", "every live node holds it already")
            target = min(spare, key=lambda n: (held.get(n, 0), n))
        if target not in spare:
            why = "holds it already" if target in r.holders else "is not a live node"
            raise CoordinatorError(400, "E_BAD_TARGET", f"{target} {why}")
        return Move(source, target)

    async def remove_node(self, node: str) -> bool:
        """Drain ``node``: every replica it holds moves away (``decisions`` (e)), then, once
        it is gone, it is forgotten. False when it was being drained already."""
        self._fence()
        snap = self.view.snapshot()
        _, held = snap.counts()
        if node not in snap.nodes and not held.get(node):
            raise CoordinatorError(400, "E_NODE_NOT_FOUND", f"no node {node} in the cluster")
        key = self.keys.removing(node)
        value = json.dumps({"since_ns": self.clock()}).encode()
        if not await self._fenced([Compare.absent(key)], [PutOp(key, value)]):
            return False
        log.info("coordinator: node %s to be drained (%d replicas)", node, held.get(node, 0))
        self._wake.set()
        return True
