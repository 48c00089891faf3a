"""An nsqd's membership in a cluster: its registration, and the partitions etcd gives it.

``Member`` keeps ``nodes/<node-id>`` alive under a lease (its addresses, rpc endpoint,
load and the ``(leader_epoch, end)`` of every partition it holds; built every
``report_s`` and written only when it changed, end offsets alone at most every
``ends_report_s`` and load figures alone every ``load_report_s``: a cluster at rest
writes nothing to etcd, a busy one little), and makes the node's partitions what the ``replicas`` keys say
(level-triggered, on every change of the view): a partition the node holds is created,
led when the key names it leader, followed otherwise; one it no longer holds is released.
When the lease is lost (etcd unreachable for a TTL, the process paused) the node leads
nothing until it has registered again and etcd still names it: another node may lead by
then. ``ensure_topic`` asks the coordinator to create a topic a client used before it
existed (NSQ's implicit creation), with this node as the leader of its first partition.

The node's id is kept in ``<data-path>/cluster.json`` (``{"cluster_id", "node_id"}``),
chosen at the first join (Youzan's ``ip:rpcport:tcpport:id`` form) and kept after, so a
node whose ports change is still the node its replicas name; a data path of another
cluster is refused. Imports asyncio, aiohttp (the coordinator's HTTP API) and the cluster
package; reaches the broker only through ``PartitionHost``, a Protocol it owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

import aiohttp

from nsqpy.cluster.absent import TooManyLookups, TopicLookup
from nsqpy.cluster.etcd import TXN_CHUNK, Compare, Etcd, EtcdUnavailable, Lease, PutOp
from nsqpy.cluster.keys import check_segment
from nsqpy.cluster.leaving import leave
from nsqpy.cluster.model import NodeInfo, Replicas, Snapshot, Versioned
from nsqpy.cluster.tls import ClusterTls, coordinator_url
from nsqpy.cluster.view import ClusterView
from nsqpy.errors import ConfigError, StorageError

log = logging.getLogger("nsqpy.cluster")

IDENTITY_FILE = "cluster.json"
APPLY_EVERY_S = 10.0  # the view is applied again this often even when it did not change
# Changes in etcd that come in a stream (thousands of partitions joining their ISRs) are
# applied together, at most this often (a pass looks at every partition held)
APPLY_GAP_S = 0.1
# Partitions taken up (created on disk) per pass of ``apply``: the rest in the next passes,
# the event loop free in between (a node given thousands at once must not stall its lease's
# keep-alive and its replication for longer than the lease).
TAKE_UP_PER_PASS = 32
LEADER, FOLLOWER = "leader", "follower"


class PartitionHost(Protocol):
    """What a member does to its node's broker."""

    def held_partitions(self) -> dict[tuple[str, int], tuple[str, int, int]]:
        """Every partition held: (topic, p) -> (role, leader_epoch, log end offset)."""
        ...

    def hold_partition(
        self,
        topic: str,
        partition_count: int,
        number: int,
        role: str,
        leader_epoch: int,
        ordered: bool,
    ) -> None:
        """Hold the partition (creating its topic, with ``ordered`` channels, if missing)."""
        ...

    def set_role(self, topic: str, number: int, role: str, leader_epoch: int) -> None: ...

    def grow_topic(self, topic: str, partition_count: int) -> None:
        """A topic held here has ``partition_count`` partitions now, if that is more."""
        ...

    def set_retention(self, topic: str, days: int) -> None:
        """Keep the topic's confirmed records ``days`` (0: the node's own setting)."""
        ...

    def set_sync_every(self, topic: str, messages: int) -> None:
        """fsync the topic's logs every ``messages`` messages (its ``syncdisk``; 0: the
        node's own setting)."""
        ...

    def release_partition(self, topic: str, number: int) -> None: ...


def node_identity(data_path: Path, cluster_id: str, fresh_id: str) -> str:
    """The node id kept in the data path for ``cluster_id`` (``fresh_id``, written, at the
    first join). ConfigError when the data path belongs to another cluster."""
    path = data_path / IDENTITY_FILE
    try:
        found = json.loads(path.read_text())
    except FileNotFoundError:
        found = None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if isinstance(found, dict):
        if found.get("cluster_id") != cluster_id:
            raise ConfigError(
                f"{path} says this data path belongs to cluster {found.get('cluster_id')!r}, "
                f"not {cluster_id!r}"
            )
        node_id = found.get("node_id")
        if isinstance(node_id, str) and node_id:
            return check_segment("node id", node_id)
    elif found is not None:
        raise ConfigError(f"{path} is not a JSON object")
    check_segment("node id", fresh_id)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"cluster_id": cluster_id, "node_id": fresh_id}) + "\n")
    tmp.replace(path)
    return fresh_id


@dataclass(frozen=True)
class MemberSettings:
    lease_ttl_s: float = 10.0
    report_s: float = 2.0  # how often the report is built, and written if it changed
    ends_report_s: float = 10.0  # partitions' end offsets alone are written at most this
    # often (at every report when a partition here has a catch-up member: it may join)
    load_report_s: float = 60.0  # load figures alone are written at most this often
    create_wait_s: float = 5.0  # how long an implicit create may take


class TopicUnavailable(Exception):
    """The topic does not exist and could not be created (``code``: the wire error)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code} {detail}")
        self.code = code
        self.detail = detail


class Member:
    """One nsqd in a cluster (see the module docstring)."""

    def __init__(
        self,
        etcd: Etcd,
        view: ClusterView,
        node: Callable[[], NodeInfo],
        host: PartitionHost,
        settings: MemberSettings,
    ) -> None:
        self.etcd = etcd
        self.view = view
        self.keys = view.keys
        self.node = node
        self.node_id = node().id
        self.host = host
        self.settings = settings
        self._lease: Lease | None = None
        self._watch: asyncio.Task[None] | None = None  # ``_on_lost`` of the current lease
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None
        self._lookup = TopicLookup(etcd, self.keys)  # (``_in_etcd``)
        self.registered = asyncio.Event()
        # The report last written (None: none under the current lease), its revision, and
        # when (the loop's clock): a report is written again only when it changed.
        self._written: NodeInfo | None = None
        self._written_revision = 0
        self._ends_written = self._load_written = 0.0
        self.reports_written = 0  # puts of the node key (nsqd's ``/info``)
        self.tls: ClusterTls | None = None  # a secure cluster's: the coordinator is called so
        # Called with the snapshot after each ``apply`` (the node's replication follows).
        self.on_applied: list[Callable[[Snapshot], None]] = []
        # after each NodeInfo is written, with the revision of the write
        self.on_reported: list[Callable[[int], None]] = []
        self._renewing: set[tuple[str, int, int]] = set()  # new epochs being asked for
        self._epochs_asked: list[tuple[str, int, Versioned[Replicas]]] = []  # not yet sent
        self._epochs_writer: asyncio.Task[None] | None = None
        # per partition, the leader epoch of the last snapshot this process applied
        self._seen: dict[tuple[str, int], int] = {}
        # (topic, partition) -> why it could not be taken up or changed at the last try
        self.hold_failures: dict[tuple[str, int], str] = {}
        # (topic, partition) -> the leader epoch this node was to lead it in, when it failed
        # so (reported as ``NodeInfo.failing``: the coordinator elects another ISR member)
        self.lead_failures: dict[tuple[str, int], int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.more = False  # the last ``apply`` left partitions to take up in a next pass

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Register (waits for etcd) and take up the partitions etcd gives this node."""
        await self._register()
        self.apply(self.view.snapshot())
        self.view.listeners.append(self._wake.set)
        self._task = asyncio.create_task(self._run(), name="nsqpy cluster member")

    async def stop(self) -> None:
        """Leave at once: the lease is revoked, so the coordinator moves leadership now."""
        if self._wake.set in self.view.listeners:
            self.view.listeners.remove(self._wake.set)
        task, self._task = self._task, None
        lease, self._lease = self._lease, None
        if self._watch is not None:
            self._watch.cancel()
        await leave(task, lease)
        if self._http is not None:
            await self._http.close()

    @property
    def live(self) -> bool:
        return self._lease is not None and not self._lease.lost.is_set()

    async def _register(self) -> None:
        if not self.live:
            if self._lease is not None:
                self._demote_all()  # (``_on_lost`` did it already, when it could run)
            self.registered.clear()
            self._written = None  # (the key went with the old lease)
            self._lease = await self.etcd.lease(self.settings.lease_ttl_s)
            if self._watch is not None:
                self._watch.cancel()
            self._watch = asyncio.get_running_loop().create_task(self._on_lost(self._lease))
        await self._report()
        if not self.registered.is_set():
            log.info(
                "cluster: node %s registered in cluster %s", self.node_id, self.keys.cluster_id
            )
            self.registered.set()

    async def _report(self) -> None:
        """Write the node's report if it differs from the one in etcd: at once for what
        elections and ISR changes read first (roles, epochs, lagging, caught-up and
        failing partitions, addresses: ``NodeInfo.shape``); the partitions' end offsets
        alone every ``ends_report_s`` (at once while a partition here has a catch-up
        member, whose join compares ends); load figures alone every ``load_report_s``, and
        only when they moved (``NodeInfo.load_moved``). A cluster at rest writes nothing;
        the lease is kept alive by etcd's keep-alive, not by rewriting the key."""
        info, last = self.node(), self._written
        now = asyncio.get_running_loop().time()
        if last is not None and not self._gone(last) and info.shape() == last.shape():
            ends_due = info.ends != last.ends and (
                now - self._ends_written >= self.settings.ends_report_s or self._joining()
            )
            load_due = now - self._load_written >= self.settings.load_report_s and (
                info.load_moved(last)
            )
            if not ends_due and not load_due:
                return
        revision = await self.etcd.put(self.keys.node(self.node_id), info.to_json(), self._lease)
        self._written, self._written_revision = info, revision
        self._ends_written = self._load_written = now
        self.reports_written += 1
        for hook in self.on_reported:  # (what the report said is in etcd now)
            hook(revision)

    def _joining(self) -> bool:
        """Whether a partition this node holds has a catch-up member (this node or
        another, when it leads): its join to the ISR compares the ends reported."""
        me = self.node_id
        for versioned in self.view.snapshot().replicas.values():
            r = versioned.value
            if r.catchup and (me in r.catchup or r.leader == me):
                return True
        return False

    def _gone(self, written: NodeInfo) -> bool:
        """The view, as of our write or later, shows another report or none (an operator
        deleted the key, say): it is written again."""
        snap = self.view.snapshot()
        if snap.revision < self._written_revision:
            return False  # (the view has not caught up with the write yet)
        return snap.node_revisions.get(self.node_id) != self._written_revision

    async def _on_lost(self, lease: Lease) -> None:
        """The moment ``lease`` is lost, this node leads nothing: it must not acknowledge a
        write without a lease, and its clients learn E_FAILED_ON_NOT_LEADER at once rather
        than after an etcd call still waiting for its deadline (a node cut off from etcd)."""
        await lease.lost.wait()
        if self._lease is lease:
            log.error("cluster: lease lost; leading nothing until registered again")
            self._demote_all()
            self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_report = loop.time() + self.settings.report_s
        applied: tuple[int, bool] = (-1, False)  # (view revision, live) applied last
        next_apply = gap_ends = 0.0
        wake_at: asyncio.TimerHandle | None = None
        while True:
            timeout = max(0.0, next_report - loop.time())
            if self._lease is not None:
                timeout = min(timeout, self.settings.lease_ttl_s / 3)
            if self._wake.is_set():
                await asyncio.sleep(0)  # (the loop's other work first: keep-alives, links)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            self._wake.clear()
            try:
                if not self.live or loop.time() >= next_report:
                    await self._register()
                    next_report = loop.time() + self.settings.report_s
                # Applied when the view or the lease changed (and, level-triggered, now
                # and then all the same): not on every report, a pass over every partition.
                snap, live = self.view.snapshot(), self.live
                now = loop.time()
                due = (snap.revision, live) != applied or self.more or now >= next_apply
                if due and not self.more and live == applied[1] and now < gap_ends:
                    if wake_at is None:  # (a pass once the gap is over)
                        wake_at = loop.call_at(gap_ends, self._wake.set)
                elif due:
                    self.apply(snap)
                    applied, next_apply = (snap.revision, live), now + APPLY_EVERY_S
                    gap_ends = loop.time() + APPLY_GAP_S
                    if wake_at is not None:
                        wake_at.cancel()
                        wake_at = None
                    if self.more:
                        self._wake.set()  # (another pass at once, after the loop's turn)
            except EtcdUnavailable as exc:
                log.warning("cluster: etcd unavailable (%s)", exc)
                if not self.live:
                    self._demote_all()
            except Exception:
                log.exception("cluster: member round failed")

    # -- partitions --------------------------------------------------------------------------

    def assignments(self, snap: Snapshot) -> dict[tuple[str, int], tuple[str, int, int, bool]]:
        """(topic, p) -> (role, leader_epoch, partition_num, ordered) for what this node
        holds."""
        me = self.node_id
        out: dict[tuple[str, int], tuple[str, int, int, bool]] = {}
        for (topic, p), versioned in snap.replicas.items():
            meta = snap.topics.get(topic)
            r = versioned.value
            if meta is None or me not in r.holders or p >= meta.partition_num:
                continue  # (p beyond the count: an expansion being written)
            role = LEADER if r.leader == me and self.live else FOLLOWER
            out[(topic, p)] = (role, r.leader_epoch, meta.partition_num, meta.ordered)
        return out

    def apply(self, snap: Snapshot, first: str = "") -> None:
        """Make the broker's partitions what ``snap`` gives this node; at most
        ``TAKE_UP_PER_PASS`` new ones are taken up (``more`` says some are left), those of
        topic ``first`` before any other."""
        wanted = self.assignments(snap)
        held = self.host.held_partitions()
        for key in sorted(set(held) - set(wanted)):
            log.info("cluster: releasing %s/%d (no longer held here)", *key)
            self.host.release_partition(*key)
        taken, self.more = 0, False
        order = sorted(wanted.items(), key=lambda item: (item[0][0] != first, item[0]))
        for (topic, p), (role, leader_epoch, count, ordered) in order:
            now = held.get((topic, p))
            if now is None and taken >= TAKE_UP_PER_PASS:
                self.more = True
                continue
            taking_over = role == LEADER and (now is None or now[:2] != (LEADER, leader_epoch))
            seen = self._seen.get((topic, p))
            self._seen[(topic, p)] = leader_epoch
            if taking_over and now is not None and (seen is None or seen >= leader_epoch):
                # Held already, and not an election this process saw happen: this node may
                # have led this epoch before (an earlier life, or before its lease was
                # lost) and lost records its followers hold of it (a power loss). It leads
                # only in a new epoch, so that they cut by epoch what it lost.
                self._new_epoch(topic, p, snap.replicas[(topic, p)])
                role = FOLLOWER
            try:
                if now is None:
                    if (topic, p) not in self.hold_failures:  # (a retry is not logged again)
                        log.info("cluster: taking %s/%d as %s (epoch %d)", topic, p, role,
                                 leader_epoch)  # fmt: skip
                    taken += 1
                    self.host.hold_partition(topic, count, p, role, leader_epoch, ordered)
                elif now[0] != role or now[1] != leader_epoch:
                    log.info("cluster: %s/%d now %s (epoch %d)", topic, p, role, leader_epoch)
                    self.host.set_role(topic, p, role, leader_epoch)
                if now is not None:
                    self.host.grow_topic(topic, count)  # (expanded: keys hash over the new count)
            except (StorageError, OSError) as exc:  # (this partition's alone: the pass goes on)
                self._hold_failed((topic, p), exc)
                if role == LEADER:
                    self.lead_failures[(topic, p)] = leader_epoch
                else:  # (another node leads it now: nothing of this node's to report)
                    self.lead_failures.pop((topic, p), None)
                continue
            self.lead_failures.pop((topic, p), None)
            if self.hold_failures.pop((topic, p), None) is not None:
                log.info("cluster: %s/%d is held here again", topic, p)
        for key in [k for k in self.hold_failures if k not in wanted]:
            del self.hold_failures[key]
            self.lead_failures.pop(key, None)
        for topic in {t for t, _ in wanted}:
            meta = snap.topics.get(topic)
            if meta is not None:  # (leader and followers alike)
                self.host.set_retention(topic, meta.retention_days)
                self.host.set_sync_every(topic, meta.syncdisk)
        for hook in self.on_applied:
            hook(snap)

    def _hold_failed(self, key: tuple[str, int], exc: BaseException) -> None:
        """A partition this node could not take up (or change) in a pass: the others are
        taken up all the same, it is tried again each pass, and its failure is logged once
        (again only when it fails otherwise)."""
        text = f"{type(exc).__name__}: {exc}"
        if self.hold_failures.get(key) != text:
            log.error("cluster: cannot hold %s/%d here: %s (tried again on each pass)", *key, text)
        self.hold_failures[key] = text

    def _new_epoch(self, topic: str, p: int, versioned: Versioned[Replicas]) -> None:
        """Ask etcd for the next leader epoch of a partition this node is to lead again (a
        txn guarded by the key's revision: the coordinator's own decisions win a race). The
        asks of a pass go together, ``TXN_CHUNK`` to a txn (a node whose lease lapsed asks
        for every partition it led at once)."""
        key = (topic, p, versioned.mod_revision)
        if key in self._renewing:
            return
        self._renewing.add(key)
        self._epochs_asked.append((topic, p, versioned))
        if self._epochs_writer is None or self._epochs_writer.done():
            task = asyncio.get_running_loop().create_task(self._write_new_epochs())
            self._epochs_writer = task
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write_new_epochs(self) -> None:
        await asyncio.sleep(0)  # (the rest of the pass asks first)
        while self._epochs_asked:
            batch = self._epochs_asked[:TXN_CHUNK]
            del self._epochs_asked[:TXN_CHUNK]
            try:
                if not await self._txn_new_epochs(batch) and len(batch) > 1:
                    for one in batch:  # (one was decided meanwhile: the others, alone)
                        await self._txn_new_epochs([one])
            except EtcdUnavailable as exc:
                log.warning("cluster: %d new epoch(s) not written: %s", len(batch), exc)
            finally:
                for topic, p, versioned in batch:
                    self._renewing.discard((topic, p, versioned.mod_revision))
                self._wake.set()

    async def _txn_new_epochs(self, batch: list[tuple[str, int, Versioned[Replicas]]]) -> bool:
        compares, puts, new_epochs = [], [], []
        for topic, p, versioned in batch:
            r = versioned.value
            new = Replicas(r.leader, r.isr, r.catchup, r.epoch + 1, r.leader_epoch + 1)
            path = self.keys.replicas(topic, p)
            compares.append(Compare.mod_is(path, versioned.mod_revision))
            puts.append(PutOp(path, new.to_json()))
            new_epochs.append(f"{topic}/{p} {new.leader_epoch}")
        if not await self.etcd.txn(compares, puts, retry=True):
            return False
        shown = ", ".join(new_epochs[:3]) + (
            f" and {len(batch) - 3} more" if len(batch) > 3 else ""
        )
        log.info("cluster: leading again, in a new epoch: %s", shown)
        return True

    def _demote_all(self) -> None:
        for (topic, p), (role, leader_epoch, _end) in self.host.held_partitions().items():
            if role == LEADER:
                self.host.set_role(topic, p, FOLLOWER, leader_epoch)

    def replicas(self, topic: str, partition: int) -> Replicas | None:
        versioned = self.view.snapshot().replicas.get((topic, partition))
        return versioned.value if versioned is not None else None

    def partition_info(self, topic: str, partition: int) -> dict[str, object]:
        """What /stats adds per partition in a cluster."""
        r = self.replicas(topic, partition)
        if r is None:
            return {}
        move = {"move": r.move.to_dict()} if r.move is not None else {}
        return {
            "leader": r.leader,
            "isr": list(r.isr),
            "catchup": list(r.catchup),
            "epoch": r.epoch,
            **move,
        }

    # -- implicit creation -------------------------------------------------------------------

    def lease_left(self) -> float:
        """Seconds the lease has left as of its last renewal (-1: no live lease)."""
        lease = self._lease
        if lease is None or lease.lost.is_set():
            return -1.0
        return max(0.0, lease.expires - asyncio.get_running_loop().time())

    def known_partitions(self, topic: str) -> int:
        """How many partitions this node's view gives ``topic`` (0: it does not know it)."""
        meta = self.view.snapshot().topics.get(topic)
        return 0 if meta is None else meta.partition_num

    async def ensure_topic(self, topic: str, partitions: int = 0, *, create: bool = True) -> None:
        """The topic exists in the cluster, with at least ``partitions`` partitions, and
        this node holds what etcd gives it of it: created through the coordinator when
        missing (the cluster's defaults), grown when it has fewer partitions. Without
        ``create``, only waited for when etcd has it with that many partitions (this node's
        watch may not have brought them yet). TopicUnavailable when it cannot be."""
        if not create:
            await self._in_etcd(topic, partitions)
        elif not self.known_partitions(topic):
            await self._ask_coordinator(
                f"/topic/create?topic={quote(topic)}&implicit=true"
                f"&suggest_leader={quote(self.node_id)}"
            )

        wait_s = self.settings.create_wait_s
        if not await self.view.wait_until(lambda s: topic in s.topics, wait_s):
            raise TopicUnavailable("E_TOPIC_NOT_EXIST", f"topic {topic} was not created in time")
        if create and partitions > self.view.snapshot().topics[topic].partition_num:
            # (this view may be behind the coordinator's: a topic it already grew further
            # is answered E_PARTITION_NUM_REDUCED, and has what was asked)
            await self._ask_coordinator(
                f"/topic/partition/expand?topic={quote(topic)}&partition_num={partitions}",
                fine="E_PARTITION_NUM_REDUCED",
            )
        count = max(partitions, 1)
        needed = [(topic, p) for p in range(count)]

        def held(s: Snapshot) -> bool:  # (the meta too: a grow writes it after the replicas)
            meta = s.topics.get(topic)
            return (
                meta is not None
                and meta.partition_num >= count
                and all(k in s.replicas for k in needed)
            )

        if not await self.view.wait_until(held, wait_s):
            raise TopicUnavailable("E_TOPIC_NOT_EXIST", f"topic {topic} was not created in time")
        self.apply(self.view.snapshot(), first=topic)

    async def _in_etcd(self, topic: str, partitions: int) -> None:
        """TopicUnavailable unless etcd has ``topic`` with at least ``partitions``
        partitions (asked only when this node's view lacks them)."""
        known = self.known_partitions(topic)
        if known >= max(partitions, 1):
            return
        try:  # (once at a time per topic, a missing one remembered, at a bounded rate)
            count = await self._lookup.partitions(topic, known=known > 0)
        except EtcdUnavailable as exc:  # (the command is answered, never left waiting)
            raise TopicUnavailable("E_TOPIC_NOT_EXIST", f"etcd unavailable: {exc}") from exc
        except TooManyLookups as exc:
            raise TopicUnavailable("E_TOPIC_NOT_EXIST", f"topic {topic} unknown here: {exc}")
        if not count:
            raise TopicUnavailable("E_TOPIC_NOT_EXIST", f"topic {topic} does not exist")
        if count < partitions:
            raise TopicUnavailable(
                "E_TOPIC_NOT_EXIST", f"topic {topic} has no partition {partitions - 1} (of {count})"
            )

    async def _ask_coordinator(self, path: str, *, fine: str = "") -> None:
        """POST ``path`` to the coordinator; TopicUnavailable unless it answers 2xx (or
        an error whose message is ``fine``)."""
        coordinator = self.view.coordinator
        if coordinator is None:
            raise TopicUnavailable("E_TOPIC_NOT_EXIST", "no coordinator to create it")
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        url = f"{coordinator_url(coordinator, self.tls)}{path}"
        tls = self.tls.client if self.tls is not None and url.startswith("https:") else True
        try:
            async with self._http.post(url, ssl=tls) as resp:
                if resp.status >= 400:
                    text = await resp.text()
                    if fine and _error_message(text) == fine:
                        return
                    raise TopicUnavailable("E_TOPIC_NOT_EXIST", f"coordinator said {text.strip()}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TopicUnavailable("E_TOPIC_NOT_EXIST", f"coordinator unreachable: {exc}") from exc


def _error_message(text: str) -> str:
    """The ``message`` of a JSON error answer (``""`` for any other text)."""
    try:
        body = json.loads(text)
    except ValueError:
        return ""
    return str(body.get("message", "")) if isinstance(body, dict) else ""


def fresh_node_id(broadcast_address: str, rpc_port: int, tcp_port: int, node_id: int) -> str:
    """Youzan's node id form, ``ip:rpcport:tcpport:id``."""
    return f"{broadcast_address}:{rpc_port}:{tcp_port}:{node_id}"
