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

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import replace
from operator import mul

from .model import Change, Move, Replicas, Snapshot, Versioned, partition_name

__all__ = ["HYSTERESIS", "IDLE_BYTES", "IDLE_RATE", "imbalance", "loads", "rebalance"]

HYSTERESIS = 0.05  # a move must even its pair out by this part of a node's fair share
IDLE_RATE = 1.0  # msgs/s every partition counts as having on top of what it reports
IDLE_BYTES = 1 << 20  # the same for bytes

Key = tuple[str, int]
_SLACK = 1e-9  # (float rounding, far below any gain that matters)


def rebalance(snapshot: Snapshot) -> Change | None:
    """The one move that evens the cluster out, when it is healthy (module docstring)."""
    if snapshot.moving:
        return None
    live, removing = snapshot.nodes, snapshot.removing
    for versioned in snapshot.replicas.values():
        r = versioned.value
        for n in r.holders:
            if n not in live or n in removing:
                return None  # (a drained node that holds nothing any more does not stop it)
        if r.catchup:
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


Weights = Mapping[Key, tuple[float, ...]]  # per partition, its share in each dimension


class _Weights:
    def __init__(self, snapshot: Snapshot) -> None:
        self.live = sorted(n for n in snapshot.nodes if n not in snapshot.removing)
        self.parts: dict[Key, Versioned[Replicas]] = {
            key: v for key, v in sorted(snapshot.replicas.items())
            if (meta := snapshot.topics.get(key[0])) is not None and key[1] < meta.partition_num
        }  # fmt: skip
        peak: dict[str, tuple[float, int]] = {}  # (as Snapshot.partition_load, in one pass)
        for node in snapshot.nodes.values():
            for name, reported in node.loads.items():
                seen = peak.get(name)
                if seen is None:
                    peak[name] = reported
                elif reported[0] > seen[0] or reported[1] > seen[1]:
                    peak[name] = (max(seen[0], reported[0]), max(seen[1], reported[1]))
        loads = [peak.get(partition_name(*key), (0.0, 0)) for key in self.parts]
        copies = [len(v.value.holders) for v in self.parts.values()]
        rates = [rate + IDLE_RATE for rate, _ in loads]
        sizes = [size + IDLE_BYTES for _, size in loads]
        held_sums = [_inverse(sum(copies)), _inverse(sum(map(mul, rates, copies))),
                     _inverse(sum(map(mul, sizes, copies)))]  # fmt: skip
        led_sums = [_inverse(len(loads)), _inverse(sum(rates))]
        self.held: Weights = {
            key: (held_sums[0], rate * held_sums[1], size * held_sums[2])
            for key, rate, size in zip(self.parts, rates, sizes, strict=True)
        }
        self.led: Weights = {
            key: (led_sums[0], rate * led_sums[1])
            for key, rate in zip(self.parts, rates, strict=True)
        }
        self._totals: dict[int, dict[str, list[float]]] = {}

    def totals(self, weights: Weights) -> dict[str, list[float]]:
        """Each live node's load in each dimension: the weights of the replicas it holds
        (``self.held``) or of the partitions it leads (``self.led``)."""
        done = self._totals.get(id(weights))
        if done is not None:
            return done
        width = len(next(iter(weights.values()), ()))
        mine: dict[str, list[tuple[float, ...]]] = {n: [(0.0,) * width] for n in self.live}
        held = weights is self.held
        for key, v in self.parts.items():
            r, w = v.value, weights[key]
            for n in r.holders if held else (r.leader,):
                if (found := mine.get(n)) is not None:
                    found.append(w)
        done = {n: [sum(column) for column in zip(*ws, strict=True)] for n, ws in mine.items()}
        self._totals[id(weights)] = done
        return done

    def replica_move(self) -> Change | None:
        def targets(r: Replicas) -> Container[str]:  # (the nodes weighed are all live)
            return _Except(r.holders)

        return self._best(self.held, lambda r: r.holders, targets, leader_only=False)

    def lead_move(self) -> Change | None:
        def targets(r: Replicas) -> Container[str]:
            return r.followers

        return self._best(self.led, lambda r: (r.leader,), targets, leader_only=True)

    def _best(
        self,
        weights: Weights,
        sources: Callable[[Replicas], Iterable[str]],
        targets: Callable[[Replicas], Container[str]],
        *,
        leader_only: bool,
    ) -> Change | None:
        """The move lowering the sum of squares of the loads most, of those that even
        their pair out by at least the margin (averaged over the dimensions, each weighted
        by the partition's share in it).

        With ``s(n) = w . T(n)`` (the partition's weights dotted with node ``n``'s totals),
        a move from ``a`` to ``b`` evens its pair out by ``s(a) - s(b) - w . w`` and gains
        twice that. ``s(b) >= w . L``, ``L`` the lowest total of any live node in each
        dimension, bounds each partition's gain from above; partitions are weighed exactly
        in the order of that bound, and only while it can still beat the best found. The
        nodes' scores are computed once per distinct ``w`` (all idle partitions share one)."""
        totals = self.totals(weights)
        margin = HYSTERESIS / len(self.live)  # (each dimension sums to 1 over the nodes)
        columns = list(zip(*totals.values(), strict=True))
        lowest = [min(column) for column in columns]
        spread = [max(column) - low for column, low in zip(columns, lowest, strict=True)]
        shared = Counter(weights[key] for key in self.parts)
        scales: dict[tuple[float, ...], _Scale | None] = {}  # None: no move of it qualifies
        bounded: list[tuple[float, Key, list[str], _Scale]] = []
        for key, v in self.parts.items():
            w = weights[key]
            if w in scales:
                scale = scales[w]
            else:
                scale = scales[w] = _Scale.of(w, totals, lowest, spread, margin, shared[w] > 1)
            if scale is None:
                continue
            held = [a for a in sources(v.value) if a in totals]
            if not held:
                continue
            bound = max(map(scale.score, held)) - scale.low - scale.ww
            if bound > 0 and bound >= scale.need - _SLACK:
                bounded.append((bound, key, held, scale))
        bounded.sort(key=lambda e: (-e[0], e[1]))
        best: tuple[tuple[float, bool, Key, str, str], float] | None = None
        # The bound of the partition the best move is of, when that move gains all its
        # bound allows and its source is no leader: a later partition of that same bound
        # (a later key) can then only tie it and lose (all the idle partitions of a cluster
        # share one weight, so most bounds are equal).
        settled: float | None = None
        for bound, key, held, scale in bounded:
            if best is not None and 2 * bound < best[1] - _SLACK:
                break  # (no later partition can gain as much)
            if bound == settled:
                continue
            r = self.parts[key].value
            ranked, scores, ww, need = scale.ranked(), scale.sorted_scores, scale.ww, scale.need
            allowed = targets(r)
            lowest_b = next((e for e in ranked if e[1] in allowed), None)  # the best target
            if lowest_b is None:
                continue
            sb, b = lowest_b
            past = bisect_right(scores, sb)  # (targets of that same score: later names)
            for a in held:
                sa = scale.score(a)
                evens = sa - sb - ww
                if evens <= 0 or evens < need:
                    continue
                gain, target = round(2 * evens, 12), b
                j = past
                while j < len(ranked):  # a higher score that rounds to the same gain
                    sc, other = ranked[j]
                    if round(2 * (sa - sc - ww), 12) != gain or sa - sc - ww < need:
                        break
                    if other in allowed and other < target:
                        target = other
                    j += 1
                rank = (-gain, r.leader == a and not leader_only, key, a, target)
                if best is None or rank < best[0]:
                    best = (rank, 2 * evens)
                    settled = bound if gain == round(2 * bound, 12) and not rank[1] else None
        if best is None:
            return None
        _, _, key, a, b = best[0]
        share = _relative(totals)
        why = (f"rebalance {'leaders' if leader_only else 'replicas'}: load {a} {share[a]:.2f}, "
               f"{b} {share[b]:.2f} of a fair share")  # fmt: skip
        v = self.parts[key]
        new = replace(v.value, epoch=v.value.epoch + 1, move=Move(a, b, leader_only))
        return Change(key[0], key[1], v.mod_revision, new, why, old=v.value)


class _Scale:
    """One partition weight ``w`` against the nodes' totals: ``score(n) = w . T(n)``, for
    every node at once when many partitions share ``w``."""

    def __init__(self, w: tuple[float, ...], totals: Mapping[str, list[float]],
                 low: float, need: float, every: bool, ww: float) -> None:  # fmt: skip
        self.w, self.totals, self.low, self.need = w, totals, low, need
        self.ww = ww
        self.scores = {n: _dot(w, t) for n, t in totals.items()} if every else None
        self._ranked: list[tuple[float, str]] | None = None
        self.sorted_scores: list[float] = []

    @classmethod
    def of(cls, w: tuple[float, ...], totals: Mapping[str, list[float]], lowest: list[float],
           spread: list[float], margin: float, every: bool) -> _Scale | None:  # fmt: skip
        """None when no move of a partition weighing ``w`` can qualify: not even from the
        highest total to the lowest, dimension by dimension."""
        ww = _dot(w, w)
        most, need = _dot(w, spread) - ww, margin * sum(w)
        if most <= 0 or most < need - _SLACK:
            return None
        return cls(w, totals, _dot(w, lowest), need, every, ww)

    def score(self, node: str) -> float:
        if self.scores is not None:
            return self.scores[node]
        return _dot(self.w, self.totals[node])

    def ranked(self) -> list[tuple[float, str]]:
        """Every live node by (score, id), once."""
        if self._ranked is None:
            self._ranked = sorted((self.score(n), n) for n in self.totals)
            self.sorted_scores = [score for score, _ in self._ranked]
        return self._ranked


class _Except:
    """Every node but these."""

    def __init__(self, nodes: Iterable[str]) -> None:
        self.nodes = frozenset(nodes)

    def __contains__(self, node: object) -> bool:
        return node not in self.nodes


def _inverse(total: float) -> float:
    return 1.0 / total if total else 0.0


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The dot product, summed left to right (the weights have 2 or 3 dimensions: written
    out, the same sum as ``sum(map(mul, a, b))``, several times faster)."""
    if len(a) == 3:
        return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
    if len(a) == 2:
        return a[0] * b[0] + a[1] * b[1]
    total: float = sum(map(mul, a, b))
    return total


def _relative(totals: Mapping[str, list[float]]) -> dict[str, float]:
    """Each node's load relative to a fair share, averaged over the dimensions."""
    count = len(totals)
    return {n: round(sum(t) * count / len(t), 3) if t else 1.0 for n, t in totals.items()}
