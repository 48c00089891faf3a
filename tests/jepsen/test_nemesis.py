"""The nemesis's operations on a recording stand-in for the cluster and the network: what
each fault does to whom, in which order, and that everything is back up at its end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import pytest

from nsqpy.jepsen.layout import R2_TOPIC
from nsqpy.jepsen.nemesis import Nemesis
from nsqpy.jepsen.netns import Network
from nsqpy.jepsen.schedule import DOUBLE_FAULT, Step
from nsqpy.jepsen.servers import Cluster, PartitionHosts


@dataclass
class FakeCluster:
    """Three nsqd; partition 1 of jepsen-r2 led by n2 with n3 following, until told."""

    nodes: list[str] = field(default_factory=lambda: ["n1", "n2", "n3"])
    paused: set[str] = field(default_factory=set)
    dead: set[str] = field(default_factory=set)
    disks: dict[str, object] = field(default_factory=dict)  # no disk-full here
    calls: list[tuple[str, str]] = field(default_factory=list)
    r2: PartitionHosts | None = field(
        default_factory=lambda: PartitionHosts("n2", ("n2", "n3"), ())
    )

    def partition(self, topic: str, partition: int) -> PartitionHosts | None:
        assert (topic, partition) == (R2_TOPIC, 1)
        return self.r2

    def leader_of(self, partition: int, topic: str = "jepsen") -> str | None:
        found = self.partition(topic, partition)
        return found.leader if found is not None else None

    def kill(self, host: str) -> None:
        self.calls.append(("kill", host))
        self.paused.discard(host)
        self.dead.add(host)

    def restart(self, host: str) -> None:
        self.calls.append(("restart", host))
        self.dead.discard(host)

    def pause(self, host: str) -> None:
        self.calls.append(("pause", host))
        self.paused.add(host)

    def resume(self, host: str) -> None:
        if host in self.paused:
            self.calls.append(("resume", host))
            self.paused.discard(host)


@dataclass
class FakeNet:
    cuts: list[tuple[list[str], list[str]]] = field(default_factory=list)
    healed: int = 0

    def cut(self, a: list[str], b: list[str]) -> None:
        self.cuts.append((list(a), list(b)))

    def heal(self) -> None:
        self.healed += 1


def nemesis() -> tuple[Nemesis, FakeCluster, FakeNet]:
    cluster, net = FakeCluster(), FakeNet()
    return Nemesis(cast(Cluster, cluster), cast(Network, net)), cluster, net


def double(first: str, follower_down: str, back_first: str) -> Step:
    params = {"partition": 1, "first": first, "follower_down": follower_down,
              "second_at": 6.5, "back_at": 9.0, "back_first": back_first}  # fmt: skip
    return Step(0, 10.0, DOUBLE_FAULT, 13.0, 8.0, params)


def play(n: Nemesis, cluster: FakeCluster, step: Step, lead_after_first: str | None) -> list[str]:
    """The step from start to stop; what each of its parts said."""
    said: list[str] = []
    detail, state = n.start(step)
    said.append(detail)
    for _, move in n.moves(step):
        if move == "second" and lead_after_first is not None:  # the election that followed
            cluster.r2 = PartitionHosts(lead_after_first, (lead_after_first,), ())
        said.append(n.move(step, state, move))
    n.stop(step, state)
    return said


def test_etcd_minority_cuts_one_member_and_the_minoritys_nodes_from_the_other_two() -> None:
    n, _, net = nemesis()
    step = Step(0, 8.0, "etcd-minority", 7.0, 8.0, {"member": "e2", "nodes": ["n3"]})
    detail, state = n.start(step)
    assert net.cuts == [(["e2", "n3"], ["e1", "e3"])]
    assert detail == "e2+n3 | e1+e3 (etcd's quorum)"
    n.stop(step, state)
    assert net.healed == 1


def test_follower_paused_then_leader_killed_then_both_back() -> None:
    n, cluster, _ = nemesis()
    step = double("follower", "pause", "follower")
    assert n.moves(step) == [(6.5, "second"), (9.0, "back")]
    said = play(n, cluster, step, lead_after_first=None)
    assert cluster.calls == [("pause", "n3"), ("kill", "n2"), ("resume", "n3"), ("restart", "n2")]
    assert said[0] == f"{R2_TOPIC}/1 (leader n2, ISR [n2 n3]): SIGSTOP n3, its follower"
    assert said[1].endswith("SIGKILL n2 too")
    assert said[2:] == ["SIGCONT n3"]
    assert not cluster.paused and not cluster.dead and not n.killed


def test_leader_killed_then_the_new_leader_alone_killed_too_then_the_old_leader_back() -> None:
    n, cluster, _ = nemesis()
    said = play(n, cluster, double("leader", "kill", "leader"), lead_after_first="n3")
    assert cluster.calls == [("kill", "n2"), ("kill", "n3"), ("restart", "n2"), ("restart", "n3")]
    assert said[0].endswith("SIGKILL n2, its leader")
    assert said[1] == f"{R2_TOPIC}/1 (leader n3, ISR [n3]): SIGKILL n3 too"  # it led alone
    assert said[2] == "n2 started again"
    assert not cluster.dead and not n.killed


def test_without_an_answer_from_lookupd_the_fault_still_takes_two_nodes_down() -> None:
    n, cluster, _ = nemesis()
    cluster.r2 = None
    play(n, cluster, double("leader", "pause", "follower"), lead_after_first=None)
    assert cluster.calls == [("kill", "n1"), ("pause", "n2"), ("resume", "n2"), ("restart", "n1")]


@pytest.mark.parametrize("first", ["leader", "follower"])
def test_heal_all_in_the_middle_of_the_fault_brings_both_back(first: str) -> None:
    n, cluster, net = nemesis()
    step = double(first, "pause", "leader")
    _, state = n.start(step)
    n.move(step, state, "second")
    assert len(cluster.paused | cluster.dead) == 2
    n.heal_all()
    assert not cluster.paused and not cluster.dead and not n.killed and net.healed == 1


def test_moves_of_a_one_change_fault_are_none() -> None:
    n, _, _ = nemesis()
    assert n.moves(Step(0, 1.0, "kill", 7.0, 8.0, {"node": "n1"})) == []
