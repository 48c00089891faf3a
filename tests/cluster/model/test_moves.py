"""Planned moves (an operator's move, a drain, the rebalancer) in the pure decisions, on
hand-made snapshots and with a minimal data plane that lets catch-up members catch up."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.cluster import balance
from nsqpy.cluster.balance import imbalance, loads, rebalance
from nsqpy.cluster.decisions import MAX_MOVES, plan
from nsqpy.cluster.model import Change, Move, NodeInfo, Replicas, Snapshot, TopicMeta, Versioned
from nsqpy.cluster.placement import place_topic

S = 1_000_000_000
REPAIR, EMERGENCY = 600 * S, 10 * S
NOW = 10_000 * S
END = 10


def node(node_id: str) -> NodeInfo:
    return NodeInfo(node_id, node_id, "127.0.0.1", 4150, 4151, "127.0.0.1:4250", "t", 0)


def snap(nodes: list[str], parts: dict[int, Replicas], replicator: int = 3,
         removing: frozenset[str] = frozenset()) -> Snapshot:  # fmt: skip
    return Snapshot(
        nodes={n: node(n) for n in nodes},
        topics={"t": TopicMeta(partition_num=len(parts), replicator=replicator, multipart=True)},
        replicas={("t", p): Versioned(r, 100 + p) for p, r in parts.items()},
        revision=200,
        removing=removing,
    )


def step(s: Snapshot) -> tuple[Snapshot, list[Change]]:
    """One reconcile round applied, then the data plane: every holder has the whole log in
    the current leader epoch, and each leader reports its catch-up members caught up."""
    changes = plan(s, NOW, {}, REPAIR, EMERGENCY).changes
    replicas = dict(s.replicas)
    for c in changes:
        replicas[(c.topic, c.partition)] = Versioned(c.new, s.revision + 1)
    return caught_up(replace(s, replicas=replicas, revision=s.revision + 1)), changes


def caught_up(s: Snapshot) -> Snapshot:
    nodes = dict(s.nodes)
    for (topic, p), v in s.replicas.items():
        r = v.value
        for n in r.holders:
            if n in nodes:
                ends = {**nodes[n].ends, f"{topic}/{p}": (r.leader_epoch, END)}
                nodes[n] = replace(nodes[n], ends=ends)
        if r.leader in nodes and r.catchup:
            ups = {**nodes[r.leader].caught_up, f"{topic}/{p}": (r.leader_epoch, r.catchup)}
            nodes[r.leader] = replace(nodes[r.leader], caught_up=ups)
    return replace(s, nodes=nodes)


def settle(s: Snapshot, *, rebalancing: bool = False, rounds: int = 60) -> Snapshot:
    """Rounds until nothing changes (with ``rebalancing``, then rebalance moves too)."""
    s = caught_up(s)
    for _ in range(rounds):
        s, changes = step(s)
        if changes:
            continue
        move = rebalance(s) if rebalancing else None
        if move is None:
            return s
        replicas = {**s.replicas, (move.topic, move.partition): Versioned(move.new, s.revision + 1)}
        s = replace(s, replicas=replicas, revision=s.revision + 1)
    raise AssertionError("did not settle")


def only(s: Snapshot, p: int = 0) -> Replicas:
    return s.replicas[("t", p)].value


def test_a_replica_move_copies_joins_hands_over_the_lead_then_the_source_leaves() -> None:
    r = Replicas("a", ("a", "b", "c"), (), epoch=4, leader_epoch=2, move=Move("a", "d"))
    s = caught_up(snap(["a", "b", "c", "d"], {0: r}))
    s, [c1] = step(s)
    assert c1.new == replace(r, catchup=("d",), epoch=5)  # d copies; 4 holders meanwhile
    s, [c2] = step(s)
    # d joined the ISR (the leader said it caught up) and takes the lead from a at once
    assert c2.new.leader == "d" and c2.new.leader_epoch == 3
    assert set(c2.new.isr) == {"a", "b", "c", "d"} and c2.new.move == Move("a", "d")
    s, [c3] = step(s)
    assert c3.new == Replicas("d", ("d", "b", "c"), (), epoch=7, leader_epoch=3)
    assert "done" in c3.reason
    assert step(s)[1] == []


def test_a_follower_replica_move_never_changes_the_leader() -> None:
    r = Replicas("a", ("a", "b", "c"), (), epoch=1, leader_epoch=1, move=Move("b", "d"))
    s = settle(snap(["a", "b", "c", "d"], {0: r}))
    assert only(s) == Replicas("a", ("a", "c", "d"), (), epoch=only(s).epoch, leader_epoch=1)


def test_a_lead_move_hands_the_lead_over_in_one_round_and_keeps_the_old_leader_in_sync() -> None:
    r = Replicas("a", ("a", "b", "c"), (), epoch=4, leader_epoch=2,
                 move=Move("a", "c", leader_only=True))  # fmt: skip
    _, [c] = step(caught_up(snap(["a", "b", "c"], {0: r})))
    assert c.new == Replicas("c", ("c", "a", "b"), (), epoch=5, leader_epoch=3)


def test_moves_to_a_dead_node_or_out_of_the_isr_are_cancelled() -> None:
    dead = Replicas("a", ("a", "b"), (), move=Move("a", "z"))
    lead = Replicas("a", ("a", "b"), ("c",), move=Move("a", "c", leader_only=True))
    _, changes = step(snap(["a", "b", "c"], {0: dead, 1: lead}, replicator=2))  # c copying
    by_p = {c.partition: c for c in changes}
    assert by_p[0].new.move is None and "cancelled" in by_p[0].reason
    assert by_p[1].new.move is None and "cancelled" in by_p[1].reason
    assert by_p[1].new.leader == "a"


def test_a_cancelled_move_leaves_no_extra_replica_behind() -> None:
    r = Replicas("a", ("a", "b"), ("d",), move=Move("a", "d"))
    s = settle(replace(snap(["a", "b", "d"], {0: r}, replicator=2)))
    assert len(only(s).holders) == 2 and only(s).move is None
    s = settle(snap(["a", "b"], {0: r}, replicator=2))  # d died: cancelled, trimmed
    assert only(s).holders == ("a", "b") and only(s).move is None
    stuck = snap(["a", "b", "d"], {0: r}, replicator=2, removing=frozenset({"d"}))
    [c] = plan(stuck, NOW, {}, REPAIR, EMERGENCY).changes  # d never caught up: draining
    assert c.new.move is None and "cancelled" in c.reason  # it cancels the move
    after = replace(stuck, replicas={("t", 0): Versioned(c.new, 300)})
    [trim] = plan(after, NOW, {}, REPAIR, EMERGENCY).changes
    assert trim.new.holders == ("a", "b")


def test_a_drained_node_ends_up_holding_nothing_and_spares_never_pick_it() -> None:
    parts = {p: Replicas("a", ("a", "b"), ()) for p in range(6)}
    s = settle(snap(["a", "b", "c", "d"], parts, replicator=2, removing=frozenset({"a"})))
    _, held = s.counts()
    assert not held.get("a") and all(len(only(s, p).holders) == 2 for p in range(6))
    even = {0: Replicas("b", ("b", "c"), ()), 1: Replicas("c", ("c", "b"), ())}
    assert imbalance(snap(["a", "b", "c"], even, replicator=2)) is not None  # a is empty
    drained = snap(["a", "b", "c"], even, replicator=2, removing=frozenset({"a"}))
    assert imbalance(drained) is None  # a drained node does not count
    assert all(only(s, p).leader != "a" for p in range(6))
    # and no placement picks it
    meta = TopicMeta(partition_num=4, replicator=2, multipart=True)
    assert all("a" not in r.holders for r in place_topic("u", meta, s))


def test_a_drain_moves_at_most_max_moves_partitions_at_once() -> None:
    parts = {p: Replicas("b", ("b", "a"), ()) for p in range(MAX_MOVES + 3)}
    s = caught_up(snap(["a", "b", "c"], parts, replicator=2, removing=frozenset({"a"})))
    s, changes = step(s)
    assert len(changes) == MAX_MOVES and len(s.moving) == MAX_MOVES


def test_a_drained_node_that_is_gone_is_replaced_without_the_repair_delay() -> None:
    r = Replicas("b", ("b", "a"), ())
    s = settle(snap(["b", "c"], {0: r}, replicator=2, removing=frozenset({"a"})))
    assert set(only(s).holders) == {"b", "c"}


def test_the_rebalancer_evens_out_a_cluster_with_every_leader_on_one_node() -> None:
    parts = {p: Replicas("a", ("a", "b", "c"), ()) for p in range(6)}
    s = snap(["a", "b", "c"], parts)
    assert imbalance(s) is not None
    s = settle(s, rebalancing=True)
    leaders, _ = s.counts()
    assert sorted(leaders.values()) == [2, 2, 2] and imbalance(s) is None


def test_the_rebalancer_moves_replicas_to_an_empty_new_node_one_at_a_time() -> None:
    parts = {p: Replicas(lead, tuple(sorted({lead, "a", "b"})) if lead != "c" else ("c", "a"), ())
             for p, lead in enumerate("abcabc")}  # fmt: skip
    s = snap(["a", "b", "c", "d"], parts, replicator=2)
    first = rebalance(caught_up(s))
    assert first is not None and first.new.move is not None and first.new.move.target == "d"
    s = settle(s, rebalancing=True)
    _, held = s.counts()
    assert max(held.values()) - min(held[n] for n in "abcd") <= 1 and imbalance(s) is None


@pytest.mark.parametrize(
    "parts",
    [
        {0: Replicas("a", ("a", "b"), ("c",))},  # degraded (catch-up)
        {0: Replicas("a", ("a", "b"), (), move=Move("a", "c", leader_only=True))},  # moving
    ],
)
def test_no_rebalancing_while_degraded_or_moving(parts: dict[int, Replicas]) -> None:
    uneven = {**parts, 1: Replicas("a", ("a", "b"), ()), 2: Replicas("a", ("a", "b"), ())}
    s = snap(["a", "b", "c"], uneven, replicator=2)
    assert imbalance(s) is not None and rebalance(s) is None
    assert rebalance(replace(s, removing=frozenset({"b"}))) is None  # b drains
    healthy = snap(["a", "b", "c", "x"], {p: Replicas("a", ("a", "b"), ()) for p in range(3)},
                   replicator=2)  # fmt: skip
    assert rebalance(replace(healthy, removing=frozenset({"x"}))) is not None  # x drained


# -- by load ---------------------------------------------------------------------------------


def loaded(s: Snapshot, loads: dict[int, tuple[float, int]]) -> Snapshot:
    """``s`` with every holder of partition p reporting ``loads[p]`` (msgs/s, bytes)."""
    nodes = dict(s.nodes)
    for (topic, p), v in s.replicas.items():
        for n in v.value.holders:
            if n in nodes and p in loads:
                nodes[n] = replace(nodes[n], loads={**nodes[n].loads, f"{topic}/{p}": loads[p]})
    return replace(s, nodes=nodes)


def settle_loaded(s: Snapshot, loads: dict[int, tuple[float, int]]) -> tuple[Snapshot, int]:
    """Rebalance rounds (holders reporting ``loads`` after each) until balanced; also the
    number of moves it took."""
    for moves in range(30):
        s = loaded(settle(s), loads)
        move = rebalance(s)
        if move is None:
            return s, moves
        replicas = {**s.replicas, (move.topic, move.partition): Versioned(move.new, s.revision + 1)}
        s = replace(s, replicas=replicas, revision=s.revision + 1)
    raise AssertionError("did not settle")


def holders_of(s: Snapshot, parts: list[int]) -> list[str]:
    return [only(s, p).leader for p in parts]


@pytest.mark.parametrize("hot", [(5000.0, 0), (0.0, 8 << 30)], ids=["msgs_per_sec", "bytes"])
def test_equal_counts_but_two_hot_partitions_on_one_node_are_spread(hot: tuple[float, int]) -> None:
    """Replica counts are even (2/2/2) but a holds both busy partitions (by rate, or by bytes):
    one goes elsewhere, and an idle one makes room; then nothing more moves."""
    parts = {p: Replicas(lead, (lead,), ()) for p, lead in enumerate("aabbcc")}
    loads = {0: hot, 1: hot} | {p: (2.0, 1 << 20) for p in range(2, 6)}
    s = loaded(snap(["a", "b", "c"], parts, replicator=1), loads)
    first = imbalance(s)
    assert first is not None and first.new.move == Move("a", "b") and first.partition in (0, 1)
    s, moves = settle_loaded(s, loads)
    assert len(set(holders_of(s, [0, 1]))) == 2 and imbalance(s) is None
    assert moves == 2  # the busy one, then an idle one back the other way
    _, held = s.counts()
    assert sorted(held.values()) == [2, 2, 2]


def test_leads_are_spread_by_rate_when_every_node_holds_every_partition() -> None:
    parts = {p: Replicas(lead, (lead, *(n for n in "abc" if n != lead)), ())
             for p, lead in enumerate("aabbcc")}  # fmt: skip
    loads = {0: (3000.0, 0), 1: (3000.0, 0)}
    s = loaded(snap(["a", "b", "c"], parts), loads)
    first = imbalance(s)
    assert first is not None and first.new.move is not None and first.new.move.leader_only
    s, _ = settle_loaded(s, loads)
    leaders, _ = s.counts()
    assert len(set(holders_of(s, [0, 1]))) == 2 and imbalance(s) is None
    assert sorted(leaders.values()) == [2, 2, 2]


def test_small_or_noisy_differences_move_nothing() -> None:
    """Balanced counts with a trickle on one node (under the idle allowance), or rates that
    differ by a few percent: balanced; and a settled cluster whose rates then wobble does
    not move back."""
    parts = {p: Replicas(lead, (lead,), ()) for p, lead in enumerate("aabbcc")}
    s = snap(["a", "b", "c"], parts, replicator=1)
    assert imbalance(loaded(s, {0: (0.5, 0), 1: (0.5, 0)})) is None
    assert imbalance(loaded(s, {p: (1000.0 + 40 * p, 1 << 30) for p in range(6)})) is None
    loads = {0: (5000.0, 0), 1: (5000.0, 0)} | {p: (2.0, 0) for p in range(2, 6)}
    settled, _ = settle_loaded(loaded(s, loads), loads)
    wobble = {p: (r * (1.08 if p % 2 else 0.92), b) for p, (r, b) in loads.items()}
    assert imbalance(loaded(settled, wobble)) is None


def test_loads_are_relative_to_a_fair_share() -> None:
    parts = {p: Replicas(lead, (lead,), ()) for p, lead in enumerate("aabbcc")}
    s = snap(["a", "b", "c"], parts, replicator=1)
    assert loads(s) == {n: (1.0, 1.0) for n in "abc"}
    busy = loads(loaded(s, {0: (9000.0, 0), 1: (9000.0, 0)}))
    assert busy["a"][0] > 1.5 > 1.0 > busy["b"][0] == busy["c"][0]
    assert busy["a"][1] > 1.9 and busy["b"][1] < 0.6


# -- the search itself -----------------------------------------------------------------------


def every_move(s: Snapshot) -> Change | None:
    """The rebalancer's move by its definition: every (partition, source, target) weighed,
    the best by (gain, not moving a lead, partition, source, target). ``imbalance`` prunes
    and shares work; it must pick the same move."""
    w = balance._Weights(s)
    if len(w.live) < 2:
        return None
    for weights, leader_only in ((w.held, False), (w.led, True)):
        totals = w.totals(weights)
        margin = balance.HYSTERESIS / len(w.live)
        found = []
        for key, v in w.parts.items():
            r, share = v.value, weights[key]
            ss = sum(x * x for x in share)
            for a in (r.leader,) if leader_only else r.holders:
                if a not in totals:
                    continue
                for b in r.followers if leader_only else w.live:
                    if b not in w.live or (not leader_only and b in r.holders):
                        continue
                    sa = sum(x * t for x, t in zip(share, totals[a], strict=True))
                    sb = sum(x * t for x, t in zip(share, totals[b], strict=True))
                    evens = sa - sb - ss
                    if evens > 0 and evens >= margin * sum(share):
                        rank = (-round(2 * evens, 12), r.leader == a and not leader_only, key, a, b)
                        found.append(rank)
        if found:
            _, _, (topic, p), a, b = min(found)
            return Change(topic, p, 0, replace(s.replicas[(topic, p)].value,
                                               move=Move(a, b, leader_only)), "")  # fmt: skip
    return None


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_pruned_search_picks_the_move_every_pair_weighed_would(data: st.DataObject) -> None:
    """Random clusters (2 to 7 nodes, some drained; 1 to 30 partitions of 1 to 3 replicas,
    idle, equal, or random loads, so that ties are common): ``imbalance`` returns exactly the
    move ``every_move`` finds."""
    names = [f"n{i}" for i in range(data.draw(st.integers(2, 7)))]
    parts: dict[int, Replicas] = {}
    for p in range(data.draw(st.integers(1, 30))):
        holders = data.draw(st.permutations(names))[: data.draw(st.integers(1, 3))]
        parts[p] = Replicas(holders[0], tuple(holders), ())
    removing = frozenset(data.draw(st.lists(st.sampled_from(names), max_size=2)))
    s = snap(names, parts, removing=removing)
    kind = data.draw(st.sampled_from(["idle", "equal", "random"]))
    if kind != "idle":
        same = (500.0, 1 << 24)
        rate, size = (
            st.sampled_from([0.0, 3.0, 500.0, 4000.0]),
            st.sampled_from([0, 1 << 24, 1 << 33]),
        )
        s = loaded(s, {p: same if kind == "equal" else (data.draw(rate), data.draw(size))
                       for p in parts})  # fmt: skip
    expected, got = every_move(s), imbalance(s)
    if expected is None:
        assert got is None
    else:
        assert got is not None
        assert (got.topic, got.partition, got.new.move) == (
            expected.topic, expected.partition, expected.new.move)  # fmt: skip
