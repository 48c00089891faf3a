"""``--status-every``: log request timings every N requests, as bitly/timer_metrics does.

Every ``status_every`` recorded durations one line is logged and the window restarts:
``[aggregate]: finished 250 - 99th: 1.20ms - 95th: 0.90ms - avg: 0.40ms``. ``0`` disables.
Pure bookkeeping plus a logging call: no I/O, no asyncio.
"""

from __future__ import annotations

import logging

log = logging.getLogger("nsqpy.tools")


class TimerMetrics:
    def __init__(self, status_every: int, prefix: str) -> None:
        self.status_every = status_every
        self.prefix = prefix
        self.timings: list[float] = []
        self.lines: list[str] = []  # the status lines produced (kept for inspection)

    def status(self, elapsed: float) -> None:
        """Record one request that took ``elapsed`` seconds."""
        if self.status_every <= 0:
            return
        self.timings.append(elapsed)
        if len(self.timings) < self.status_every:
            return
        ordered = sorted(self.timings)
        n = len(ordered)
        p99 = ordered[max(0, int(n * 0.99) - 1)] * 1000
        p95 = ordered[max(0, int(n * 0.95) - 1)] * 1000
        avg = sum(ordered) / n * 1000
        line = f"{self.prefix} finished {n} - 99th: {p99:.02f}ms - 95th: {p95:.02f}ms - avg: {avg:.02f}ms"
        self.lines = [*self.lines[-9:], line]
        log.info("%s", line)
        self.timings.clear()
