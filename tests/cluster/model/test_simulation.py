"""The deterministic simulation (``nsqpy.testing.control_sim``): seeded schedules of node deaths and returns,
lease expiry, lagging and repeated watch events, and two racing coordinators, with the
invariants checked on every write and liveness checked once failures stop."""

from __future__ import annotations

import pytest

from nsqpy.testing.control_sim import run_scale, run_schedule


@pytest.mark.parametrize("seed", [0, 1, 7, 42, 1234, 99991])
def test_a_seeded_schedule(seed: int) -> None:
    out = run_schedule(seed)
    assert out.steps == 65


def test_two_thousand_schedules() -> None:
    totals = [0, 0, 0]
    for seed in range(2000):
        out = run_schedule(seed)
        totals[0] += out.applied
        totals[1] += out.failed
        totals[2] += out.elections
    applied, failed, leaders = totals
    # the schedules did exercise the decisions: changes applied, stale ones refused by the
    # txn guard, many (partition, leader_epoch) pairs
    assert applied > 5_000 and failed > 1_000 and leaders > 5_000, totals


def test_a_schedule_is_reproducible() -> None:
    assert run_schedule(5) == run_schedule(5)


def test_a_cluster_at_scale_fails_over_repairs_and_rebalances() -> None:
    """``run_scale`` on a small cluster (the bench runs it on a hundred nodes): placement
    even within one replica and one lead per node; every partition the killed node led has
    a live leader in the round its lease expired; every ISR full again after the repair
    delay; the rebalancer moves replicas to the new nodes; nothing flaps."""
    out = run_scale(nodes=12, topics=3, partitions=20, rebalance_rounds=60)
    assert out.partitions == 60
    assert out.replicas_per_node[1] - out.replicas_per_node[0] <= 1, out
    assert out.leaders_per_node[1] - out.leaders_per_node[0] <= 1, out
    assert out.killed_leading >= 5 and out.failover_rounds == 1, out
    assert out.failover_changes >= out.killed_leading, out
    assert out.repair_rounds < 400, "every ISR full again"
    assert out.rebalance_moves > 0 and out.balanced_replicas_per_node[0] > 0, out
    assert out.flaps == 0
