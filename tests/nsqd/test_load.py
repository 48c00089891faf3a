"""``nsqd.load.Rates``: the smoothed message rates a cluster node reports to the rebalancer."""

from __future__ import annotations

import math

from nsqpy.nsqd.load import RATE_TAU_S, Rates


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_whole_window_is_the_rate_then_changes_are_smoothed() -> None:
    clock = Clock()
    rates = Rates(clock)
    assert rates.update({"t/0": 1000}) == {"t/0": 0.0}
    clock.now += 0.5
    assert rates.update({"t/0": 1100}) == {"t/0": 0.0}  # (less than a second: window open)
    clock.now += 0.5
    assert rates.update({"t/0": 1200}) == {"t/0": 200.0}  # 200 in the first second
    clock.now += 2.0
    got = rates.update({"t/0": 1200})  # it stopped: the rate decays, not drops
    assert got["t/0"] == round(200.0 * math.exp(-2.0 / RATE_TAU_S), 1)
    for _ in range(60):
        clock.now += 1.0
        got = rates.update({"t/0": 1200})
    assert got["t/0"] < 1.0


def test_a_counter_left_out_is_forgotten_and_one_going_backwards_starts_again() -> None:
    clock = Clock()
    rates = Rates(clock)
    rates.update({"a": 0, "b": 0})
    clock.now += 1.0
    assert rates.update({"a": 50, "b": 10}) == {"a": 50.0, "b": 10.0}
    clock.now += 1.0
    assert rates.update({"a": 100}) == {"a": 50.0}  # b not passed: gone
    clock.now += 1.0
    assert rates.update({"a": 5, "b": 500}) == {"a": 0.0, "b": 0.0}  # a truncated, b new
    clock.now += 1.0
    assert rates.update({"a": 25, "b": 530}) == {"a": 20.0, "b": 30.0}
