"""End-to-end processing latency (publish to FIN) over a sliding window, for /stats.

Owns ``LatencyWindow``: what nsqd keeps per channel when ``--e2e-processing-latency-
percentile`` is set. As in nsqd, the window is two halves that take turns: samples go into
the current half; every ``window/2`` the older half is emptied and becomes the current one;
a query merges both. Each half is a histogram of log-spaced buckets (about 1% wide) that
keeps each bucket's count and sum, so memory is bounded by the range of latencies, not by
the message rate, and a percentile (the mean of its bucket) is within 1% of the true
value, exact when the bucket's samples are equal. Time is given, never read. Must not import asyncio or any
server.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

GROWTH = 1.01  # each bucket is 1% wider than the one before
_LOG_GROWTH = math.log(GROWTH)


def bucket_of(latency_ns: int) -> int:
    """The bucket of a latency: 0 for <= 1 ns, then one per 1% step."""
    return 0 if latency_ns <= 1 else 1 + int(math.log(latency_ns) / _LOG_GROWTH)


# bucket -> [samples, sum of their latencies in ns]
Histogram = dict[int, list[int]]


def _merge(into: Histogram, other: Histogram) -> None:
    for bucket, (n, total) in other.items():
        cell = into.get(bucket)
        if cell is None:
            into[bucket] = [n, total]
        else:
            cell[0] += n
            cell[1] += total


class LatencyWindow:
    """Latencies of the last ``window_ns`` (between ``window_ns/2`` and ``window_ns`` of them)."""

    def __init__(self, window_ns: int, percentiles: Sequence[float], now: int) -> None:
        self.half_ns = max(1, window_ns // 2)
        self.percentiles = sorted(percentiles, reverse=True)
        self._halves: list[Histogram] = [{}, {}]
        self._current = 0
        self._moved_at = now

    def _move(self, now: int) -> None:
        """Rotate the halves for the time that passed (nsqd moves when strictly past)."""
        if now <= self._moved_at + self.half_ns:
            return
        steps = (now - self._moved_at - 1) // self.half_ns
        if steps >= 2:
            for half in self._halves:
                half.clear()
        else:
            self._current ^= 1
            self._halves[self._current].clear()
        self._moved_at += steps * self.half_ns

    def insert(self, latency_ns: int, now: int) -> None:
        self._move(now)
        latency_ns = max(0, latency_ns)
        cell = self._halves[self._current].setdefault(bucket_of(latency_ns), [0, 0])
        cell[0] += 1
        cell[1] += latency_ns

    def histogram(self, now: int) -> Histogram:
        """The window's histogram as of ``now`` (both halves merged, a copy)."""
        self._move(now)
        merged: Histogram = {}
        for half in self._halves:
            _merge(merged, half)
        return merged

    def buckets(self) -> int:
        """How many buckets are held (the memory used)."""
        return len(self._halves[0]) + len(self._halves[1])


def latency_result(
    windows: Iterable[LatencyWindow], percentiles: Sequence[float], now: int
) -> dict[str, object]:
    """nsqd's ``e2e_processing_latency``: {"count", "percentiles": [{"quantile", "value"}]}
    over the given windows merged (a topic merges its channels'); ``{"count": 0,
    "percentiles": null}`` when no percentile is tracked."""
    if not percentiles:
        return {"count": 0, "percentiles": None}
    merged: Histogram = {}
    for window in windows:
        _merge(merged, window.histogram(now))
    count = sum(n for n, _ in merged.values())
    ordered = sorted(merged.items())
    out = []
    for q in sorted(percentiles, reverse=True):
        value = 0.0
        if count:
            rank = max(1, math.ceil(q * count))
            seen = 0
            for _bucket, (n, total) in ordered:
                seen += n
                if seen >= rank:
                    value = total / n
                    break
        out.append({"quantile": q, "value": value})
    return {"count": count, "percentiles": out}
