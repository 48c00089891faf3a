"""The coordinator against a real etcd: one lock holder among several lookupds, a new one
when it leaves, fenced writes, topic create/delete/update, and reconciling a dead leader."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from nsqpy.cluster.coordinator import (
    Coordinator,
    CoordinatorError,
    CoordinatorSettings,
    NotCoordinator,
)
from nsqpy.cluster.etcd import Etcd
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import (
    Change,
    LookupdInfo,
    NodeInfo,
    Replicas,
    TopicMeta,
    partition_name,
)
from nsqpy.cluster.view import ClusterView
from nsqpy.testing import eventually
from nsqpy.testing.etcd import EtcdCluster

from .conftest import bounded

SETTINGS = CoordinatorSettings(lease_ttl_s=2, tick_s=0.1, wait_s=3)


def node(n: int) -> NodeInfo:
    return NodeInfo(f"n{n}", "h", "127.0.0.1", 4150 + n, 4151 + n, f"127.0.0.1:{4250 + n}",
                    "1.3.0", 0)  # fmt: skip


async def lookupd(
    etcd: Etcd, keys: Keys, n: int, settings: CoordinatorSettings = SETTINGS
) -> tuple[Coordinator, ClusterView]:
    view = ClusterView(etcd, keys)
    await view.start()
    me = LookupdInfo(f"l{n}", "127.0.0.1", 4160 + n, 4161 + n)
    coordinator = Coordinator(etcd, view, me, f"127.0.0.1:{4161 + n}", settings)
    await coordinator.start()
    return coordinator, view


@pytest.fixture
async def pair(etcd: Etcd, keys: Keys) -> AsyncIterator[list[Coordinator]]:
    made = [await lookupd(etcd, keys, n) for n in range(2)]
    try:
        yield [c for c, _ in made]
    finally:
        for coordinator, view in made:
            await bounded(coordinator.stop())
            await bounded(view.stop())


async def register(etcd: Etcd, keys: Keys, *nodes: NodeInfo) -> None:
    for info in nodes:
        await etcd.put(keys.node(info.id), info.to_json())


async def test_exactly_one_coordinates_and_another_takes_over(pair: list[Coordinator]) -> None:
    await eventually(lambda: sum(c.leading for c in pair) == 1, timeout=5)
    leader = next(c for c in pair if c.leading)
    other = next(c for c in pair if c is not leader)
    await eventually(lambda: other.view.coordinator is not None, timeout=5)
    assert other.view.coordinator is not None
    assert other.view.coordinator.id == leader.me.id
    started = time.monotonic()
    await leader.stop()  # leaving revokes the lease: the other campaigns at once
    await eventually(lambda: other.leading, timeout=5)
    assert time.monotonic() - started < 5


async def test_create_places_every_partition_in_one_txn(
    pair: list[Coordinator], etcd: Etcd, keys: Keys
) -> None:
    await register(etcd, keys, node(0), node(1), node(2))
    await eventually(lambda: any(c.leading for c in pair), timeout=5)
    leader = next(c for c in pair if c.leading)
    await eventually(lambda: len(leader.view.snapshot().nodes) == 3, timeout=5)
    meta = await leader.create_topic("orders", TopicMeta(4, 2, multipart=True))
    snap = leader.view.snapshot()
    assert snap.topics["orders"].partition_num == 4 and meta.created_ns > 0
    parts = snap.partitions("orders")
    assert [p for p, _ in parts] == [0, 1, 2, 3]
    for _, versioned in parts:
        r = versioned.value
        assert len(set(r.isr)) == 2 and r.leader in r.isr and r.epoch == 1
    leaders = sorted(v.value.leader for _, v in parts)
    assert max(leaders.count(n) for n in set(leaders)) == 2  # spread 2/1/1 over 3 nodes
    # the same again is answered as created; another meta is refused
    await leader.create_topic("orders", TopicMeta(4, 2, multipart=True))
    with pytest.raises(CoordinatorError) as refused:
        await leader.create_topic("orders", TopicMeta(2, 1))
    assert (refused.value.status, refused.value.code) == (400, "TOPIC_ALREADY_EXIST")
    with pytest.raises(CoordinatorError) as too_many:
        await leader.create_topic("wide", TopicMeta(4, 2))  # 8 replicas on 3 nodes
    assert too_many.value.code.startswith("ErrType:9")
    assert "wide" not in leader.view.snapshot().topics


async def test_a_non_coordinator_cannot_write(
    pair: list[Coordinator], etcd: Etcd, keys: Keys
) -> None:
    await register(etcd, keys, node(0))
    await eventually(lambda: sum(c.leading for c in pair) == 1, timeout=5)
    other = next(c for c in pair if not c.leading)
    with pytest.raises(NotCoordinator):
        await other.create_topic("t", TopicMeta(1, 1))
    assert "t" not in other.view.snapshot().topics


async def test_a_deposed_coordinator_is_fenced(
    pair: list[Coordinator], etcd: Etcd, keys: Keys
) -> None:
    """A holder whose lock key went (its lease expired while it was paused) fails its
    writes, although it has not noticed yet: the fence is in every txn."""
    await register(etcd, keys, node(0))
    await eventually(lambda: sum(c.leading for c in pair) == 1, timeout=5)
    leader = next(c for c in pair if c.leading)
    for c in pair:  # nobody campaigns while we look
        assert c._task is not None
        c._task.cancel()
    await eventually(lambda: len(leader.view.snapshot().nodes) == 1, timeout=5)
    await etcd.delete(keys.coordinator)
    with pytest.raises(NotCoordinator):
        await leader.create_topic("late", TopicMeta(1, 1))
    assert await etcd.get(keys.topic_meta("late")) is None


async def test_delete_and_update(pair: list[Coordinator], etcd: Etcd, keys: Keys) -> None:
    await register(etcd, keys, node(0), node(1))
    await eventually(lambda: any(c.leading for c in pair), timeout=5)
    leader = next(c for c in pair if c.leading)
    await eventually(lambda: len(leader.view.snapshot().nodes) == 2, timeout=5)
    await leader.create_topic("gone", TopicMeta(2, 1))
    updated = await leader.update_topic("gone", syncdisk=100, retention_days=3)
    assert (updated.syncdisk, updated.retention_days) == (100, 3)
    await leader.delete_topic("gone")
    kvs, _ = await etcd.get_prefix(keys.topic_prefix("gone"))
    assert kvs == []
    with pytest.raises(CoordinatorError) as missing:
        await leader.delete_topic("gone")
    assert missing.value.status == 404


async def test_a_dead_leader_is_replaced_by_an_isr_member(
    pair: list[Coordinator], etcd: Etcd, keys: Keys
) -> None:
    lease = await etcd.lease(1)
    await etcd.put(keys.node("n0"), node(0).to_json(), lease)
    await register(etcd, keys, node(1))
    await etcd.put(keys.topic_meta("t"), TopicMeta(1, 2).to_json())
    await etcd.put(keys.replicas("t", 0), Replicas("n0", ("n0", "n1")).to_json())
    await eventually(lambda: any(c.leading for c in pair), timeout=5)
    leader = next(c for c in pair if c.leading)
    await lease.revoke()  # n0 dies

    def moved() -> bool:
        v = leader.view.snapshot().replicas.get(("t", 0))
        return v is not None and v.value.leader == "n1"

    await eventually(moved, timeout=5)
    r = leader.view.snapshot().replicas[("t", 0)].value
    assert (r.isr, r.catchup, r.epoch, r.leader_epoch) == (("n1",), ("n0",), 2, 2)
    # by this coordinator: its count goes up once etcd answered its txn, which may come
    # after the watch brought the change to the view (CI saw it so on a busy machine)
    await eventually(lambda: leader.changes_applied >= 1, timeout=5)
    await asyncio.sleep(0.3)  # more rounds: nothing else to do
    assert leader.view.snapshot().replicas[("t", 0)].value == r


async def test_the_rebalancer_weighs_an_even_cluster_again_only_after_a_change(
    etcd: Etcd, keys: Keys
) -> None:
    """Looked at every 50 ms, a cluster found even is not weighed again while etcd's
    revision stays where it was (at rest: no cost at all); a write makes it look again."""
    await register(etcd, keys, node(0))
    await etcd.put(keys.topic_meta("t"), TopicMeta(1, 1).to_json())
    await etcd.put(keys.replicas("t", 0), Replicas("n0", ("n0",)).to_json())
    settings = replace(SETTINGS, rebalance_interval_ns=50_000_000)
    coordinator, view = await lookupd(etcd, keys, 0, settings)
    try:
        # weighed once the view has the coordinator's own last write (its lock): a first look
        # before the watch brought it sees the revision move and rightly looks again
        await eventually(
            lambda: (
                view.coordinator is not None
                and coordinator.rebalance_looks >= 1
                and coordinator._balanced_revision == view.snapshot().revision
            ),
            timeout=5,
        )
        at = coordinator.rebalance_looks
        await asyncio.sleep(0.6)  # a dozen intervals, six ticks: nothing changed
        assert coordinator.rebalance_looks == at
        await register(etcd, keys, replace(node(0), version="1.3.1"))
        await eventually(lambda: coordinator.rebalance_looks > at, timeout=5)
    finally:
        await bounded(coordinator.stop())
        await bounded(view.stop())


async def test_the_coordinator_compacts_etcds_history_keeping_an_interval(
    tmp_path: Path, keys: Keys
) -> None:
    """Every ``compact_interval_ns`` the coordinator compacts etcd up to the revision it saw
    an interval before: history older than that is gone (a read at an old revision is
    refused as compacted), the last interval's is kept (watchers resume from it). An etcd
    of its own: compacting the session's would cut other tests' history."""
    with EtcdCluster(1, tmp_path / "etcd") as own:
        etcd = await Etcd.connect(own.endpoints)
        settings = replace(SETTINGS, compact_interval_ns=500_000_000)
        coordinator, view = await lookupd(etcd, keys, 0, settings)
        try:
            await eventually(lambda: coordinator.leading, timeout=5)
            for n in range(30):  # history to compact
                await etcd.put(keys.root + "churn", b"%d" % n)
            written = own.revision()
            await eventually(lambda: coordinator.compacted >= written, timeout=5)
            assert coordinator.compacted <= own.revision()
            with pytest.raises(RuntimeError, match="compacted"):
                own.get(keys.root + "churn", revision=written - 1)
            # the last interval's history is kept: a watch may start there
            kept = coordinator.compacted
            await etcd.put(keys.root + "churn", b"after")
            kv = await etcd.get(keys.root + "churn")
            assert kv is not None and kv.mod_revision > kept
        finally:
            await bounded(coordinator.stop())
            await bounded(view.stop())
            await asyncio.wait_for(asyncio.ensure_future(etcd.close()), 10)


async def test_the_elections_after_a_death_are_written_in_few_txns(
    pair: list[Coordinator], etcd: Etcd, keys: Keys
) -> None:
    """A node leading 150 partitions dies: every one gets a new leader, written in two txns
    (up to 100 compares each), not 150: one revision per txn, so each daemon's watch gets
    two events."""
    count = 150
    lease = await etcd.lease(1)
    await etcd.put(keys.node("n0"), node(0).to_json(), lease)
    await register(etcd, keys, node(1))
    await etcd.put(keys.topic_meta("t"), TopicMeta(count, 2, multipart=True).to_json())
    for p in range(count):
        await etcd.put(keys.replicas("t", p), Replicas("n0", ("n0", "n1")).to_json())
    await eventually(lambda: any(c.leading for c in pair), timeout=5)
    leader = next(c for c in pair if c.leading)
    await eventually(lambda: len(leader.view.snapshot().replicas) == count, timeout=5)
    before = leader.view.snapshot().revision
    await lease.revoke()  # n0 dies

    def moved() -> bool:
        found = leader.view.snapshot().replicas
        return all(found[("t", p)].value.leader == "n1" for p in range(count))

    await eventually(moved, timeout=10)
    after = leader.view.snapshot().revision
    # the lease's revocation (one revision), then the elections: two txns
    assert after - before <= 3, f"{after - before} revisions for {count} elections"


async def test_a_batch_with_one_stale_change_writes_the_others(
    pair: list[Coordinator], etcd: Etcd, keys: Keys
) -> None:
    """A batch whose compares do not all hold (one partition's key changed since the
    decision) is written change by change: every other change is written, the stale one
    is not."""
    await register(etcd, keys, node(0), node(1))
    revisions = {}
    for p in range(5):
        revisions[p] = await etcd.put(keys.replicas("t", p), Replicas("n0", ("n0",)).to_json())
    await eventually(lambda: any(c.leading for c in pair), timeout=5)
    leader = next(c for c in pair if c.leading)
    await etcd.put(keys.replicas("t", 2), Replicas("n0", ("n0",), epoch=5).to_json())
    new = Replicas("n1", ("n1", "n0"), epoch=2, leader_epoch=2)
    changes = [Change("t", p, revisions[p], new, "test") for p in range(5)]
    assert await leader._write_changes(changes) == 4
    for p in range(5):
        kv = await etcd.get(keys.replicas("t", p))
        assert kv is not None
        assert Replicas.from_json(kv.value).epoch == (5 if p == 2 else 2)


async def test_a_forced_recovery_elects_the_live_replica_with_the_longest_log(
    pair: list[Coordinator], etcd: Etcd, keys: Keys
) -> None:
    """No ISR member live: forced recovery elects, of the live holders, the one whose
    nsqd reports the longest log of the partition, alone in a new leader epoch; the other
    holders, the dead ISR member among them, become catch-up members; the answer is its end
    (where the loss starts). Refused while an ISR member is live."""
    name = partition_name("t", 0)
    await register(etcd, keys, replace(node(1), ends={name: (1, 5)}),
                   replace(node(2), ends={name: (1, 7)}))  # fmt: skip
    await etcd.put(keys.topic_meta("t"), TopicMeta(1, 3).to_json())
    dead_isr = Replicas("n0", ("n0",), ("n1", "n2"))  # (n0 never registered: dead)
    await etcd.put(keys.replicas("t", 0), dead_isr.to_json())
    await eventually(lambda: any(c.leading for c in pair), timeout=5)
    leader = next(c for c in pair if c.leading)
    await eventually(lambda: len(leader.view.snapshot().nodes) == 2, timeout=5)
    await eventually(lambda: ("t", 0) in leader.view.snapshot().replicas, timeout=5)
    new, end = await leader.recover_partition("t", 0)
    assert (new.leader, new.isr, new.catchup, end) == ("n2", ("n2",), ("n0", "n1"), 7)
    assert (new.epoch, new.leader_epoch) == (dead_isr.epoch + 1, dead_isr.leader_epoch + 1)
    await eventually(lambda: leader.view.snapshot().replicas[("t", 0)].value == new, timeout=5)
    with pytest.raises(CoordinatorError) as refused:  # (n2 leads now: nothing to force)
        await leader.recover_partition("t", 0)
    assert (refused.value.status, refused.value.code) == (400, "E_ISR_ALIVE")
