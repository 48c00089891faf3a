"""The data-plane simulation (``data_sim``) over many seeds: acknowledged and shown records
are on every ISR member after every step, and the logs end equal."""

from __future__ import annotations

from pathlib import Path

from .data_sim import run_schedule


def test_two_hundred_schedules(tmp_path: Path) -> None:
    elections = crashes = acked = renewals = 0
    for seed in range(200):
        world = run_schedule(seed, tmp_path / f"s{seed}")
        elections += world.elections
        crashes += world.crashes
        renewals += world.renewals
        acked += len(world.acked)
    print(
        f"\n200 schedules: {crashes} power losses, {elections} elections, {renewals} leaders"
        f" back in a new epoch, {acked} acknowledged"
    )
    assert crashes > 50 and elections > 50 and renewals > 20 and acked > 10_000


def test_a_schedule_is_reproducible(tmp_path: Path) -> None:
    one = run_schedule(7, tmp_path / "a")
    two = run_schedule(7, tmp_path / "b")
    assert (one.acked, one.shown, one.elections) == (two.acked, two.shown, two.elections)
