"""What a cluster node reports of its load (``NodeInfo.load`` and ``NodeInfo.loads``):
message rates smoothed over ``RATE_TAU_S``, so that the rebalancer (``cluster.balance``)
weighs sustained traffic rather than the last second's burst. A partition's rate is how fast
its log end moves; a replica still catching up reports none (it copies faster than the
partition is written), and starts measuring once in the ISR."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

RATE_TAU_S = 10.0  # time constant of the smoothing: a step in traffic shows 63% after it


class Rates:
    """Smoothed rates of counters that only grow (a log's end offset, messages put): call
    ``update`` with every counter's current value; counters not passed are forgotten (and
    start again from their next value when passed again)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # name: (start of the open window, count then, rate; None before a whole window)
        self._seen: dict[str, tuple[float, int, float | None]] = {}

    def update(self, counts: Mapping[str, int]) -> dict[str, float]:
        """The rate of each counter, per second: the first whole window (at least a second)
        as it is, then smoothed; 0.0 until then, or after the counter went backwards (a
        truncated or recreated log)."""
        now = self.clock()
        seen: dict[str, tuple[float, int, float | None]] = {}
        for name, count in counts.items():
            then, before, rate = self._seen.get(name, (now, count, None))
            if count < before:
                then, before, rate = now, count, None
            elapsed = now - then
            if elapsed >= 1.0:  # (sooner: keep the window open)
                step = (count - before) / elapsed
                weight = 1.0 if rate is None else 1.0 - math.exp(-elapsed / RATE_TAU_S)
                rate = (rate or 0.0) + weight * (step - (rate or 0.0))
                then, before = now, count
            seen[name] = (then, before, rate)
        self._seen = seen
        return {name: round(rate or 0.0, 1) for name, (_t, _c, rate) in seen.items()}
