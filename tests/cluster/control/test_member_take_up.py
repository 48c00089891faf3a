"""A member given many partitions at once takes them up a pass at a time
(``TAKE_UP_PER_PASS`` each, the event loop free in between), a topic a client is waiting
for first; no partition is left behind. Pure: a recording host, a snapshot, no etcd."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from nsqpy.broker.health import StorageFailed
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.member import TAKE_UP_PER_PASS, Member, MemberSettings
from nsqpy.cluster.model import NodeInfo, Replicas, Snapshot, TopicMeta, Versioned


class Host:
    """A broker that only records what it is told to hold."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, int], tuple[str, int, int]] = {}

    def held_partitions(self) -> dict[tuple[str, int], tuple[str, int, int]]:
        return dict(self.held)

    def hold_partition(self, topic: str, count: int, number: int, role: str,
                       leader_epoch: int, ordered: bool) -> None:  # fmt: skip
        self.held[(topic, number)] = (role, leader_epoch, 0)

    def set_role(self, topic: str, number: int, role: str, leader_epoch: int) -> None:
        self.held[(topic, number)] = (role, leader_epoch, 0)

    def grow_topic(self, topic: str, partition_count: int) -> None:
        pass

    def set_retention(self, topic: str, days: int) -> None:
        pass

    def set_sync_every(self, topic: str, messages: int) -> None:
        pass

    def release_partition(self, topic: str, number: int) -> None:
        del self.held[(topic, number)]


class View:
    keys = Keys("take-up")


def me() -> NodeInfo:
    return NodeInfo("n0", "h", "127.0.0.1", 4150, 4151, "127.0.0.1:4250", "1", 0)


def snapshot(topics: dict[str, int], leader: str = "n1", epoch: int = 1) -> Snapshot:
    replicas = {
        (t, p): Versioned(Replicas(leader, ("n1", "n0"), leader_epoch=epoch), 10 + p)
        for t, count in topics.items()
        for p in range(count)
    }
    metas = {t: TopicMeta(count, 2, multipart=True) for t, count in topics.items()}
    return Snapshot(nodes={"n0": me()}, topics=metas, replicas=replicas, revision=100)


def member(host: Host) -> Member:
    etcd: Any = None  # (apply never calls etcd for partitions it follows)
    view: Any = View()
    return Member(etcd, view, me, host, MemberSettings())


def test_many_partitions_are_taken_up_a_pass_at_a_time() -> None:
    host = Host()
    m = member(host)
    snap = snapshot({"big": 100})
    passes = 0
    m.apply(snap)
    passes += 1
    assert len(host.held) == TAKE_UP_PER_PASS and m.more
    while m.more:
        m.apply(snap)
        passes += 1
    assert len(host.held) == 100 and passes == -(-100 // TAKE_UP_PER_PASS)
    m.apply(snap)
    assert not m.more and len(host.held) == 100


def test_the_topic_a_client_waits_for_is_taken_up_first() -> None:
    host = Host()
    m = member(host)
    m.apply(snapshot({"a_big": 100, "z_small": 1}), first="z_small")
    assert ("z_small", 0) in host.held and m.more


class FailingHost(Host):
    """A broker that cannot hold the partitions in ``broken`` (its disk says so)."""

    def __init__(self, broken: set[tuple[str, int]]) -> None:
        super().__init__()
        self.broken = broken
        self.tries: list[tuple[str, int]] = []

    def hold_partition(self, topic: str, count: int, number: int, role: str,
                       leader_epoch: int, ordered: bool) -> None:  # fmt: skip
        self.tries.append((topic, number))
        if (topic, number) in self.broken:
            raise StorageFailed(f"cannot create the directory of {topic}: No space left")
        super().hold_partition(topic, count, number, role, leader_epoch, ordered)


def test_a_partition_that_cannot_be_held_leaves_the_others_taken_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A partition whose take-up fails (a storage error of its own) does not stop the
    pass: every other partition, those after it too, is taken up. It is tried again each
    pass, its failure logged once, not at every try, and named in ``hold_failures`` until
    it is held."""
    host = FailingHost({("a_bad", 0)})
    m = member(host)
    snap = snapshot({"a_bad": 1, "b_good": 3})
    with caplog.at_level(logging.INFO, logger="nsqpy.cluster"):
        for _ in range(3):
            m.apply(snap)
    assert sorted(host.held) == [("b_good", 0), ("b_good", 1), ("b_good", 2)]
    assert host.tries.count(("a_bad", 0)) == 3, "tried again on each pass"
    assert "No space left" in m.hold_failures[("a_bad", 0)]
    lines = [r.getMessage() for r in caplog.records if "a_bad/0" in r.getMessage()]
    assert len(lines) == 2 and "cannot hold a_bad/0 here" in lines[1], lines  # (taking, failed)

    host.broken.clear()  # (the disk has room again)
    m.apply(snap)
    assert ("a_bad", 0) in host.held and not m.hold_failures


def test_a_partition_it_was_to_lead_and_could_not_is_reported_only_in_that_epoch() -> None:
    """A partition this node was to lead and could not take up is named in
    ``lead_failures`` with that leader epoch (``NodeInfo.failing``: the coordinator elects
    another ISR member); once another node leads it, while this one still cannot hold it,
    the entry goes: what is left is a follower's failure, not a leader's."""
    host = FailingHost({("a_bad", 0)})
    m = member(host)
    lease: Any = SimpleNamespace(lost=threading.Event())
    m._lease = lease  # (live: it may lead)
    m.apply(snapshot({"a_bad": 1, "b_good": 1}, leader="n0", epoch=4))
    assert m.lead_failures == {("a_bad", 0): 4}
    assert host.held == {("b_good", 0): ("leader", 4, 0)}

    m.apply(snapshot({"a_bad": 1, "b_good": 1}, leader="n1", epoch=5))
    assert m.lead_failures == {} and ("a_bad", 0) in m.hold_failures
