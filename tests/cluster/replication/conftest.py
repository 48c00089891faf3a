"""Fixtures for the replication link tests: real PartitionLogs in tmp_path, a LeaderFeed on
127.0.0.1:0 and FollowerFetch instances dialling it, all closed after each test.

``Cluster`` is a tiny stand-in for the owner (nsqd's ``Replication``): it holds the led
logs and their replica states (leader epoch, ISR), and records every committed offset the
states reported.
"""

from __future__ import annotations

import gc
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nsqpy.cluster.replica_follower import FollowerFetch
from nsqpy.cluster.replica_leader import LeaderFeed
from nsqpy.cluster.replica_state import FOLLOWER, LEADER, ReplicaState
from nsqpy.storage import PartitionLog
from nsqpy.storage.policy import SyncPolicy

TOPIC = "t"
CLUSTER = "c1"
SEGMENT = 4096  # small segments: rolls happen on both sides


def body(i: int) -> bytes:
    return (b"%06d;" % i) * (1 + i % 7)


def lead(log: PartitionLog, epoch: int, batches: int, per_batch: int = 10) -> None:
    """As a leader in ``epoch``: ``batches`` batches, each flushed."""
    log.begin_epoch(epoch)
    for _ in range(batches):
        base = log.high_watermark
        log.append_bodies([body(base + i) for i in range(per_batch)])
        log.flush()


def contents(log: PartitionLog) -> list[tuple[int, int, bytes]]:
    """(offset, epoch, body) of every record below flushed_offset."""
    out: list[tuple[int, int, bytes]] = []
    offset = log.low_watermark
    while offset < log.flushed_offset:
        records = log.read(offset, 1000, 1 << 20)
        if not records:
            break
        out += [(r.offset, r.epoch, r.body) for r in records]
        offset = records[-1].offset + 1
    return out


def assert_same(leader: PartitionLog, follower: PartitionLog) -> None:
    assert follower.high_watermark == leader.high_watermark
    assert contents(follower) == contents(leader)
    assert follower.epochs() == leader.epochs()


@dataclass
class Cluster:
    """The leader "L" and its followers, each log with its own ``ReplicaState``: the
    leader's states lead in ``epochs[p]`` with ISR ``isr(p)`` (all of it writable), a
    follower dialled with ``follower`` is a catch-up member until the ISR names it."""

    tmp: Path
    logs: dict[int, PartitionLog] = field(default_factory=dict)
    states: dict[int, ReplicaState] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)
    progress: list[tuple[str, int, int]] = field(default_factory=list)
    feed: LeaderFeed | None = None
    address: str = ""
    followers: list[FollowerFetch] = field(default_factory=list)
    opened: list[PartitionLog] = field(default_factory=list)
    skew: float = 0.0  # seconds the states' and the feed's clock is ahead of the real one

    def clock(self) -> float:
        """The clock injected into every state and the feed: ``advance`` moves it on."""
        return time.monotonic() + self.skew

    def advance(self, seconds: float) -> None:
        self.skew += seconds

    def log(self, name: str, sync: SyncPolicy | None = None) -> PartitionLog:
        log = PartitionLog(self.tmp / name, segment_bytes=SEGMENT, sync=sync or SyncPolicy())
        self.opened.append(log)
        return log

    def leader_log(
        self, partition: int = 0, epoch: int = 1, sync: SyncPolicy | None = None
    ) -> PartitionLog:
        log = self.logs[partition] = self.log(f"leader-{partition}", sync)
        self.epochs[partition] = epoch
        state = ReplicaState("L", TOPIC, partition, log, clock=self.clock)
        state.on_change = self._moved
        self.states[partition] = state
        state.assign(LEADER, epoch, ["L"], (), 1)
        return log

    def _moved(self, state: ReplicaState) -> None:
        seen = [c for t, p, c in self.progress if p == state.partition]
        if not seen or seen[-1] != state.committed:
            self.progress.append((state.topic, state.partition, state.committed))

    def isr(self, partition: int = 0) -> tuple[str, ...]:
        return self.states[partition].isr

    def set_isr(self, partition: int, nodes: Iterable[str]) -> None:
        """The ISR (the rest of the holders stay catch-up members); writable."""
        state = self.states[partition]
        isr = tuple(nodes)
        catchup = tuple(n for n in state.holders if n not in isr)
        state.assign(LEADER, state.epoch, isr, catchup, len(isr))

    async def start_feed(self, **options: Any) -> LeaderFeed:
        timeout = options.pop("timeout", None)
        if timeout is not None:
            options["timeout"] = timeout
            for state in self.states.values():
                state.timeout = timeout
        for name in ("window", "chunk"):
            if name in options:
                value = options.pop(name)
                for state in self.states.values():
                    setattr(state, name, value)
        feed = LeaderFeed(
            "L",
            CLUSTER,
            lambda t, p: self.states.get(p) if t == TOPIC else None,
            clock=self.clock,
            **options,  # type: ignore[arg-type]
        )
        host, port = await feed.start()
        self.feed, self.address = feed, f"{host}:{port}"
        return feed

    def follower(
        self, log: PartitionLog, node_id: str = "F1", *, partition: int = 0, **options: Any
    ) -> FollowerFetch:
        epoch = options.pop("epoch", None)
        epoch = int(epoch if epoch is not None else self.epochs[partition])
        leader = self.states.get(partition)
        if leader is not None and node_id not in leader.holders:  # a catch-up member
            leader.assign(
                LEADER, leader.epoch, leader.isr, (*leader.catchup, node_id), leader.replicator
            )
        state = ReplicaState(node_id, TOPIC, partition, log, clock=self.clock)
        state.assign(FOLLOWER, epoch)
        f = FollowerFetch(
            state,
            cluster_id=CLUSTER,
            leader=self.address,
            leader_epoch=epoch,
            **options,  # type: ignore[arg-type]
        )
        self.followers.append(f)
        f.start()
        return f

    async def close(self) -> None:
        for f in self.followers:
            await f.stop()
        if self.feed is not None:
            await self.feed.close()
        for log in self.opened:
            log.close()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        await c.close()
        gc.collect()  # finalizers run here, not inside a later import's ast.parse
