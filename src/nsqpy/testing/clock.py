"""A fake clock for the daemons' injected time (``clock=`` of ``Broker``, ``NsqdServer`` and
``NsqLookupd``): heartbeats, timeouts, deferred and in-flight expiry move only when a test says.

Imports only the standard library.
"""

from __future__ import annotations


class FakeClock:
    """A clock in nanoseconds that moves only when told to."""

    def __init__(self, start_ns: int = 1_700_000_000_000_000_000) -> None:
        self.now = start_ns

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += int(ms * 1_000_000)
