"""The nemesis schedule: the same seed gives the same run; the profiles are as long and as
varied as the harness promises."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from itertools import pairwise

import pytest

from nsqpy.jepsen.layout import ETCD_HOSTS, R2_PARTITIONS
from nsqpy.jepsen.nemesis import etcd_minority_sides
from nsqpy.jepsen.schedule import DOUBLE_FAULT, KINDS, PROFILES, make_schedule, schedule_length


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    profile = PROFILES["long"]
    first = [s.to_json() for s in make_schedule(profile, 42)]
    assert first == [s.to_json() for s in make_schedule(profile, 42)]
    assert first != [s.to_json() for s in make_schedule(profile, 43)]


def test_the_short_profile_runs_every_kind_once_in_about_two_minutes() -> None:
    profile = PROFILES["short"]
    for seed in range(20):
        steps = make_schedule(profile, seed)
        assert sorted(s.kind for s in steps) == sorted(KINDS)
        assert 90 < schedule_length(steps, profile) < 150


def test_the_long_profile_lasts_30_minutes_with_ten_cycles_of_every_kind() -> None:
    profile = PROFILES["long"]
    for seed in range(20):
        steps = make_schedule(profile, seed)
        assert Counter(s.kind for s in steps) == {kind: 10 for kind in KINDS}
        assert schedule_length(steps, profile) >= 30 * 60


def test_steps_follow_each_other_without_overlap() -> None:
    steps = make_schedule(PROFILES["long"], 5)
    for before, after in pairwise(steps):
        assert after.at >= before.at + before.duration + before.rest - 0.02


def test_choices_name_hosts_of_the_cluster() -> None:
    profile = replace(PROFILES["long"], nodes=5)
    nodes = {f"n{i}" for i in range(1, 6)}
    for step in make_schedule(profile, 11):
        p = step.params
        if step.kind == "halves":
            assert set(p["a"]) | set(p["b"]) == nodes | {"l1", "l2", "e1", "e2", "e3"}
            assert not set(p["a"]) & set(p["b"]) and abs(len(p["a"]) - len(p["b"])) <= 1
        elif step.kind == "etcd-minority":
            assert len(p["nodes"]) == 2 and set(p["nodes"]) <= nodes  # a minority of five
            assert p["member"] in ETCD_HOSTS
        elif step.kind in ("kill", "pause"):
            assert p.get("node") in nodes or p.get("leader_of") in (0, 1)
        elif step.kind in ("lossy", "disk-full"):
            assert p["node"] in nodes


def test_a_schedule_over_five_nodes_can_be_asked_of_any_profile() -> None:
    steps = make_schedule(PROFILES["short"], 3, nodes=5)
    nodes = {n for s in steps for n in s.params.get("nodes", [])}
    assert nodes <= {f"n{i}" for i in range(1, 6)}


@pytest.mark.parametrize("nodes", [3, 5])
def test_etcd_minority_cuts_exactly_one_etcd_member_from_the_quorum(nodes: int) -> None:
    names = {f"n{i}" for i in range(1, nodes + 1)}
    members = set()
    for seed in range(30):
        for step in make_schedule(PROFILES["long"], seed, nodes=nodes):
            if step.kind != "etcd-minority":
                continue
            minority, majority = etcd_minority_sides(step.params)
            assert [h for h in minority if h in ETCD_HOSTS] == [step.params["member"]]
            assert sorted(majority) == sorted(set(ETCD_HOSTS) - {step.params["member"]})
            assert len(majority) == 2  # etcd keeps its quorum
            cut_nodes = [h for h in minority if h in names]
            assert len(cut_nodes) == (nodes - 1) // 2  # a minority of the nsqd goes with it
            members.add(step.params["member"])
    assert members == set(ETCD_HOSTS)  # any member may be the one


@pytest.mark.parametrize(("profile", "count"), [("short", 1), ("long", 10)])
def test_both_profiles_take_a_partitions_leader_and_follower_down(profile: str, count: int) -> None:
    seen = set()
    for seed in (3, 20261126, *range(10)):
        steps = [s for s in make_schedule(PROFILES[profile], seed) if s.kind == DOUBLE_FAULT]
        assert len(steps) == count
        for step in steps:
            p = step.params
            assert 0 <= p["partition"] < R2_PARTITIONS
            assert p["first"] in ("leader", "follower")
            assert p["back_first"] in ("leader", "follower")
            assert p["follower_down"] in ("kill", "pause")
            # one down long enough for the 5 s replication timeout (follower first) or the
            # 3 s lease and an election (leader first), then both, then one back alone
            assert 6.0 <= p["second_at"] < p["back_at"] < step.duration
            assert p["back_at"] - p["second_at"] >= 2.0
            assert step.duration - p["back_at"] >= 3.5
            seen.add((p["first"], p["follower_down"], p["back_first"]))
    if profile == "long":
        assert len(seen) == 8  # every order, way down and way back is drawn
