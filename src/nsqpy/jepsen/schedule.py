"""What a Jepsen run does and when: profiles, and the nemesis schedule a seed makes.

A schedule is a list of ``Step``: at ``at`` seconds after the run's start, fault ``kind``
for ``duration`` seconds, then ``rest`` seconds healed before the next. Everything random
in it (the order of the kinds, durations, which halves, which node, how lossy) comes from
``random.Random(seed)``, so the same seed and profile give the same schedule: a failing run
is replayed with its seed. What can only be known when the step runs (which node leads
the partition, which lookupd coordinates) is resolved then and written to the history.

Kinds (``KINDS``):

- ``halves``: the server hosts (nsqd, nsqlookupd, etcd) split into two random halves
  that cannot reach each other (clients reach both).
- ``isolate-leader``: the node leading partition ``p`` cut from every other server (the
  other nsqd, nsqlookupd, etcd), while clients still reach it: the split brain, an old
  leader that clients keep publishing to after it lost its lease.
- ``isolate-coordinator``: the coordinating nsqlookupd cut from every other server.
- ``etcd-minority``: one etcd member (of three) cut from the other two, together with a
  minority of the nsqd, which reach only that member: etcd keeps its quorum on the other
  side, the minority's nsqd lose their leases (everything else reaches all three).
- ``kill``: SIGKILL of an nsqd (the leader of ``p``, or a node), started again at the end.
- ``pause``: SIGSTOP of an nsqd (the leader of ``p``, or a node), SIGCONT at the end:
  a long GC pause.
- ``lossy``: an nsqd loses a share of the packets it receives and sends slowly.
- ``disk-full``: an nsqd's disk is filled, freed at the end.
- ``leader-and-follower-down``: both replicas of a partition of the ``jepsen-r2`` topic
  (replicator=2) down, one after the other: the follower (SIGKILL or SIGSTOP) then the
  leader (SIGKILL), or the leader then the follower, which has meanwhile led alone (an ISR
  of itself only). Then one comes back, alone for a while (no one may lead with a log that
  misses acknowledged values), then the other. Its timeline is in its params:
  ``second_at`` and ``back_at`` seconds after its start, and the step's end.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from nsqpy.jepsen.layout import ETCD_HOSTS, R2_PARTITIONS, node_hosts, server_hosts

DOUBLE_FAULT = "leader-and-follower-down"
KINDS = (
    "halves",
    "isolate-leader",
    "isolate-coordinator",
    "etcd-minority",
    "kill",
    "pause",
    "lossy",
    "disk-full",
    DOUBLE_FAULT,
)


@dataclass(frozen=True)
class Profile:
    """How long and how hard a run is."""

    name: str
    cycles: int  # steps of each kind
    fault: tuple[float, float]  # seconds a fault lasts (uniform in the range)
    rest: tuple[float, float]  # seconds healed after it
    warmup: float  # seconds of plain traffic before the first fault
    nodes: int = 3  # nsqd
    partitions: int = 2
    producer_rate: float = 60.0  # values a second, per producer
    drain: float = 60.0  # seconds the consumers get, at most, to read what is left
    kinds: tuple[str, ...] = KINDS
    # leader-and-follower-down: seconds with one replica down (past the 5 s replication
    # timeout, or the 3 s lease and an election), then both, then one back alone (past
    # the lease: time enough to elect it, if the coordinator wrongly would)
    one_down: tuple[float, float] = (6.0, 8.0)
    both_down: tuple[float, float] = (2.0, 3.0)
    one_back: tuple[float, float] = (3.5, 4.5)


PROFILES = {
    # every kind once: about two minutes in all, for CI (most recoveries take under 3 s;
    # one slower than a rest, etcd-minority's on a loaded machine, overlaps the next fault)
    "short": Profile(
        "short",
        cycles=1,
        fault=(5.5, 7.5),
        rest=(4.0, 5.5),
        warmup=8.0,
        one_down=(6.0, 7.0),
        both_down=(2.0, 2.5),
        one_back=(3.5, 4.0),
    ),
    # at least 30 minutes, ten cycles of every kind
    "long": Profile(
        "long",
        cycles=10,
        fault=(9.0, 17.0),
        rest=(8.0, 12.0),
        warmup=15.0,
        drain=120.0,
        one_down=(6.0, 10.0),
        both_down=(2.0, 5.0),
        one_back=(3.5, 6.0),
    ),
}


@dataclass(frozen=True)
class Step:
    index: int
    at: float
    kind: str
    duration: float
    rest: float
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _params(kind: str, rng: random.Random, nodes: list[str], servers: list[str],
            partitions: int) -> dict[str, Any]:  # fmt: skip
    """The random choices of a step of ``kind`` (but ``DOUBLE_FAULT``'s: ``_double``)."""
    if kind == "halves":
        order = servers[:]
        rng.shuffle(order)
        half = len(order) // 2
        return {"a": sorted(order[:half]), "b": sorted(order[half:])}
    if kind == "isolate-leader":
        return {"partition": rng.randrange(partitions)}
    if kind == "etcd-minority":
        member = rng.choice(ETCD_HOSTS)
        return {"member": member, "nodes": sorted(rng.sample(nodes, (len(nodes) - 1) // 2))}
    if kind in ("kill", "pause"):
        if rng.random() < 0.5:
            return {"leader_of": rng.randrange(partitions)}
        return {"node": rng.choice(nodes)}
    if kind == "lossy":
        return {"node": rng.choice(nodes), "loss": rng.randint(10, 30),
                "delay_ms": rng.choice((50, 100, 200)), "rate_kbit": rng.choice((500, 1000, 2000))}  # fmt: skip
    if kind == "disk-full":
        return {"node": rng.choice(nodes)}
    return {}


def _double(rng: random.Random, profile: Profile) -> tuple[dict[str, Any], float]:
    """A ``DOUBLE_FAULT`` step's choices, and its duration: which partition of the
    replicator=2 topic, which replica goes down first, how the follower goes down, when the
    second goes down (``second_at``), when the one of ``back_first`` comes back
    (``back_at``); the other comes back at the step's end."""
    second_at = rng.uniform(*profile.one_down)
    back_at = second_at + rng.uniform(*profile.both_down)
    end = back_at + rng.uniform(*profile.one_back)
    params = {
        "partition": rng.randrange(R2_PARTITIONS),
        "first": rng.choice(("follower", "leader")),
        "follower_down": rng.choice(("kill", "pause")),
        "second_at": round(second_at, 2),
        "back_at": round(back_at, 2),
        "back_first": rng.choice(("follower", "leader")),
    }
    return params, round(end, 2)


def make_schedule(profile: Profile, seed: int, nodes: int | None = None) -> list[Step]:
    """The steps of a run of ``profile`` with ``seed`` over ``nodes`` nsqd (default: the
    profile's); see the module docstring."""
    rng = random.Random(seed)
    names = node_hosts(nodes or profile.nodes)
    servers = server_hosts(len(names))
    kinds = [kind for kind in profile.kinds for _ in range(profile.cycles)]
    rng.shuffle(kinds)
    steps: list[Step] = []
    at = profile.warmup
    for index, kind in enumerate(kinds):
        duration = round(rng.uniform(*profile.fault), 2)
        rest = round(rng.uniform(*profile.rest), 2)
        if kind == DOUBLE_FAULT:
            params, duration = _double(rng, profile)
        else:
            params = _params(kind, rng, names, servers, profile.partitions)
        steps.append(Step(index, round(at, 2), kind, duration, rest, params))
        at += duration + rest
    return steps


def schedule_length(steps: list[Step], profile: Profile) -> float:
    """Seconds from the run's start to the end of the last step's rest."""
    if not steps:
        return profile.warmup
    last = steps[-1]
    return last.at + last.duration + last.rest
