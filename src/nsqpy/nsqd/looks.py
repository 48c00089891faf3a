"""When the server's ticker next looks at each client connection: its heartbeat and its
read and write deadlines (``nsqd.flow``).

A connection is filed under the tick its time falls in (``file``; 0: the next ``due``).
``due`` hands over, and forgets, every connection whose tick has begun: up to a tick
early, so a connection looks at the clock itself and files itself again, for the same
time when it is not there yet (``BufferedConnection.heartbeat``); it is never late. When
the clock goes back, everything is handed over, to be filed again by the new time. A tick then costs what is due, not what
is connected: ten thousand idle clients with a heartbeat every 30 s are looked at once in
30 s each, not ten times a second. Pure: no asyncio, no sockets; time is the server's
clock (fake in tests).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class LookSchedule(Generic[T]):
    """Items filed by the tick (``tick_ns`` long) at which they are next due."""

    def __init__(self, tick_ns: int) -> None:
        if tick_ns <= 0:
            raise ValueError(f"tick of {tick_ns} ns")
        self._tick = tick_ns
        self._ticks: dict[int, set[T]] = {}  # tick number -> what is due then
        self._filed: dict[T, int] = {}  # item -> its tick number
        self._latest = 0  # the latest ``now_ns`` of ``due``

    def file(self, item: T, at_ns: int) -> None:
        """``item`` is due at ``at_ns`` (server clock; in the past or 0: at the next
        ``due``), instead of when it was filed before."""
        tick = at_ns // self._tick
        old = self._filed.get(item)
        if old == tick:
            return
        if old is not None:
            self._drop(item, old)
        self._ticks.setdefault(tick, set()).add(item)
        self._filed[item] = tick

    def forget(self, item: T) -> None:
        old = self._filed.pop(item, None)
        if old is not None:
            self._drop(item, old)

    def due(self, now_ns: int) -> list[T]:
        """Everything filed under a tick that began by ``now_ns`` (what is due by then,
        and what is due later in the tick of ``now_ns``), forgotten here (file it again to
        be handed over again). Everything when the clock went back by more than a tick
        since the last call: what was filed by the clock before is to be filed again."""
        back, self._latest = now_ns < self._latest - self._tick, now_ns
        if back:
            everything = list(self._filed)
            self._ticks.clear()
            self._filed.clear()
            return everything
        last = now_ns // self._tick
        out: list[T] = []
        for tick in [t for t in self._ticks if t <= last]:
            items = self._ticks.pop(tick)
            for item in items:
                del self._filed[item]
            out += items
        return out

    def when(self, item: T) -> int | None:
        """The time (ns) of the tick ``item`` is filed under; None when it is not filed."""
        tick = self._filed.get(item)
        return None if tick is None else tick * self._tick

    def __len__(self) -> int:
        return len(self._filed)

    def _drop(self, item: T, tick: int) -> None:
        """Out of the set of ``tick`` (``_filed`` is the caller's)."""
        items = self._ticks[tick]
        items.discard(item)
        if not items:
            del self._ticks[tick]


__all__ = ["LookSchedule"]
