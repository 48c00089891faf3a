"""A deterministic simulation of the control plane around the pure decisions (nsqpy's
tests run its seeded schedules; ``bench/scale_sim.py`` runs ``run_scale``, a cluster of a
hundred nodes).

An in-memory etcd (revisions, txn on mod_revision, leases on a simulated clock, an event
log), nodes that die and return (lease kept alive while live; log ends that grow while they
lead, copied by in-sync followers, caught up by catch-up members), and coordinators that
read a watched view which lags behind and sees events again, call ``reconcile`` on that
possibly stale snapshot and apply its Changes as guarded txns. The checker watches every
committed write of a replicas key and every node that starts leading.

Values are stored as objects, not JSON (the JSON forms have their own tests): a schedule
must cost milliseconds.
"""

from __future__ import annotations

import functools
import random
import time
from dataclasses import dataclass, field, replace
from typing import Any

from nsqpy.cluster.balance import rebalance
from nsqpy.cluster.decisions import plan, track_missing
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import Change, NodeInfo, Replicas, Snapshot, TopicMeta, Versioned
from nsqpy.cluster.placement import place_topic

SECOND = 1_000_000_000
KEYS = Keys("sim")
parse = functools.lru_cache(maxsize=None)(KEYS.parse)


@dataclass
class Entry:
    value: Any
    mod_revision: int
    lease: int | None


class SimEtcd:
    """Keys to objects, a revision counter, leases expiring on the simulated clock, and the
    log of every put and delete (what a watch delivers)."""

    def __init__(self, checker: Checker) -> None:
        self.kv: dict[str, Entry] = {}
        self.revision = 0
        self.log: list[tuple[int, str, Any]] = []  # (revision, key, value or None)
        self.leases: dict[int, int] = {}  # id -> expiry ns
        self.ttl: dict[int, int] = {}
        self.next_lease = 1
        self.checker = checker

    def put(self, key: str, value: Any, lease: int | None = None) -> int:
        if lease is not None and lease not in self.leases:
            raise LookupError("lease not found")
        self.revision += 1
        self.kv[key] = Entry(value, self.revision, lease)
        self.log.append((self.revision, key, value))
        self.checker.written(key, value)
        return self.revision

    def delete(self, key: str) -> None:
        if self.kv.pop(key, None) is not None:
            self.revision += 1
            self.log.append((self.revision, key, None))

    def replace(
        self, key: str, value: Any, mod_revision: int, guards: tuple[tuple[str, int], ...] = ()
    ) -> bool:
        """Txn: put only if the key's mod_revision is ``mod_revision`` (0: key absent) and
        so is each guarded node key's."""
        for k, rev in ((key, mod_revision), *((KEYS.node(n), r) for n, r in guards)):
            entry = self.kv.get(k)
            if (entry.mod_revision if entry else 0) != rev:
                return False
        self.put(key, value)
        return True

    def grant(self, ttl_ns: int, now: int) -> int:
        lease = self.next_lease
        self.next_lease += 1
        self.leases[lease], self.ttl[lease] = now + ttl_ns, ttl_ns
        return lease

    def refresh(self, lease: int, now: int) -> bool:
        if lease not in self.leases:
            return False
        self.leases[lease] = now + self.ttl[lease]
        return True

    def expire(self, now: int) -> None:
        for lease in [lease for lease, at in self.leases.items() if at <= now]:
            del self.leases[lease]
            for key in [k for k, e in self.kv.items() if e.lease == lease]:
                self.delete(key)


class View:
    """A watch-fed copy of etcd that may lag (``advance`` delivers only some events) and
    see an old event again; it keeps the newest version of each key by revision, as a
    watcher must."""

    def __init__(self, etcd: SimEtcd) -> None:
        self.etcd = etcd
        self.cursor = 0
        self.state: dict[str, tuple[Any, int]] = {}
        self.seen: dict[str, int] = {}  # key -> revision of the last event applied

    def advance(self, rng: random.Random, lag: bool) -> None:
        log = self.etcd.log
        upto = len(log) if not lag else rng.randint(self.cursor, len(log))
        for event in log[self.cursor : upto]:
            self.apply(event)
        self.cursor = upto
        if lag and self.cursor and rng.random() < 0.3:  # a repeated, late event
            self.apply(log[rng.randrange(self.cursor)])

    def apply(self, event: tuple[int, str, Any]) -> None:
        revision, key, value = event
        if revision <= self.seen.get(key, 0):
            return
        self.seen[key] = revision
        if value is None:
            self.state.pop(key, None)
        else:
            self.state[key] = (value, revision)

    def snapshot(self) -> Snapshot:
        nodes, topics, replicas, node_revisions = {}, {}, {}, {}
        for key, (value, revision) in self.state.items():
            parsed = parse(key)
            if parsed is None:
                continue
            if parsed[0] == "node":
                nodes[parsed[1]] = value
                node_revisions[parsed[1]] = revision
            elif parsed[0] == "meta":
                topics[parsed[1]] = value
            elif parsed[0] == "replicas":
                replicas[(parsed[1], parsed[2])] = Versioned(value, revision)
        return Snapshot(nodes, topics, replicas, self.etcd.revision if not self.state else max(
            r for _, r in self.state.values()), node_revisions)  # fmt: skip


@dataclass
class Checker:
    """Invariants over every replicas value ever written and every leader take-over."""

    replicator: dict[str, int] = field(default_factory=dict)
    last: dict[tuple[str, int], Replicas] = field(default_factory=dict)
    leader_of: dict[tuple[str, int, int], str] = field(default_factory=dict)
    took_over: dict[tuple[str, int, int], str] = field(default_factory=dict)
    nodes: dict[str, SimNode] = field(default_factory=dict)
    joins: int = 0

    def written(self, key: str, value: Any) -> None:
        parsed = parse(key)
        if parsed is None or parsed[0] != "replicas":
            return
        topic, p = parsed[1], parsed[2]
        r: Replicas = value
        assert r.leader in r.isr, r
        assert not set(r.isr) & set(r.catchup), r
        assert len(set(r.holders)) == len(r.holders), r
        moving = r.move is not None and not r.move.leader_only  # (the target added first)
        assert len(r.holders) <= self.replicator[topic] + moving, r
        prev = self.last.get((topic, p))
        if prev is not None:
            assert r.epoch > prev.epoch, (prev, r)
            assert r.leader_epoch >= prev.leader_epoch, (prev, r)
            assert (r.leader_epoch == prev.leader_epoch) == (r.leader == prev.leader), (prev, r)
        if prev is not None and r.leader_epoch == prev.leader_epoch:
            self.joined_with_everything(topic, p, prev, r)
        self.last[(topic, p)] = r
        owner = self.leader_of.setdefault((topic, p, r.leader_epoch), r.leader)
        assert owner == r.leader, (
            f"two leaders of {topic}/{p} at {r.leader_epoch}: {owner}, {r.leader}"
        )

    def joined_with_everything(self, topic: str, p: int, prev: Replicas, r: Replicas) -> None:
        """A node that joins the ISR has every record committed so far: what each member
        of the ISR it joins has (the leader appends only once they all copied)."""
        tp = (topic, p)
        committed = min(
            (self.nodes[n].logs[tp][1] for n in prev.isr if tp in self.nodes[n].logs),
            default=0,
        )
        for n in set(r.isr) - set(prev.isr):
            self.joins += 1
            log = self.nodes[n].logs.get(tp)
            assert log is not None and log[0] == r.leader_epoch and log[1] >= committed, (
                f"{n} joins the ISR of {topic}/{p} with {log}, committed {committed}"
            )

    def leads(self, node: str, topic: str, p: int, leader_epoch: int) -> None:
        owner = self.took_over.setdefault((topic, p, leader_epoch), node)
        assert owner == node, f"{node} and {owner} both lead {topic}/{p} at {leader_epoch}"


class SimNode:
    """An nsqd: registers under a lease while live, leads and follows what etcd says."""

    TTL = 3 * SECOND

    def __init__(self, node_id: str) -> None:
        self.id = node_id
        self.live = True
        self.lease: int | None = None
        self.logs: dict[tuple[str, int], list[int]] = {}  # (topic, p) -> [leader_epoch, end]
        # as a leader: the catch-up members it saw in step (and waits for from then on)
        self.caught_up: dict[tuple[str, int], tuple[int, tuple[str, ...]]] = {}
        self.reported: tuple[Any, ...] | None = None
        # (msgs/s, bytes) of each partition, reported for those it holds (none: idle)
        self.traffic: dict[tuple[str, int], tuple[float, int]] = {}

    def info(self) -> NodeInfo:
        ends = {f"{t}/{p}": (le, end) for (t, p), (le, end) in self.logs.items()}
        caught_up = {f"{t}/{p}": v for (t, p), v in self.caught_up.items() if v[1]}
        loads = {f"{t}/{p}": self.traffic[(t, p)] for t, p in self.logs if (t, p) in self.traffic}
        return NodeInfo(
            self.id, self.id, "127.0.0.1", 4150, 4151, "127.0.0.1:4250", "sim", 0, ends=ends,
            caught_up=caught_up, loads=loads,
        )  # fmt: skip

    def keep_alive(self, etcd: SimEtcd, now: int) -> None:
        if self.lease is None or not etcd.refresh(self.lease, now):
            self.lease = etcd.grant(self.TTL, now)
            self.reported = None
        ends = {f"{t}/{p}": (le, end) for (t, p), (le, end) in self.logs.items()}
        state = (ends, dict(self.caught_up))
        if state != self.reported:
            etcd.put(KEYS.node(self.id), self.info(), self.lease)
            self.reported = state


def data_plane(
    nodes: dict[str, SimNode], etcd: SimEtcd, checker: Checker, rng: random.Random
) -> None:
    """One round of replication, read from etcd as it is now: a live leader takes over its
    epoch and appends when every ISR member is live and in step; live ISR followers copy it;
    live catch-up members copy it now and then (catching up takes a while)."""
    for key, entry in list(etcd.kv.items()):
        parsed = parse(key)
        if parsed is None or parsed[0] != "replicas":
            continue
        tp = (parsed[1], parsed[2])
        r: Replicas = entry.value
        for node in nodes.values():  # a node drops what it no longer holds
            if node.live and node.id not in r.holders:
                node.logs.pop(tp, None)
        leader = nodes[r.leader]
        if not leader.live:
            continue
        log = leader.logs.setdefault(tp, [r.leader_epoch, 0])
        if log[0] != r.leader_epoch:
            log[0] = r.leader_epoch
            checker.leads(leader.id, tp[0], tp[1], r.leader_epoch)
        # the catch-up members it reported caught up are waited for as ISR members
        prev_le, joining = leader.caught_up.get(tp, (r.leader_epoch, ()))
        waited = [n for n in joining if prev_le == r.leader_epoch and n in r.catchup]
        in_step = all(
            nodes[n].live and nodes[n].logs.get(tp) == log for n in (*r.followers, *waited)
        )
        if in_step:
            log[1] += rng.randint(0, 3)
        for n in (*r.followers, *waited):  # (in step: the leader waits for their copies)
            if nodes[n].live:
                nodes[n].logs[tp] = list(log)
        for n in r.catchup:
            if n in waited:
                continue
            if nodes[n].live and (tp not in nodes[n].logs or rng.random() < 0.4):
                nodes[n].logs[tp] = list(log) if rng.random() < 0.7 else [log[0] - 1, 0]
        caught = {n for n in waited if nodes[n].live}  # (waited for until it is gone)
        caught |= {n for n in r.catchup if nodes[n].live and nodes[n].logs.get(tp) == log}
        leader.caught_up[tp] = (r.leader_epoch, tuple(sorted(caught)))


class Coordinator:
    """A lookupd running the decisions on its own (lagging) view; no lock, so two of them
    race and only the guarded txn keeps them honest."""

    REPAIR = 6 * SECOND
    EMERGENCY = 2 * SECOND

    def __init__(self, etcd: SimEtcd, *, balance: bool = False) -> None:
        self.etcd = etcd
        self.view = View(etcd)
        self.missing: dict[str, int] = {}
        self.applied = 0
        self.failed = 0
        self.balance = balance  # when healthy, the rebalancer's one move per round
        self.moves = 0
        self.cpu_s: list[float] = []  # CPU of each round's decisions (plan, rebalance)

    def step(self, now: int, rng: random.Random, lag: bool) -> list[Change]:
        self.view.advance(rng, lag)
        snap = self.view.snapshot()
        started = time.process_time()
        self.missing = track_missing(self.missing, snap, now)
        result = plan(snap, now, self.missing, self.REPAIR, self.EMERGENCY)
        changes = list(result.changes)
        if self.balance and not changes and not result.stuck:
            move = rebalance(snap)
            if move is not None:
                changes.append(move)
                self.moves += 1
        self.cpu_s.append(time.process_time() - started)
        check_settles(snap, now, self.missing, result.changes)
        for change in changes:
            if self.etcd.replace(KEYS.replicas(change.topic, change.partition), change.new,
                                 change.expected_revision, change.guards):  # fmt: skip
                self.applied += 1
            else:
                self.failed += 1
        return changes


def check_settles(snap: Snapshot, now: int, missing: dict[str, int], changes: list[Change]) -> None:
    """Level-triggered: the same inputs with the Changes applied ask for nothing more. (What
    a node just added to a partition reports about it predates the addition, so it is left
    out: acting on it is progress of the next round, not a flap.)"""
    if not changes:
        return
    replicas = dict(snap.replicas)
    nodes = dict(snap.nodes)
    for i, c in enumerate(changes):
        replicas[(c.topic, c.partition)] = Versioned(c.new, snap.revision + 1 + i)
        for n in set(c.new.holders) - set(snap.replicas[(c.topic, c.partition)].value.holders):
            ends = {k: v for k, v in nodes[n].ends.items() if k != f"{c.topic}/{c.partition}"}
            nodes[n] = replace(nodes[n], ends=ends)
    after = Snapshot(nodes, snap.topics, replicas, snap.revision + len(changes))
    again = plan(after, now, missing, Coordinator.REPAIR, Coordinator.EMERGENCY).changes
    assert again == [], (changes, again)


@dataclass
class Outcome:
    steps: int = 0
    applied: int = 0
    failed: int = 0
    elections: int = 0
    stuck_at_end: int = 0


def run_schedule(seed: int, *, steps: int = 40, settle: int = 25) -> Outcome:
    """One seeded schedule: topics placed on 3..5 nodes, ``steps`` rounds of deaths,
    returns, lagging views and racing coordinators, then ``settle`` rounds without failures
    and with caught-up views, after which every partition with a live ISR member must have
    a live leader (and, when every node is back, a full ISR)."""
    rng = random.Random(seed)
    checker = Checker()
    etcd = SimEtcd(checker)
    nodes = {f"n{i}": SimNode(f"n{i}") for i in range(rng.randint(3, 5))}
    checker.nodes = nodes
    now = 0
    for node in nodes.values():
        node.keep_alive(etcd, now)
    create_topics(etcd, checker, rng)
    coordinators = [Coordinator(etcd) for _ in range(rng.randint(1, 2))]
    out = Outcome()
    for step in range(steps + settle):
        failing = step < steps
        now += SECOND
        if failing:
            inject(nodes, rng)
        elif step == steps and rng.random() < 0.7:
            for node in nodes.values():
                node.live = True
        for node in nodes.values():
            if node.live:
                node.keep_alive(etcd, now)
        etcd.expire(now)
        data_plane(nodes, etcd, checker, rng)
        for coordinator in coordinators:
            if not failing or rng.random() < 0.7:
                coordinator.step(now, rng, lag=failing)
        out.steps += 1
    check_liveness(etcd, nodes, checker)
    out.applied = sum(c.applied for c in coordinators)
    out.failed = sum(c.failed for c in coordinators)
    out.elections = len(checker.leader_of)
    return out


def create_topics(etcd: SimEtcd, checker: Checker, rng: random.Random) -> None:
    view = View(etcd)
    view.advance(rng, lag=False)
    snap = view.snapshot()
    for t in range(rng.randint(1, 2)):
        name = f"t{t}"
        meta = TopicMeta(partition_num=rng.randint(1, 3), replicator=rng.randint(1, min(3, len(snap.nodes))),
                         multipart=True)  # fmt: skip
        hint = rng.choice(sorted(snap.nodes)) if rng.random() < 0.5 else None
        checker.replicator[name] = meta.replicator
        etcd.put(KEYS.topic_meta(name), meta)
        for p, r in enumerate(place_topic(name, meta, snap, leader_hint=hint)):
            etcd.put(KEYS.replicas(name, p), r)
        view.advance(rng, lag=False)
        snap = view.snapshot()


def inject(nodes: dict[str, SimNode], rng: random.Random) -> None:
    for node in nodes.values():
        if node.live and rng.random() < 0.06:
            node.live = False  # killed or paused: it stops refreshing its lease
        elif not node.live and rng.random() < 0.12:
            node.live = True


def check_liveness(etcd: SimEtcd, nodes: dict[str, SimNode], checker: Checker) -> None:
    live_ids = {k[len(KEYS.nodes_prefix) :] for k in etcd.kv if k.startswith(KEYS.nodes_prefix)}
    all_back = all(node.live for node in nodes.values())
    for key, entry in etcd.kv.items():
        parsed = parse(key)
        if parsed is None or parsed[0] != "replicas":
            continue
        r: Replicas = entry.value
        if any(n in live_ids for n in r.isr):
            assert r.leader in live_ids, (
                f"{key}: leader {r.leader} not live, isr {r.isr}, live {live_ids}"
            )
        if all_back:
            assert r.catchup == () and len(r.isr) == checker.replicator[parsed[1]], (
                f"{key}: not settled: {r}"
            )


@dataclass
class ScaleFigures:
    """What ``run_scale`` measured (CPU in seconds of this process)."""

    nodes: int = 0
    partitions: int = 0
    place_cpu_s: float = 0.0  # placing every partition of every topic
    replicas_per_node: tuple[int, int] = (0, 0)  # (fewest, most) after placement
    leaders_per_node: tuple[int, int] = (0, 0)
    steady_round_cpu_s: float = 0.0  # the slowest round of a healthy cluster
    killed_leading: int = 0  # partitions the killed node led
    failover_rounds: int = 0  # rounds (of a simulated second) from its lease's expiry to
    # every one led again
    failover_changes: int = 0
    failover_round_cpu_s: float = 0.0  # the slowest round meanwhile
    repair_rounds: int = 0  # rounds until every ISR is full again (replicas made elsewhere)
    joined: int = 0
    rebalance_moves: int = 0
    rebalance_rounds: int = 0
    balanced_replicas_per_node: tuple[int, int] = (0, 0)  # (fewest, most) after them
    round_cpu_s: float = 0.0  # the slowest round of the whole run
    flaps: int = 0  # a partition's leader or ISR changed back to what it just was


def run_scale(
    *, nodes: int = 100, topics: int = 40, partitions: int = 250, replicator: int = 3,
    joining: int = 2, seed: int = 1, max_rounds: int = 400, rebalance_rounds: int = 100,
    busy: bool = False,
) -> ScaleFigures:  # fmt: skip
    """A cluster of ``nodes`` nodes and ``topics`` x ``partitions`` partitions of
    ``replicator`` replicas, placed by the real placement: a healthy round; the node
    leading most partitions killed (its lease expires), rounds until each has a leader and
    until each ISR is full again (its replicas made elsewhere after the repair delay);
    ``joining`` new nodes, and ``rebalance_rounds`` rounds of the rebalancer. Every
    round is the real ``plan`` (and ``rebalance``) on a watched view; each written change is
    checked as in the schedules (no two leaders of an epoch, epochs grow, level-triggered).
    ``busy``: every partition has traffic, each its own (msgs/s log-normal about 50, bytes
    about 1 GiB), which its holders report and the rebalancer weighs."""
    rng = random.Random(seed)
    traffic: dict[tuple[str, int], tuple[float, int]] = {}
    if busy:
        draw = random.Random(seed + 1)
        traffic = {(f"t{t:03d}", p): (round(draw.lognormvariate(4, 1.5), 1),
                                      int(draw.lognormvariate(21, 1.5)))
                   for t in range(topics) for p in range(partitions)}  # fmt: skip
    checker = Checker()
    etcd = SimEtcd(checker)
    sim_nodes = {f"n{i:03d}": SimNode(f"n{i:03d}") for i in range(nodes)}
    checker.nodes = sim_nodes
    for node in sim_nodes.values():
        node.traffic = traffic
    out = ScaleFigures(nodes=nodes, partitions=topics * partitions)
    now = 0
    for node in sim_nodes.values():
        node.keep_alive(etcd, now)
    view = View(etcd)
    view.advance(rng, lag=False)
    started = time.process_time()
    for t in range(topics):
        name = f"t{t:03d}"
        meta = TopicMeta(partition_num=partitions, replicator=replicator, multipart=True)
        checker.replicator[name] = replicator
        placed = place_topic(name, meta, view.snapshot())
        etcd.put(KEYS.topic_meta(name), meta)
        for p, r in enumerate(placed):
            etcd.put(KEYS.replicas(name, p), r)
        view.advance(rng, lag=False)
    out.place_cpu_s = time.process_time() - started
    led, held = view.snapshot().counts()
    out.replicas_per_node = (min(held.values()), max(held.values()))
    out.leaders_per_node = (min(led.values()), max(led.values()))
    coordinator = Coordinator(etcd, balance=True)
    history: dict[tuple[str, int], list[tuple[str, tuple[str, ...]]]] = {}

    def round_() -> list[Change]:
        nonlocal now
        now += SECOND
        for node in sim_nodes.values():
            if node.live:
                node.keep_alive(etcd, now)
        etcd.expire(now)
        data_plane(sim_nodes, etcd, checker, rng)
        changes = coordinator.step(now, rng, lag=False)
        for c in changes:
            seen = history.setdefault((c.topic, c.partition), [])
            state = (c.new.leader, c.new.isr)
            if len(seen) >= 2 and seen[-2] == state and seen[-1] != state:
                out.flaps += 1
            seen.append(state)
        return changes

    def partitions_led_by_dead() -> int:
        live = {n for n, node in sim_nodes.items() if node.live}
        return sum(1 for e in etcd.kv.values()
                   if isinstance(e.value, Replicas) and e.value.leader not in live)  # fmt: skip

    def all_full() -> bool:
        return all(len(e.value.isr) == replicator and not e.value.catchup
                   for e in etcd.kv.values() if isinstance(e.value, Replicas))  # fmt: skip

    for _ in range(3):
        round_()
    out.steady_round_cpu_s = max(coordinator.cpu_s)
    victim = max(led, key=lambda n: (led[n], n))
    out.killed_leading = led[victim]
    sim_nodes[victim].live = False
    while KEYS.node(victim) in etcd.kv:  # its lease runs out (rounds of a second)
        expiring = len(coordinator.cpu_s)
        applied = coordinator.applied
        round_()
    # (the round that saw the lease expire is the failover's first)
    out.failover_rounds = 1
    while partitions_led_by_dead() and out.failover_rounds < max_rounds:
        round_()
        out.failover_rounds += 1
    out.failover_changes = coordinator.applied - applied
    out.failover_round_cpu_s = max(coordinator.cpu_s[expiring:], default=0.0)
    while not all_full() and out.repair_rounds < max_rounds:
        round_()
        out.repair_rounds += 1
    for i in range(joining):
        new = SimNode(f"j{i:03d}")
        new.traffic = traffic
        sim_nodes[new.id] = new
        new.keep_alive(etcd, now)
    out.joined = joining
    moves = coordinator.moves
    for _ in range(rebalance_rounds):  # (one move at a time: each takes a few rounds)
        round_()
    out.rebalance_rounds = rebalance_rounds
    out.rebalance_moves = coordinator.moves - moves
    _, held = snapshot_of(etcd).counts()
    live_held = [held.get(n, 0) for n, node in sim_nodes.items() if node.live]
    out.balanced_replicas_per_node = (min(live_held), max(live_held))
    out.round_cpu_s = max(coordinator.cpu_s)
    return out


def snapshot_of(etcd: SimEtcd) -> Snapshot:
    """etcd's keys as a snapshot, now."""
    view = View(etcd)
    view.advance(random.Random(0), lag=False)
    return view.snapshot()
