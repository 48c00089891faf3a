"""A cluster as etcd holds it, kept current by one watch: ``ClusterView``.

Every daemon of a cluster (nsqd and nsqlookupd alike) reads the cluster through one of
these: the keys under ``/nsqpy/<cluster-id>/`` loaded once, then followed by a watch from
the next revision (``nsqpy.cluster.etcd`` resumes it after a lost connection; when etcd
has compacted past it, the view loads everything again). ``snapshot()`` is the
``Snapshot`` the coordinator's pure decisions (``nsqpy.cluster.decisions``) and the
lookupd's answers are made from; ``wait_until`` lets a caller wait for a state (a topic
created, a leader elected) with a deadline. A value that does not parse is logged once and
left out (a garbage key must not stop a cluster). Imports asyncio and the cluster
package; never a daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import cast

from nsqpy.cluster.etcd import KV, Compacted, Etcd, EtcdUnavailable, Event
from nsqpy.cluster.keys import Keys, ParsedKey
from nsqpy.cluster.model import (
    CoordinatorInfo,
    LookupdInfo,
    NodeInfo,
    Replicas,
    Snapshot,
    TopicMeta,
    Versioned,
)

log = logging.getLogger("nsqpy.cluster")

RETRY_S = 0.5  # after etcd could not be read at all


class ClusterView:
    """The keys of one cluster, current to ``revision``."""

    def __init__(self, etcd: Etcd, keys: Keys) -> None:
        self.etcd = etcd
        self.keys = keys
        self.revision = 0
        self._kvs: dict[str, KV] = {}
        self._snapshot: Snapshot | None = None
        self._bad: set[tuple[str, int]] = set()  # (key, mod_revision) already logged
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self.loaded = asyncio.Event()
        self.listeners: list[Callable[[], None]] = []  # called after each change
        # What the keys say, kept as each event comes (each value parsed once, when it
        # comes): a snapshot copies these, it does not parse or walk every key again.
        self._where: dict[str, ParsedKey] = {}  # key -> what it is, for those kept below
        self._nodes: dict[str, NodeInfo] = {}
        self._node_revisions: dict[str, int] = {}
        self._topics: dict[str, TopicMeta] = {}
        self._replicas: dict[tuple[str, int], Versioned[Replicas]] = {}
        self._removing: set[str] = set()
        # Beside the snapshot: the live lookupds and the lock's holder.
        self._lookupds: dict[str, LookupdInfo] = {}
        self._coordinator: CoordinatorInfo | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the cluster's keys and follow them; returns once loaded."""
        await self._load()
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _load(self) -> None:
        kvs, revision = await self.etcd.get_prefix(self.keys.root)
        self._kvs = {kv.key: kv for kv in kvs}
        self._where.clear()
        for kept in (self._nodes, self._node_revisions, self._topics, self._replicas,
                     self._removing, self._lookupds):  # fmt: skip
            kept.clear()
        self._coordinator = None
        for kv in kvs:
            self._put(kv)
        self.revision = revision
        self._snapshot = None
        self.loaded.set()
        await self._notify()

    async def _follow(self) -> None:
        while True:
            try:
                async for events in self.etcd.watch_prefix(self.keys.root, self.revision + 1):
                    self._apply(events)
                    await self._notify()
            except Compacted:
                log.info("cluster view: etcd compacted past revision %d; reloading", self.revision)
            except EtcdUnavailable as exc:
                log.info("cluster view: etcd unavailable (%s); retrying", exc)
                await asyncio.sleep(RETRY_S)
            try:
                await self._load()
            except EtcdUnavailable:
                await asyncio.sleep(RETRY_S)

    def _apply(self, events: list[Event]) -> None:
        for event in events:
            kv = event.kv
            if event.kind == "put":
                self._kvs[kv.key] = kv
                self._put(kv)
            else:
                self._kvs.pop(kv.key, None)
                self._drop(kv.key)
            self.revision = max(self.revision, kv.mod_revision)
        self._snapshot = None

    def _drop(self, key: str) -> None:
        """Forget what ``key`` said (deleted, or about to say something else)."""
        match self._where.pop(key, None):
            case ("node", node_id):
                self._nodes.pop(node_id, None)
                self._node_revisions.pop(node_id, None)
            case ("removing", node_id):
                self._removing.discard(node_id)
            case ("lookupd", lookupd_id):
                self._lookupds.pop(lookupd_id, None)
            case ("coordinator",):
                self._coordinator = None
            case ("meta", topic):
                self._topics.pop(topic, None)
            case ("replicas", topic, p):
                self._replicas.pop((topic, p), None)

    def _put(self, kv: KV) -> None:
        """Keep what ``kv`` says; a value that does not parse is logged once and left out."""
        self._drop(kv.key)
        parsed = self.keys.parse(kv.key)
        if parsed is None:
            return
        try:
            match parsed:
                case ("node", node_id):
                    self._nodes[node_id] = cast(NodeInfo, _PARSERS["node"](kv.value))
                    self._node_revisions[node_id] = kv.mod_revision
                case ("removing", node_id):
                    self._removing.add(node_id)
                case ("lookupd", lookupd_id):
                    self._lookupds[lookupd_id] = cast(LookupdInfo, _PARSERS["lookupd"](kv.value))
                case ("coordinator",):
                    self._coordinator = cast(CoordinatorInfo, _PARSERS["coordinator"](kv.value))
                case ("meta", topic):
                    self._topics[topic] = cast(TopicMeta, _PARSERS["meta"](kv.value))
                case ("replicas", topic, p):
                    value = cast(Replicas, _PARSERS["replicas"](kv.value))
                    self._replicas[(topic, p)] = Versioned(value, kv.mod_revision)
                case _:
                    return
        except ValueError as exc:
            if (kv.key, kv.mod_revision) not in self._bad:
                self._bad.add((kv.key, kv.mod_revision))
                log.warning("cluster view: ignoring %s: %s", kv.key, exc)
            return
        self._where[kv.key] = parsed

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:
                log.exception("cluster view listener failed")

    # -- reading ---------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The cluster as of ``revision`` (built once per change)."""
        if self._snapshot is None:
            self._snapshot = self._build()
        return self._snapshot

    @property
    def lookupds(self) -> dict[str, LookupdInfo]:
        """The live nsqlookupd of the cluster, by id (as of ``revision``)."""
        return self._lookupds

    @property
    def coordinator(self) -> CoordinatorInfo | None:
        """Who holds the coordinator lock (as of ``revision``)."""
        return self._coordinator

    def kv(self, key: str) -> KV | None:
        return self._kvs.get(key)

    async def wait_until(self, ready: Callable[[Snapshot], bool], timeout: float) -> bool:
        """Wait until ``ready(snapshot)`` holds (True) or ``timeout`` seconds pass (False)."""
        deadline = time.monotonic() + timeout
        async with self._changed:
            while not ready(self.snapshot()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await self._changed.wait()
        return True

    def _build(self) -> Snapshot:
        return Snapshot(
            nodes=dict(self._nodes), topics=dict(self._topics), replicas=dict(self._replicas),
            revision=self.revision, node_revisions=dict(self._node_revisions),
            removing=frozenset(self._removing),
        )  # fmt: skip


_PARSERS: dict[str, Callable[[bytes], object]] = {
    "node": NodeInfo.from_json,
    "lookupd": LookupdInfo.from_json,
    "coordinator": CoordinatorInfo.from_json,
    "meta": TopicMeta.from_json,
    "replicas": Replicas.from_json,
}
