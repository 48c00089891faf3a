"""Each reconcile rule on a hand-made snapshot, and the level-triggered property."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import event, given, settings
from hypothesis import strategies as st

from nsqpy.cluster import decisions
from nsqpy.cluster.decisions import Stuck, plan, reconcile, track_missing
from nsqpy.cluster.model import Change, Move, NodeInfo, Replicas, Snapshot, TopicMeta, Versioned

S = 1_000_000_000
REPAIR, EMERGENCY = 600 * S, 10 * S
NOW = 10_000 * S


def node(node_id: str, **ends: tuple[int, int]) -> NodeInfo:
    """A live node reporting ``ends`` for partitions of topic t (``p0=(le, end)``)."""
    return NodeInfo(node_id, node_id, "127.0.0.1", 4150, 4151, "127.0.0.1:4250", "t", 0,
                    ends={f"t/{k[1:]}": v for k, v in ends.items()})  # fmt: skip


def snap(nodes: list[NodeInfo], parts: dict[int, Replicas], replicator: int = 3) -> Snapshot:
    return Snapshot(
        nodes={n.id: n for n in nodes},
        topics={"t": TopicMeta(partition_num=len(parts), replicator=replicator, multipart=True)},
        replicas={("t", p): Versioned(r, 100 + p) for p, r in parts.items()},
        revision=200,
    )


def run(s: Snapshot, missing: dict[str, int] | None = None) -> list[Change]:
    return reconcile(s, NOW, missing or {}, REPAIR, EMERGENCY)


def applied(s: Snapshot, changes: list[Change]) -> Snapshot:
    replicas = dict(s.replicas)
    for c in changes:
        replicas[(c.topic, c.partition)] = Versioned(c.new, s.revision + 1)
    return Snapshot(s.nodes, s.topics, replicas, s.revision + 1)


def test_nothing_to_do_on_a_healthy_cluster() -> None:
    r = Replicas("a", ("a", "b", "c"), (), epoch=4, leader_epoch=2)
    assert run(snap([node("a"), node("b"), node("c")], {0: r})) == []


def test_a_dead_leader_is_replaced_by_the_isr_member_with_the_longest_log() -> None:
    r = Replicas("a", ("a", "b", "c"), (), epoch=4, leader_epoch=2)
    s = snap([node("b", p0=(2, 90)), node("c", p0=(2, 100))], {0: r})
    [change] = run(s)
    assert change.expected_revision == 100 and (change.topic, change.partition) == ("t", 0)
    assert change.new == Replicas("c", ("c", "b"), ("a",), epoch=5, leader_epoch=3)
    assert "elect c" in change.reason


def test_election_ties_go_to_the_node_leading_fewer_partitions_then_to_the_id() -> None:
    dead_leader = Replicas("a", ("a", "b", "c"), (), epoch=1, leader_epoch=1)
    other = Replicas("b", ("b",), (), epoch=1, leader_epoch=1)
    s = snap([node("b", p0=(1, 5)), node("c", p0=(1, 5))], {0: dead_leader, 1: other}, replicator=1)
    assert run(s)[0].new.leader == "c"  # b already leads partition 1
    s = snap([node("b", p0=(1, 5)), node("c", p0=(1, 5))], {0: dead_leader})
    assert run(s)[0].new.leader == "b"
    s = snap([node("b"), node("c", p0=(1, 0))], {0: dead_leader})
    assert run(s)[0].new.leader == "c"  # a report, even of an empty log, beats none


def test_no_unclean_election_from_catch_up() -> None:
    r = Replicas("a", ("a", "b"), ("c",), epoch=4, leader_epoch=2)
    s = snap([node("c", p0=(2, 1000))], {0: r})
    result = plan(s, NOW, {"a": 0, "b": 0}, REPAIR, EMERGENCY)
    assert result.changes == []
    assert result.stuck == [Stuck("t", 0, result.stuck[0].reason)]
    assert "no ISR member is" in result.stuck[0].reason


def test_a_live_leader_that_cannot_write_hands_over_to_the_isr_member_with_the_longest_log() -> (
    None
):
    r = Replicas("a", ("a", "b", "c"), (), epoch=4, leader_epoch=2)
    failing = replace(node("a", p0=(2, 100)), failing={"t/0": 2})
    s = snap([failing, node("b", p0=(2, 90)), node("c", p0=(2, 100))], {0: r})
    [change] = run(s)
    assert change.new == Replicas("c", ("c", "b"), ("a",), epoch=5, leader_epoch=3)
    assert "leader a cannot write it" in change.reason
    assert run(applied(s, [change])) == []  # (a's report is of the old leader epoch now)


def test_a_failing_report_of_another_epoch_or_with_no_isr_member_to_take_over_changes_nothing() -> (
    None
):
    r = Replicas("a", ("a", "b", "c"), (), epoch=4, leader_epoch=2)
    stale = replace(node("a"), failing={"t/0": 1})
    assert run(snap([stale, node("b"), node("c")], {0: r})) == []
    alone = Replicas("a", ("a",), ("b", "c"), epoch=4, leader_epoch=2)
    failing = replace(node("a"), failing={"t/0": 2})
    result = plan(snap([failing, node("b"), node("c")], {0: alone}), NOW, {}, REPAIR, EMERGENCY)
    assert all(c.new.leader == "a" for c in result.changes)  # never an unclean election
    assert result.stuck == []


def test_a_dead_isr_follower_moves_to_catch_up() -> None:
    r = Replicas("a", ("a", "b", "c"), (), epoch=4, leader_epoch=2)
    [change] = run(snap([node("a"), node("c")], {0: r}))
    assert change.new == Replicas("a", ("a", "c"), ("b",), epoch=5, leader_epoch=2)


def reporting(
    node_id: str,
    leader_epoch: int,
    *,
    late: tuple[str, ...] = (),
    caught_up: tuple[str, ...] = (),
    **ends: tuple[int, int],
) -> NodeInfo:
    """A live leader of t/0 reporting followers lagging and catch-up members caught up in
    ``leader_epoch``."""
    base = node(node_id, **ends)
    return replace(base, lagging={"t/0": (leader_epoch, late)} if late else {},
                   caught_up={"t/0": (leader_epoch, caught_up)} if caught_up else {})  # fmt: skip


def with_revisions(s: Snapshot, **revisions: int) -> Snapshot:
    return replace(s, node_revisions=revisions)


def test_a_caught_up_member_joins_the_isr() -> None:
    """Its end is the leader's, in the leader's epoch, and the leader reports it caught up
    (it waits for it from then on); the join is guarded by the leader's report."""
    r = Replicas("a", ("a",), ("b", "c", "d", "e"), epoch=4, leader_epoch=2)
    nodes = [
        reporting("a", 2, caught_up=("b", "c", "d"), p0=(2, 50)),
        node("b", p0=(2, 50)),
        node("c", p0=(2, 49)),
        node("d", p0=(1, 50)),
        node("e", p0=(2, 50)),  # in step, but the leader has not said so
    ]
    [change] = run(with_revisions(snap(nodes, {0: r}, replicator=5), a=77))
    assert change.new == Replicas("a", ("a", "b"), ("c", "d", "e"), epoch=5, leader_epoch=2)
    assert change.guards == (("a", 77),), "void once the leader reports again"
    # the leader has not reported its new epoch yet (it has not taken over): no join
    nodes[0] = reporting("a", 1, caught_up=("b", "c", "d"), p0=(1, 50))
    assert run(snap(nodes, {0: r}, replicator=5)) == []


def lagging_leader(
    node_id: str, leader_epoch: int, *late: str, **ends: tuple[int, int]
) -> NodeInfo:
    return replace(node(node_id, **ends), lagging={"t/0": (leader_epoch, late)})


def test_a_follower_the_leader_reports_lagging_moves_to_catch_up() -> None:
    r = Replicas("a", ("a", "b", "c"), (), epoch=4, leader_epoch=2)
    nodes = [lagging_leader("a", 2, "b", p0=(2, 50)), node("b", p0=(2, 50)), node("c")]
    [change] = run(snap(nodes, {0: r}))
    assert change.new == Replicas("a", ("a", "c"), ("b",), epoch=5, leader_epoch=2)
    assert "lagging" in change.reason
    # ... and does not join again while the leader says so, though its end is the leader's
    assert run(applied(snap(nodes, {0: r}), [change])) == []
    nodes[0] = reporting("a", 2, caught_up=("b",), p0=(2, 50))  # it keeps up again: it joins
    [back] = run(applied(snap(nodes, {0: r}), [change]))
    assert back.new == Replicas("a", ("a", "c", "b"), (), epoch=6, leader_epoch=2)


def test_a_lagging_report_of_another_epoch_or_from_a_non_leader_changes_nothing() -> None:
    r = Replicas("a", ("a", "b", "c"), (), epoch=4, leader_epoch=2)
    stale = [lagging_leader("a", 1, "b"), node("b"), node("c")]
    assert run(snap(stale, {0: r})) == []
    not_leader = [node("a"), node("b"), lagging_leader("c", 2, "b")]
    assert run(snap(not_leader, {0: r})) == []


def test_a_missing_holder_is_replaced_after_the_repair_delay() -> None:
    r = Replicas("a", ("a", "b"), ("c",), epoch=4, leader_epoch=2)
    nodes = [node("a"), node("b"), node("d"), node("e")]
    s = snap(nodes, {0: r})
    other = Versioned(
        Replicas("d", ("d",), (), epoch=1, leader_epoch=1), 1
    )  # a topic being deleted
    s = Snapshot(s.nodes, s.topics, {**s.replicas, ("u", 0): other}, s.revision)
    assert run(s, {"c": NOW - REPAIR + 1}) == []
    [change] = run(s, {"c": NOW - REPAIR})
    assert change.new == Replicas(
        "a", ("a", "b"), ("e",), epoch=5, leader_epoch=2
    )  # e holds less than d


def test_the_emergency_delay_applies_when_at_most_half_the_replicas_are_live() -> None:
    r = Replicas("a", ("a",), ("b", "c"), epoch=4, leader_epoch=2)
    s = snap([node("a"), node("d"), node("e")], {0: r})
    missing = {"b": NOW - EMERGENCY, "c": NOW - EMERGENCY + 1}
    [change] = run(s, missing)
    assert change.new == Replicas("a", ("a",), ("c", "d"), epoch=5, leader_epoch=2)


def test_with_no_spare_node_a_missing_holder_stays() -> None:
    r = Replicas("a", ("a", "b"), ("c",), epoch=4, leader_epoch=2)
    assert run(snap([node("a"), node("b")], {0: r}), {"c": 0}) == []


def test_holders_are_filled_up_to_and_trimmed_down_to_the_replicator() -> None:
    r = Replicas("a", ("a",), (), epoch=1, leader_epoch=1)
    [change] = run(snap([node("a"), node("b"), node("c")], {0: r}, replicator=2))
    assert change.new.catchup == ("b",)
    r = Replicas("a", ("a", "b"), ("c", "d"), epoch=1, leader_epoch=1)
    [change] = run(snap([node("a"), node("b"), node("c")], {0: r}, replicator=3))
    assert change.new == Replicas("a", ("a", "b"), ("c",), epoch=2, leader_epoch=1)


def test_one_change_per_partition_carrying_the_whole_next_state() -> None:
    r = Replicas("a", ("a", "b", "c"), (), epoch=4, leader_epoch=2)
    s = snap([node("c", p0=(2, 7)), node("d"), node("e")], {0: r})
    [change] = run(s, {"a": 0, "b": 0})
    # c leads; a and b leave the ISR; both were missing past the emergency delay: replaced
    assert change.new == Replicas("c", ("c",), ("d", "e"), epoch=5, leader_epoch=3)
    assert run(applied(s, [change]), {"a": 0, "b": 0}) == []


def test_level_triggered_and_pure() -> None:
    parts = {
        0: Replicas("a", ("a", "b"), (), epoch=4, leader_epoch=2),
        1: Replicas("b", ("b", "c"), ("a",), epoch=2, leader_epoch=1),
        2: Replicas("c", ("c",), ("b",), epoch=9, leader_epoch=5),
    }
    s = snap([node("b", p0=(2, 3), p2=(5, 8)), node("c", p2=(5, 8)), node("d")], parts)
    before = dict(s.replicas)
    first = run(s)
    assert first == run(s) and dict(s.replicas) == before
    assert [c.partition for c in first] == [0, 2]  # 1: a is missing, not for long
    assert run(applied(s, first)) == []


def test_topics_without_meta_are_left_alone() -> None:
    r = Replicas("a", ("a", "b"), (), epoch=4, leader_epoch=2)
    s = Snapshot(nodes={"b": node("b")}, replicas={("gone", 0): Versioned(r, 5)})
    assert run(s) == []


def test_track_missing_remembers_the_first_time_a_holder_was_seen_missing() -> None:
    r = Replicas("a", ("a", "b"), ("c",), epoch=4, leader_epoch=2)
    s = snap([node("a")], {0: r})
    assert track_missing({}, s, 7) == {"b": 7, "c": 7}
    assert track_missing({"b": 3, "z": 1}, s, 7) == {"b": 3, "c": 7}
    s = snap([node("a"), node("b")], {0: r})
    assert track_missing({"b": 3, "c": 4}, s, 9) == {"c": 4}


@settings(max_examples=1000, deadline=None)
@given(st.data())
def test_the_quiet_shortcut_changes_no_decision(data: st.DataObject) -> None:
    """``plan`` skips the rules for a partition ``_quiet`` calls quiet (a full live ISR none
    being drained, no catch-up member, no move, no follower lagging and no failing write
    reported in the leader's epoch). On random partitions (live or dead holders, drains,
    moves, catch-up members, lagging and failing reports in this or another leader epoch,
    replicator 1 to 3), the plan is the same as with every partition worked out rule by
    rule, and both kinds are drawn."""
    names = ["a", "b", "c", "d", "e"]
    everyone = st.just(names)  # (half the time: every node live, so that many are quiet)
    live = data.draw(everyone | st.lists(st.sampled_from(names), min_size=1, unique=True))
    removing = frozenset(data.draw(st.lists(st.sampled_from(names), max_size=2)))
    parts, infos = {}, {n: node(n) for n in live}
    replicator = data.draw(st.integers(1, 3))
    for p in range(data.draw(st.integers(1, 4))):
        order = data.draw(st.permutations(names))
        isr = order[: data.draw(st.sampled_from([replicator] * 3 + [1, 2, 3]))]
        catchup = order[len(isr) : len(isr) + data.draw(st.sampled_from([0, 0, 1]))]
        move = data.draw(
            st.sampled_from([None] * 3 + [Move(isr[0], order[-1]), Move(isr[0], order[1], True)])
        )
        le = data.draw(st.integers(1, 2))
        epoch = st.sampled_from([le, le, 3 - le])  # (a report of this leader epoch, or not)
        parts[p] = Replicas(isr[0], tuple(isr), tuple(catchup), epoch=5, leader_epoch=le, move=move)
        if isr[0] in infos:
            said = infos[isr[0]]
            if data.draw(st.booleans()):
                lag = data.draw(st.lists(st.sampled_from(order[:3]), min_size=1, max_size=2))
                said = replace(
                    said,
                    lagging={**said.lagging, f"t/{p}": (data.draw(epoch), tuple(lag))},
                )
            if data.draw(st.booleans()):
                said = replace(said, failing={**said.failing, f"t/{p}": data.draw(epoch)})
            infos[isr[0]] = said
    s = replace(snap(list(infos.values()), parts, replicator=replicator),
                removing=removing)  # fmt: skip
    fast = plan(s, NOW, {}, REPAIR, EMERGENCY)
    real = decisions._quiet
    try:
        decisions._quiet = lambda *_: False  # type: ignore[assignment]
        slow = plan(s, NOW, {}, REPAIR, EMERGENCY)
    finally:
        decisions._quiet = real
    assert fast == slow
    quiet = [decisions._quiet(r.value, s.topics["t"], s.nodes, removing, "t", p)
             for (_, p), r in s.replicas.items()]  # fmt: skip
    event("quiet" if any(quiet) else "none quiet")
