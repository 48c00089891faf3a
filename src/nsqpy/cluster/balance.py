"""The rebalancer: the one move that evens a healthy cluster out by load.

Pure, like ``decisions`` (imports ``model`` only): the coordinator calls ``rebalance``
every ``--rebalance-interval`` when a round of ``decisions.plan`` had nothing to do, and
writes the move it returns (a guarded Change of the partition's replicas key); the move is
then carried out step by step by decision (e).

**Weights.** A replica of a partition has a share, over the whole cluster, of three
things: replicas (each the same), messages per second and bytes (the ``(msgs_per_sec,
bytes)`` the partition's holders report in ``NodeInfo.loads``, the most any live holder
reports). Each partition counts as ``IDLE_RATE`` msgs/s and ``IDLE_BYTES`` more than
reported, so that an idle cluster, or a cluster of small topics, balances replica counts,
and a few messages do not move anything. A node's replica load, in each dimension, is the
sum of the shares of the replicas it holds. Leading is weighed apart, in two dimensions:
the partition's share of the leads (each the same) and of the messages per second
(clients publish to and consume from the leader). Loads are shown relative to a node's
fair share (1.0: the mean over the live nodes), averaged over the dimensions, in
``/cluster/stats`` (``replica_load``, ``leader_load``).

**The move.** First replicas: of every move of a replica from node ``a`` to a live node
``b`` that holds no replica of the partition, the one that lowers the sum, over the
dimensions and nodes, of the squared loads the most; it qualifies only if it evens its pair
out by at least the margin ``HYSTERESIS / live nodes`` (a part of a fair share), the
evening ``load(a) - load(b) - share`` averaged over the dimensions, each weighted by the
partition's share in it. Ties go to a replica ``a`` does not lead, then by topic and
partition. With plain counts, that is a move when two nodes' replica counts differ by more
than one. Then, when no replica move qualifies, leads the same way: a lead goes to an ISR
member.

**Hysteresis.** A move from ``a`` to ``b`` turns its pair's evening ``e`` into ``-e`` for
the move back, in every dimension: the reverse of a move that qualified never qualifies
until the loads shift by twice the margin. A move is never its own reverse.

Nodes being drained (``Snapshot.removing``) take part in neither. ``rebalance`` starts
nothing unless the cluster is healthy: no catch-up member, every holder live, no move under
way, no drain still holding replicas. ``imbalance`` is the same move whatever the health:
None means balanced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from .model import Change, Move, Replicas, Snapshot, Versioned

__all__ = ["HYSTERESIS", "IDLE_BYTES", "IDLE_RATE", "imbalance", "loads", "rebalance"]

HYSTERESIS = 0.05  # a move must even its pair out by this part of a node's fair share
IDLE_RATE = 1.0  # msgs/s every partition counts as having on top of what it reports
IDLE_BYTES = 1 << 20  # the same for bytes

Key = tuple[str, int]


def rebalance(snapshot: Snapshot) -> Change | None:
    """The one move that evens the cluster out, when it is healthy (module docstring)."""
    _, held = snapshot.counts()
    if snapshot.moving or any(held.get(n) for n in snapshot.removing):
        return None  # (a drained node that holds nothing any more does not stop it)
    for versioned in snapshot.replicas.values():
        r = versioned.value
        if r.catchup or any(n not in snapshot.nodes for n in r.holders):
            return None
    return imbalance(snapshot)


def imbalance(snapshot: Snapshot) -> Change | None:
    """The move ``rebalance`` would start, whatever the cluster's health; None: balanced
    (nodes being drained do not count)."""
    w = _Weights(snapshot)
    if len(w.live) < 2:
        return None
    return w.replica_move() or w.lead_move()


def loads(snapshot: Snapshot) -> dict[str, tuple[float, float]]:
    """``(replica_load, leader_load)`` of every live node not being drained, relative to a
    node's fair share (1.0 each when balanced exactly)."""
    w = _Weights(snapshot)
    if not w.parts:
        return {n: (1.0, 1.0) for n in w.live}
    held, led = _relative(w.totals(w.held)), _relative(w.totals(w.led))
    return {n: (held[n], led[n]) for n in w.live}


@dataclass(frozen=True)
class _Candidate:
    gain: float  # how much the sum of squares of the loads drops
    leads: bool  # the source leads the partition (a replica move then moves the lead too)
    key: Key
    move: Move

    def rank(self) -> tuple[float, bool, Key, str, str]:
        return (-round(self.gain, 12), self.leads, self.key, self.move.source, self.move.target)


Weights = Mapping[Key, tuple[float, ...]]  # per partition, its share in each dimension


class _Weights:
    def __init__(self, snapshot: Snapshot) -> None:
        self.live = sorted(n for n in snapshot.nodes if n not in snapshot.removing)
        self.parts: dict[Key, Versioned[Replicas]] = {
            key: v for key, v in sorted(snapshot.replicas.items())
            if (meta := snapshot.topics.get(key[0])) is not None and key[1] < meta.partition_num
        }  # fmt: skip
        load = {key: snapshot.partition_load(*key) for key in self.parts}
        rates = {k: r for k, (r, _) in load.items()}
        sizes = {k: float(b) for k, (_, b) in load.items()}
        zero = dict.fromkeys(self.parts, 0.0)
        copies = {key: len(v.value.holders) for key, v in self.parts.items()}
        once = dict.fromkeys(self.parts, 1)
        dims = [_shares(zero, copies, 1.0), _shares(rates, copies, IDLE_RATE),
                _shares(sizes, copies, IDLE_BYTES)]  # fmt: skip
        self.held: Weights = {k: tuple(d[k] for d in dims) for k in self.parts}
        dims = [_shares(zero, once, 1.0), _shares(rates, once, IDLE_RATE)]
        self.led: Weights = {k: tuple(d[k] for d in dims) for k in self.parts}

    def totals(self, weights: Weights) -> dict[str, list[float]]:
        """Each live node's load in each dimension: the weights of the replicas it holds
        (``self.held``) or of the partitions it leads (``self.led``)."""
        width = len(next(iter(weights.values()), ()))
        nodes = {n: [0.0] * width for n in self.live}
        for key, v in self.parts.items():
            r = v.value
            for n in r.holders if weights is self.held else (r.leader,):
                if n in nodes:
                    nodes[n] = [t + w for t, w in zip(nodes[n], weights[key], strict=True)]
        return nodes

    def replica_move(self) -> Change | None:
        def targets(r: Replicas) -> Iterable[str]:
            return (n for n in self.live if n not in r.holders)

        return self._best(self.held, lambda r: r.holders, targets, leader_only=False)

    def lead_move(self) -> Change | None:
        def targets(r: Replicas) -> Iterable[str]:
            return (n for n in r.followers if n in self.live)

        return self._best(self.led, lambda r: (r.leader,), targets, leader_only=True)

    def _best(
        self,
        weights: Weights,
        sources: Callable[[Replicas], Iterable[str]],
        targets: Callable[[Replicas], Iterable[str]],
        *,
        leader_only: bool,
    ) -> Change | None:
        """The move lowering the sum of squares of the loads most, of those that even
        their pair out by at least the margin (averaged over the dimensions, each weighted
        by the partition's share in it)."""
        totals = self.totals(weights)
        margin = HYSTERESIS / len(self.live)  # (each dimension sums to 1 over the nodes)
        found: list[_Candidate] = []
        for key, v in self.parts.items():
            r, weight = v.value, weights[key]
            for a in sources(r):
                if a not in totals:
                    continue
                for b in targets(r):
                    evens = [ta - tb - w for ta, tb, w in
                             zip(totals[a], totals[b], weight, strict=True)]  # fmt: skip
                    if sum(w * (e - margin) for w, e in zip(weight, evens, strict=True)) < 0:
                        continue
                    gain = sum(2 * w * e for w, e in zip(weight, evens, strict=True))
                    if gain > 0:
                        leads = r.leader == a and not leader_only
                        found.append(_Candidate(gain, leads, key, Move(a, b, leader_only)))
        if not found:
            return None
        best = min(found, key=_Candidate.rank)
        a, b = best.move.source, best.move.target
        share = _relative(totals)
        why = (f"rebalance {'leaders' if leader_only else 'replicas'}: load {a} {share[a]:.2f}, "
               f"{b} {share[b]:.2f} of a fair share")  # fmt: skip
        v = self.parts[best.key]
        new = replace(v.value, epoch=v.value.epoch + 1, move=best.move)
        return Change(best.key[0], best.key[1], v.mod_revision, new, why)


def _shares(
    values: Mapping[Key, float], copies: Mapping[Key, int], idle: float
) -> dict[Key, float]:
    """Each partition's share of ``sum((value + idle) * copies)``, per copy."""
    total = sum((value + idle) * copies[key] for key, value in values.items())
    return {key: (value + idle) / total if total else 0.0 for key, value in values.items()}


def _relative(totals: Mapping[str, list[float]]) -> dict[str, float]:
    """Each node's load relative to a fair share, averaged over the dimensions."""
    count = len(totals)
    return {n: round(sum(t) * count / len(t), 3) if t else 1.0 for n, t in totals.items()}
