"""Placement: distinct live nodes per partition, leaders spread, Youzan's limits and codes."""

from __future__ import annotations

from collections import Counter

import pytest

from nsqpy.cluster.model import NodeInfo, Replicas, Snapshot, TopicMeta, Versioned
from nsqpy.cluster.placement import PlacementError, place_topic


def node(node_id: str) -> NodeInfo:
    return NodeInfo(node_id, node_id, "127.0.0.1", 4150, 4151, "127.0.0.1:4250", "t", 0)


def cluster(*ids: str, replicas: dict[tuple[str, int], Replicas] | None = None) -> Snapshot:
    return Snapshot(
        nodes={i: node(i) for i in ids},
        replicas={k: Versioned(v, 1) for k, v in (replicas or {}).items()},
    )


def check_shape(placed: list[Replicas], meta: TopicMeta, live: set[str]) -> None:
    assert len(placed) == meta.partition_num
    for r in placed:
        assert len(r.isr) == meta.replicator == len(set(r.isr))
        assert r.leader == r.isr[0] and set(r.isr) <= live
        assert r.catchup == () and r.epoch == 1 and r.leader_epoch == 1


def test_four_partitions_two_replicas_on_three_nodes() -> None:
    meta = TopicMeta(partition_num=4, replicator=2, multipart=True)
    placed = place_topic("orders", meta, cluster("a", "b", "c"))
    check_shape(placed, meta, {"a", "b", "c"})
    assert sum(len(r.holders) for r in placed) == 8
    assert sorted(Counter(r.leader for r in placed).values()) == [1, 1, 2]
    assert sorted(Counter(n for r in placed for n in r.holders).values()) == [2, 3, 3]


def test_without_multipart_each_node_holds_one_replica_of_the_topic() -> None:
    meta = TopicMeta(partition_num=3, replicator=2)
    placed = place_topic("t", meta, cluster(*"abcdefg"))
    check_shape(placed, meta, set("abcdefg"))
    held = [n for r in placed for n in r.holders]
    assert len(held) == len(set(held)) == 6


@pytest.mark.parametrize(
    ("meta", "nodes", "code"),
    [
        (TopicMeta(4, 2), "abc", PlacementError.NODE_UNAVAILABLE),  # 8 replicas > 3 nodes
        (TopicMeta(4, 1), "abc", PlacementError.NODE_UNAVAILABLE),  # partitions > nodes
        (TopicMeta(1, 4, multipart=True), "abc", PlacementError.NODE_UNAVAILABLE),
        (TopicMeta(1, 1), "", PlacementError.NODE_UNAVAILABLE),
        (TopicMeta(0, 1), "abc", PlacementError.INVALID_PARTITION_NUM),
        (TopicMeta(256, 1, multipart=True), "abc", PlacementError.INVALID_PARTITION_NUM),
        (TopicMeta(1, 0), "abc", PlacementError.INVALID_REPLICATOR),
        (TopicMeta(1, 6), "abcdefg", PlacementError.INVALID_REPLICATOR),
    ],
)
def test_limits_answer_youzans_codes(meta: TopicMeta, nodes: str, code: str) -> None:
    with pytest.raises(PlacementError) as info:
        place_topic("t", meta, cluster(*nodes))
    assert info.value.code == code and info.value.status == 400
    assert str(meta.partition_num if "PARTITION" in code else meta.replicator) in str(info.value)


def test_ordered_also_allows_several_partitions_per_node() -> None:
    meta = TopicMeta(partition_num=8, replicator=3, ordered=True)
    check_shape(place_topic("t", meta, cluster("a", "b", "c")), meta, {"a", "b", "c"})
    meta = TopicMeta(partition_num=255, replicator=1, multipart=True)
    assert len(place_topic("t", meta, cluster("a"))) == 255


def test_leader_hint_leads_the_first_partition_when_live() -> None:
    snap = cluster("a", "b", "c")
    meta = TopicMeta(partition_num=3, replicator=1)
    for hint in "abc":
        placed = place_topic("auto", meta, snap, leader_hint=hint)
        assert placed[0].leader == hint
        assert {r.leader for r in placed} == {"a", "b", "c"}
    assert place_topic("auto", meta, snap, leader_hint="gone") == place_topic("auto", meta, snap)


def test_topics_do_not_all_start_on_the_same_node_and_placement_is_stable() -> None:
    snap = cluster("a", "b", "c", "d", "e")
    meta = TopicMeta(partition_num=1, replicator=1)
    firsts = {place_topic(f"topic{i}", meta, snap)[0].leader for i in range(20)}
    assert len(firsts) >= 3
    assert place_topic("x", meta, snap) == place_topic("x", meta, snap)


def test_existing_load_steers_new_leaders_and_replicas_away() -> None:
    busy = {("old", p): Replicas("a", ("a", "b")) for p in range(3)}
    placed = place_topic("new", TopicMeta(2, 1), cluster("a", "b", "c", replicas=busy))
    assert [r.leader for r in placed] == ["c", "b"]  # a leads 3, b holds 3 but leads none


def test_expanding_places_only_the_new_partitions_around_the_old_ones() -> None:
    meta = TopicMeta(partition_num=2, replicator=2, multipart=True)
    snap = cluster("a", "b", "c")
    first = place_topic("t", meta, snap)
    grown = TopicMeta(partition_num=3, replicator=2, multipart=True)
    snap = cluster("a", "b", "c", replicas={("t", p): r for p, r in enumerate(first)})
    added = place_topic("t", grown, snap, first_partition=2)
    assert len(added) == 1
    assert added[0].leader not in {r.leader for r in first}  # the node leading nothing yet
