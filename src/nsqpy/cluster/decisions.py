"""The coordinator's decisions: a pure, level-triggered function from a Snapshot (plus the
clock and when each node was first seen missing) to guarded Changes of replicas keys.

Owns leader election, ISR shrink and grow, and re-replication; imports the standard library
and ``model`` only (no I/O, no clock of its own). It depends only on its arguments; applying
its Changes and running it again on the same node reports yields no further Change.

Per partition (sorted by topic, partition), at most one Change, which moves the key from the
state read to the whole next state (``epoch + 1``, ``expected_revision`` = the key's
mod_revision in the snapshot, so a stale decision fails its txn):

(a) the leader is not live: the live ISR member with the longest reported log end (ties:
    fewest leaders, then id) leads, ``leader_epoch + 1``, the old leader goes to catch-up.
    No live ISR member: no Change (never an unclean election from catch-up); the partition
    is reported in ``Reconciliation.stuck``. The same election when the live leader reports
    it cannot write the partition (``NodeInfo.failing`` in the current leader_epoch: its
    disk is full) and another live ISR member does not; without one, it stays leader.
(b) ISR members that are not live move to catch-up, and so do those the live leader reports
    lagging (``NodeInfo.lagging``) in the current leader_epoch: a follower alive but not
    keeping up (cut off from the leader, a stalled disk) must not hold its writes.
(c) without an election in (a): a live catch-up member whose reported ``(leader_epoch, end)``
    has the partition's current leader_epoch and ``end >=`` the end the leader reports (the
    leader reporting the current leader_epoch, i.e. it has taken over), which the leader
    does not report lagging and does report caught up (``NodeInfo.caught_up``: it had
    acknowledged everything committed, and the leader waits for it from then on as for an
    ISR member, so no record committed before the join is missing on it), joins the ISR.
    The Change is guarded by the leader's node key revision: once the leader has reported
    again (it may have stopped waiting for the member), the join is void.
(d) a holder missing for ``repair_delay_ns`` (``emergency_delay_ns`` when the live holders
    are at most replicator/2) is replaced by a live node holding no replica of the
    partition (fewest replicas of the topic, then overall, then id), added to catch-up;
    holders below replicator are filled the same way, above it the extra catch-up members
    go (not-live ones first). With no live node to take its place, a missing holder stays.

(e) a planned move (``Replicas.move``: an operator's ``/topic/partition/move``, a drain, the
    rebalancer), one step per round, without an election this round: a replica move adds
    ``target`` to catch-up (the partition has replicator + 1 holders meanwhile); once it is
    in the ISR, a ``source`` that leads hands it the lead (``leader_epoch + 1``, the old
    leader stays in the ISR: it had everything committed, and follows from its log end);
    then, once the leader reports its log in the current leader_epoch (the new one has
    taken the lead up), ``source`` leaves and the move is done. A leadership move hands the lead to
    ``target``, an ISR member, at once. A move whose target is not live or being drained
    (or, for the lead, not in the ISR) is cancelled, and the replica it added goes; one
    whose source holds the partition no more is done.
    A holder of a node being drained (``Snapshot.removing``) gets a move to a spare node,
    at most ``MAX_MOVES`` moves under way in the cluster; such a node is never a spare,
    and when it is not live its replicas are replaced at once.

The rebalancer, which starts such moves on a healthy cluster, is ``balance``.

Node reports: ``NodeInfo.ends["<topic>/<p>"] = (leader_epoch, end)`` where leader_epoch is
the epoch the node's log is in step with (a leader: the epoch it leads, once it took over;
a follower: its leader's, once its log matched) and end is its log end offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from .model import Change, Move, NodeInfo, Replicas, Snapshot, TopicMeta, partition_name

__all__ = [
    "MAX_MOVES",
    "Reconciliation",
    "Stuck",
    "plan",
    "reconcile",
    "track_missing",
]

MAX_MOVES = 4  # drain moves under way at once in a cluster


@dataclass(frozen=True)
class Stuck:
    """A partition no Change can help now (its leader is gone and no ISR member is live)."""

    topic: str
    partition: int
    reason: str


@dataclass(frozen=True)
class Reconciliation:
    changes: list[Change] = field(default_factory=list)
    stuck: list[Stuck] = field(default_factory=list)


def track_missing(prev: Mapping[str, int], snapshot: Snapshot, now_ns: int) -> dict[str, int]:
    """When each node that holds a replica but is not live was first seen missing: its time
    in ``prev`` if there, else ``now_ns``. Nodes live again or holding nothing drop out."""
    holders = {n for v in snapshot.replicas.values() for n in v.value.holders}
    return {n: prev.get(n, now_ns) for n in sorted(holders) if n not in snapshot.nodes}


def reconcile(
    snapshot: Snapshot,
    now_ns: int,
    missing_since: Mapping[str, int],
    repair_delay_ns: int,
    emergency_delay_ns: int,
) -> list[Change]:
    """The Changes to apply now (see the module docstring); ``plan`` also reports stuck
    partitions."""
    return plan(snapshot, now_ns, missing_since, repair_delay_ns, emergency_delay_ns).changes


def plan(
    snapshot: Snapshot,
    now_ns: int,
    missing_since: Mapping[str, int],
    repair_delay_ns: int,
    emergency_delay_ns: int,
) -> Reconciliation:
    """``reconcile`` with the partitions it can do nothing for."""
    ctx = _Round(snapshot, now_ns, missing_since, repair_delay_ns, emergency_delay_ns)
    out = Reconciliation()
    live = snapshot.nodes
    for topic, partition in sorted(snapshot.replicas):
        meta = snapshot.topics.get(topic)
        if meta is None or partition >= meta.partition_num:  # being created, expanded or
            continue  # deleted: not ours to touch
        versioned = snapshot.replicas[(topic, partition)]
        if _quiet(versioned.value, meta, live, snapshot.removing, topic, partition):
            continue
        step = _Partition(ctx, topic, partition, meta, versioned.value)
        if step.stuck:
            out.stuck.append(Stuck(topic, partition, step.stuck))
            continue
        new = step.result()
        if new != versioned.value:
            reason = "; ".join(step.reasons)
            guards = tuple(step.guards)
            change = Change(
                topic, partition, versioned.mod_revision, new, reason, guards, old=versioned.value
            )
            out.changes.append(change)
    return out


def _quiet(r: Replicas, meta: TopicMeta, live: Mapping[str, NodeInfo],
           removing: frozenset[str], topic: str, partition: int) -> bool:  # fmt: skip
    """Whether no rule has anything to do for the partition (most, in a healthy cluster): a
    full ISR of live nodes none being drained, no catch-up member, no move, and a leader
    that reports no follower lagging and no failing write in its leader_epoch."""
    if r.move is not None or r.catchup or len(r.isr) != meta.replicator:
        return False
    info = live.get(r.leader)
    if info is None:
        return False
    for n in r.isr:
        if n not in live or n in removing:
            return False
    if not info.failing and not info.lagging:  # (a healthy leader's: no name to look up)
        return True
    name = partition_name(topic, partition)
    failing, lagging = info.failing.get(name), info.lagging.get(name)
    return failing != r.leader_epoch and (lagging is None or lagging[0] != r.leader_epoch
                                          or not lagging[1])  # fmt: skip


class _Round:
    """What one reconcile call shares across partitions: the inputs and the running loads."""

    def __init__(self, snapshot: Snapshot, now_ns: int, missing_since: Mapping[str, int],
                 repair_delay_ns: int, emergency_delay_ns: int) -> None:  # fmt: skip
        self.live: Mapping[str, NodeInfo] = snapshot.nodes
        self.node_revisions = snapshot.node_revisions
        self.now_ns = now_ns
        self.missing_since = missing_since
        self.repair_delay_ns = repair_delay_ns
        self.emergency_delay_ns = emergency_delay_ns
        self.removing = snapshot.removing
        self.moves = len(snapshot.moving)
        self._snapshot = snapshot

    # The running loads, counted over every partition when a rule first needs them (a
    # round where every partition is quiet counts nothing); ``hold`` and the elections
    # change them as the round goes.
    @cached_property
    def _counts(self) -> tuple[dict[str, int], dict[str, int]]:
        return self._snapshot.counts()

    @property
    def leaders(self) -> dict[str, int]:
        return self._counts[0]

    @property
    def held(self) -> dict[str, int]:
        return self._counts[1]

    @cached_property
    def topic_held(self) -> dict[tuple[str, str], int]:
        found: dict[tuple[str, str], int] = {}
        for (topic, _), versioned in self._snapshot.replicas.items():
            for node in versioned.value.holders:
                found[(topic, node)] = found.get((topic, node), 0) + 1
        return found

    def end(self, node: str, topic: str, partition: int) -> tuple[int, int] | None:
        info = self.live.get(node)
        return info.end(topic, partition) if info is not None else None

    def missing_for(self, node: str) -> int:
        return self.now_ns - self.missing_since.get(node, self.now_ns)

    def hold(self, topic: str, node: str, delta: int) -> None:
        self.held[node] = self.held.get(node, 0) + delta
        self.topic_held[(topic, node)] = self.topic_held.get((topic, node), 0) + delta


class _Partition:
    """The next state of one partition, worked out rule by rule."""

    def __init__(
        self, ctx: _Round, topic: str, partition: int, meta: TopicMeta, r: Replicas
    ) -> None:
        self.ctx, self.topic, self.partition, self.meta, self.old = ctx, topic, partition, meta, r
        self.leader, self.leader_epoch = r.leader, r.leader_epoch
        self.isr, self.catchup = list(r.isr), list(r.catchup)
        self.move = r.move
        self.reasons: list[str] = []
        self.guards: list[tuple[str, int]] = []
        self.stuck = ""
        elected = self.elect()
        if self.stuck:
            return
        self.shrink_isr()
        if not elected:
            self.join_isr()
        self.repair()
        if not elected:
            self.carry_move()

    def result(self) -> Replicas:
        if not self.reasons:
            return self.old
        return Replicas(self.leader, tuple(self.isr), tuple(self.catchup),
                        self.old.epoch + 1, self.leader_epoch, self.move)  # fmt: skip

    def _failing(self, node: str) -> bool:
        info = self.ctx.live.get(node)
        return info is not None and info.failing_in(self.topic, self.partition, self.leader_epoch)

    def elect(self) -> bool:
        ctx, old = self.ctx, self.leader
        failing = self._failing(old)
        if old in ctx.live and not failing:
            return False
        candidates = [n for n in self.isr if n != old and n in ctx.live]
        if not candidates:
            if not failing:
                self.stuck = f"leader {old} is not live and no ISR member is (isr {self.isr})"
            return False

        def rank(n: str) -> tuple[int, int, str]:
            end = ctx.end(n, self.topic, self.partition)
            return (-(end[1] if end else -1), ctx.leaders.get(n, 0), n)

        new = min(candidates, key=rank)
        ctx.leaders[old] = ctx.leaders.get(old, 0) - 1
        ctx.leaders[new] = ctx.leaders.get(new, 0) + 1
        self.leader, self.leader_epoch = new, self.leader_epoch + 1
        self.isr = [new, *(n for n in self.isr if n != new)]
        if failing:  # (live: shrink_isr would keep it in the ISR)
            self.isr.remove(old)
            self.catchup.append(old)
        why = "cannot write it" if failing else "not live"
        self.reasons.append(f"elect {new} at leader_epoch {self.leader_epoch} (leader {old} {why})")
        return True

    def lagging(self) -> tuple[str, ...]:
        """The followers the live leader reports lagging in the current leader_epoch."""
        info = self.ctx.live.get(self.leader)
        if info is None:
            return ()
        return info.lagging_in(self.topic, self.partition, self.leader_epoch)

    def shrink_isr(self) -> None:
        gone = [n for n in self.isr if n not in self.ctx.live]
        if gone:
            self.isr = [n for n in self.isr if n not in gone]
            self.catchup += gone
            self.reasons.append(f"isr -> catchup {gone} (not live)")
        late = [n for n in self.isr if n != self.leader and n in self.lagging()]
        if late:
            self.isr = [n for n in self.isr if n not in late]
            self.catchup += late
            self.reasons.append(f"isr -> catchup {late} (lagging, says the leader)")

    def join_isr(self) -> None:
        ctx, le = self.ctx, self.leader_epoch
        lead = ctx.end(self.leader, self.topic, self.partition)
        if lead is None or lead[0] != le:
            return
        ready = []
        late = self.lagging()
        info = ctx.live.get(self.leader)
        confirmed = info.caught_up_in(self.topic, self.partition, le) if info else ()
        for n in self.catchup:
            end = ctx.end(n, self.topic, self.partition)
            if end is None or end[0] != le or end[1] < lead[1] or n in late:
                continue
            if n in confirmed:  # (the leader has waited for it since it said so)
                ready.append(n)
        if ready:
            self.catchup = [n for n in self.catchup if n not in ready]
            self.isr += ready
            revision = ctx.node_revisions.get(self.leader)
            if revision is not None:  # (void if the leader reported again meanwhile)
                self.guards.append((self.leader, revision))
            self.reasons.append(f"catchup -> isr {ready} (caught up at {lead})")

    def repair(self) -> None:
        ctx, replicator = self.ctx, self.meta.replicator
        holders = self.isr + self.catchup
        live_holders = sum(1 for n in holders if n in ctx.live)
        delay = ctx.emergency_delay_ns if 2 * live_holders <= replicator else ctx.repair_delay_ns
        expired = [n for n in self.catchup if n not in ctx.live
                   and (ctx.missing_for(n) >= delay or n in ctx.removing)]  # fmt: skip
        for gone in expired:
            new = self.spare()
            if new is None:
                break
            self.replace(gone, new)
        while len(self.isr) + len(self.catchup) < replicator and (new := self.spare()):
            self.replace(None, new)
        moving = self.move is not None and not self.move.leader_only
        target = self.move.target if self.move is not None else None
        while len(self.isr) + len(self.catchup) > replicator + moving:
            extra = [n for n in self.catchup if n != target]
            if not extra:
                break
            dead = [n for n in extra if n not in ctx.live]
            self.replace(dead[-1] if dead else extra[-1], None)

    def spare(self) -> str | None:
        """The live node to add: it holds no replica of this partition; fewest replicas of
        the topic, then overall, then id."""
        ctx, holders = self.ctx, set(self.isr + self.catchup)
        spare = [n for n in ctx.live if n not in holders and n not in ctx.removing]
        if not spare:
            return None
        return min(
            spare, key=lambda n: (ctx.topic_held.get((self.topic, n), 0), ctx.held.get(n, 0), n)
        )

    def replace(self, gone: str | None, new: str | None) -> None:
        if gone is not None:
            self.catchup.remove(gone)
            self.ctx.hold(self.topic, gone, -1)
        if new is not None:
            self.catchup.append(new)
            self.ctx.hold(self.topic, new, +1)
        self.reasons.append(f"replace {gone} -> {new} in catchup" if gone and new
                            else f"catchup + {new}" if new else f"catchup - {gone}")  # fmt: skip

    # -- (e) planned moves -------------------------------------------------------------------

    def carry_move(self) -> None:
        move = self.move or self.drain()
        if move is None:
            return
        ctx, holders = self.ctx, self.isr + self.catchup
        if move.leader_only:
            if self.leader == move.target:
                self.finish(f"lead moved to {move.target}")
            elif move.target not in self.isr or move.target not in ctx.live:
                self.finish(f"lead move cancelled: {move.target} is not a live ISR member")
            else:
                self.hand_over(move.target)
                self.finish(f"lead moved to {move.target}")
            return
        if move.target not in ctx.live or move.target in ctx.removing:
            self.finish(f"move cancelled: {move.target} is not live, or is being drained")
        elif move.source not in holders:
            done = move.target in holders
            self.finish(f"move {move.source} -> {move.target} "
                        + ("done" if done else "cancelled: the source holds it no more"))  # fmt: skip
        elif move.target not in holders:
            self.move = move
            self.catchup.append(move.target)
            ctx.hold(self.topic, move.target, +1)
            self.reasons.append(f"move {move.source} -> {move.target}: {move.target} copies")
        elif move.target in self.catchup:
            return  # (copying: join_isr takes it in when it has caught up)
        elif self.leader == move.source:
            self.hand_over(move.target)
        elif (ctx.end(self.leader, self.topic, self.partition) or (0, 0))[0] != self.leader_epoch:
            return  # (the lead was just handed over: the source leaves once it is taken up)
        else:
            if move.source in self.isr:
                self.isr.remove(move.source)
            else:
                self.catchup.remove(move.source)
            ctx.hold(self.topic, move.source, -1)
            self.finish(f"move {move.source} -> {move.target} done: {move.source} leaves")

    def drain(self) -> Move | None:
        """The move of this partition's replica off a node being drained, if one can start."""
        ctx = self.ctx
        leaving = [n for n in self.isr + self.catchup if n in ctx.removing]
        if not leaving or ctx.moves >= MAX_MOVES:
            return None
        target = self.spare()
        if target is None:
            return None
        ctx.moves += 1
        return Move(leaving[0], target)

    def finish(self, why: str) -> None:
        self.move = None
        self.reasons.append(why)

    def hand_over(self, new: str) -> None:
        """A planned change of leader to ``new``, an ISR member; the old one stays in the ISR."""
        ctx, old = self.ctx, self.leader
        ctx.leaders[old] = ctx.leaders.get(old, 0) - 1
        ctx.leaders[new] = ctx.leaders.get(new, 0) + 1
        self.leader, self.leader_epoch = new, self.leader_epoch + 1
        self.isr = [new, *(n for n in self.isr if n != new)]
        self.reasons.append(f"hand the lead from {old} to {new} at leader_epoch "
                            f"{self.leader_epoch} (planned)")  # fmt: skip
