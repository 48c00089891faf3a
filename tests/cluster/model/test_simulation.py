"""The deterministic simulation (``sim.py``): seeded schedules of node deaths and returns,
lease expiry, lagging and repeated watch events, and two racing coordinators, with the
invariants checked on every write and liveness checked once failures stop."""

from __future__ import annotations

import time

import pytest

from .sim import run_schedule


@pytest.mark.parametrize("seed", [0, 1, 7, 42, 1234, 99991])
def test_a_seeded_schedule(seed: int) -> None:
    out = run_schedule(seed)
    assert out.steps == 65


def test_two_thousand_schedules() -> None:
    started = time.perf_counter()
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
    assert time.perf_counter() - started < 60


def test_a_schedule_is_reproducible() -> None:
    assert run_schedule(5) == run_schedule(5)
