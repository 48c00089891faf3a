"""The nemesis of a Jepsen run: does and undoes each kind of fault of ``schedule.KINDS``
on the run's servers (``servers.Cluster``) and network (``netns.Network``). What only the
running cluster knows (the leader of a partition and its follower, the coordinating
lookupd) is looked up when the fault starts; ``start`` says what it did, for the history.

Most faults are one change at the start and its undoing at the end. The
``leader-and-follower-down`` fault has moves in between (``moves``: at ``second_at`` the
second replica goes down, at ``back_at`` one comes back); each move says what it did, and
the harness writes it to the history as a nemesis ``move``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nsqpy.jepsen.layout import ETCD_HOSTS, R2_TOPIC
from nsqpy.jepsen.netns import Network
from nsqpy.jepsen.schedule import DOUBLE_FAULT, Step
from nsqpy.jepsen.servers import Cluster


def etcd_minority_sides(params: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The two sides of an ``etcd-minority`` cut: one etcd member with the minority of the
    nsqd (which then reach no other member), against the other etcd members."""
    member = str(params["member"])
    return [member, *params["nodes"]], [h for h in ETCD_HOSTS if h != member]


@dataclass
class DoubleFault:
    """What a ``leader-and-follower-down`` step did so far: the partition's ``leader``
    and ``follower`` when it started, and how each replica is down now (kill or pause)."""

    partition: int
    leader: str
    follower: str
    down: dict[str, str] = field(default_factory=dict)

    def host(self, role: str) -> str:
        return self.leader if role == "leader" else self.follower


class Nemesis:
    """Does and undoes each kind of fault of ``schedule.KINDS`` on the run's cluster."""

    def __init__(self, cluster: Cluster, net: Network) -> None:
        self.cluster = cluster
        self.net = net
        self.killed: set[str] = set()

    def _target(self, params: dict[str, Any]) -> str:
        if "leader_of" in params:
            return self.cluster.leader_of(int(params["leader_of"])) or self.cluster.nodes[0]
        return str(params["node"])

    def start(self, step: Step) -> tuple[str, Any]:
        """Begin the fault; what it did (for the history) and what ``stop`` needs."""
        p, kind = step.params, step.kind
        if kind == "halves":
            self.net.cut(p["a"], p["b"])
            return f"{'+'.join(p['a'])} | {'+'.join(p['b'])}", None
        if kind == "isolate-leader":
            host = self.cluster.leader_of(int(p["partition"])) or self.cluster.nodes[0]
            self.net.isolate(host, keep=["c"])
            return f"{host} (leader of partition {p['partition']}) cut from every server", host
        if kind == "isolate-coordinator":
            host = self.cluster.coordinator() or "l1"
            self.net.isolate(host, keep=["c"])
            return f"{host} (coordinator) cut from every server", host
        if kind == "etcd-minority":
            minority, majority = etcd_minority_sides(p)
            self.net.cut(minority, majority)
            return f"{'+'.join(minority)} | {'+'.join(majority)} (etcd's quorum)", None
        if kind in ("kill", "pause"):
            host = self._target(p)
            self._down(host, kind)
            return f"{'SIGKILL' if kind == 'kill' else 'SIGSTOP'} {host}", host
        if kind == "lossy":
            what = self.net.lossy(
                p["node"], int(p["loss"]), int(p["delay_ms"]), int(p["rate_kbit"])
            )
            return f"{p['node']}: {what}", None
        if kind == "disk-full":
            self.cluster.disks[p["node"]].fill()
            return f"{p['node']}'s disk filled", None
        if kind == DOUBLE_FAULT:
            return self._double_start(p)
        raise ValueError(f"unknown nemesis {kind!r}")

    def moves(self, step: Step) -> list[tuple[float, str]]:
        """The moves of ``step`` between its start and its stop: (seconds after its
        start, move), in time order."""
        if step.kind != DOUBLE_FAULT:
            return []
        return [(float(step.params["second_at"]), "second"), (float(step.params["back_at"]), "back")]  # fmt: skip

    def move(self, step: Step, state: Any, move: str) -> str:
        """Make ``move`` of ``step``; what it did, for the history."""
        assert isinstance(state, DoubleFault)
        p = step.params
        if move == "second":
            return self._double_second(p, state)
        host = state.host(str(p["back_first"]))
        return self._up(host, state)

    def stop(self, step: Step, state: Any) -> None:
        kind = step.kind
        if kind in ("kill", "pause"):
            self._up(state)
        elif kind == "disk-full":
            self.cluster.disks[step.params["node"]].free()
        elif kind == DOUBLE_FAULT:
            for host in list(state.down):
                self._up(host, state)
        else:
            self.net.heal()

    def heal_all(self) -> None:
        self.net.heal()
        for host in list(self.cluster.paused):
            self.cluster.resume(host)
        for host in list(self.killed):
            self.cluster.restart(host)
            self.killed.discard(host)
        for disk in self.cluster.disks.values():
            disk.free()

    # -- taking an nsqd down and up -----------------------------------------------------------

    def _down(self, host: str, how: str) -> None:
        if how == "kill":
            self.cluster.kill(host)
            self.killed.add(host)
        else:
            self.cluster.pause(host)

    def _up(self, host: str, state: DoubleFault | None = None) -> str:
        """``host`` started again (killed) or resumed (paused); what was done."""
        if state is not None:
            state.down.pop(host, None)
        if host in self.killed:
            self.cluster.restart(host)
            self.killed.discard(host)
            return f"{host} started again"
        self.cluster.resume(host)
        return f"SIGCONT {host}"

    # -- leader-and-follower-down -------------------------------------------------------------

    def _where(self, partition: int) -> str:
        found = self.cluster.partition(R2_TOPIC, partition)
        return found.describe() if found is not None else "no leader known"

    def _double_start(self, p: dict[str, Any]) -> tuple[str, DoubleFault]:
        partition = int(p["partition"])
        found = self.cluster.partition(R2_TOPIC, partition)
        nodes = self.cluster.nodes
        leader = found.leader if found is not None else nodes[0]
        others = [h for h in (found.replicas if found is not None else ()) if h != leader]
        follower = others[0] if others else next(h for h in nodes if h != leader)
        state = DoubleFault(partition, leader, follower)
        where = found.describe() if found is not None else "no leader known"
        first = state.host(str(p["first"]))
        how = str(p["follower_down"]) if first == follower else "kill"
        self._down(first, how)
        state.down[first] = how
        signal = "SIGKILL" if how == "kill" else "SIGSTOP"
        return (
            f"{R2_TOPIC}/{partition} ({where}): {signal} {first}, its {p['first']}", state
        )  # fmt: skip

    def _double_second(self, p: dict[str, Any], state: DoubleFault) -> str:
        """The other replica down: the follower (by ``follower_down``), or the leader
        (SIGKILL) — the partition's leader now when lookupd names a live one."""
        where = self._where(state.partition)
        if p["first"] == "leader":
            host, how = state.follower, str(p["follower_down"])
        else:
            now = self.cluster.leader_of(state.partition, R2_TOPIC)
            host = now if now is not None and now not in state.down else state.leader
            state.leader, how = host, "kill"
        self._down(host, how)
        state.down[host] = how
        signal = "SIGKILL" if how == "kill" else "SIGSTOP"
        return f"{R2_TOPIC}/{state.partition} ({where}): {signal} {host} too"
