"""The nemesis of a Jepsen run: does and undoes each kind of fault of ``schedule.KINDS``
on the run's servers (``servers.Cluster``) and network (``netns.Network``). What only the
running cluster knows (the leader of a partition, the coordinating lookupd) is looked up
when the fault starts; ``start`` says what it did, for the history.
"""

from __future__ import annotations

from typing import Any

from nsqpy.jepsen.netns import Network
from nsqpy.jepsen.schedule import Step
from nsqpy.jepsen.servers import Cluster


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
            self.net.cut(p["nodes"], ["e1"])
            return f"{'+'.join(p['nodes'])} cut from etcd", None
        if kind == "kill":
            host = self._target(p)
            self.cluster.kill(host)
            self.killed.add(host)
            return f"SIGKILL {host}", host
        if kind == "pause":
            host = self._target(p)
            self.cluster.pause(host)
            return f"SIGSTOP {host}", host
        if kind == "lossy":
            what = self.net.lossy(
                p["node"], int(p["loss"]), int(p["delay_ms"]), int(p["rate_kbit"])
            )
            return f"{p['node']}: {what}", None
        if kind == "disk-full":
            self.cluster.disks[p["node"]].fill()
            return f"{p['node']}'s disk filled", None
        raise ValueError(f"unknown nemesis {kind!r}")

    def stop(self, step: Step, state: Any) -> None:
        kind = step.kind
        if kind == "kill":
            self.cluster.restart(state)
            self.killed.discard(state)
        elif kind == "pause":
            self.cluster.resume(state)
        elif kind == "disk-full":
            self.cluster.disks[step.params["node"]].free()
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
