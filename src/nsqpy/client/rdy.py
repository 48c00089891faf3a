"""RDY planning: how a consumer spreads ``max_in_flight`` over its connections (SPEC 7.2).

Pure functions over snapshots of the connections, no I/O and no clock of its own (``now``
is passed in), so every rule is tested without sockets. The consumer asks for a plan on
every event that can change it (connection added or lost, backoff state, a periodic tick)
and sends RDY only to connections whose value changes, lowering before raising so the
sum of RDY never exceeds ``max_in_flight``.

Rules:
- ``PAUSED`` (backoff timer running, consumer closing): every connection RDY 0.
- ``TESTING`` (backoff timer expired): exactly one connection RDY 1, the one that has
  waited longest; on a rotation tick an idle tester hands it on, so a test never waits
  on an nsqd that has nothing to deliver.
- ``NORMAL`` with ``max_in_flight >= connections``: an even split (the remainder goes to
  the first connections by key), each capped by the server's ``max_rdy_count``.
- ``NORMAL`` with fewer ``max_in_flight`` than connections: at most ``max_in_flight``
  connections hold RDY 1. On a rotation tick a holder gives its RDY up when it has had no
  message in flight and none for ``idle_timeout``, or has held it for ``hold_timeout``;
  the freed grants go to the connections that have waited longest, so none starves.

Imports only the standard library.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class RdyMode(enum.Enum):
    NORMAL = "normal"
    TESTING = "testing"
    PAUSED = "paused"


class RdyView(Protocol):
    """What the planner reads from a connection."""

    @property
    def key(self) -> str: ...

    @property
    def rdy(self) -> int: ...

    @property
    def max_rdy(self) -> int: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def last_message_at(self) -> float: ...

    @property
    def rdy_changed_at(self) -> float: ...


@dataclass
class RdySlot:
    """A plain ``RdyView`` (tests and the consumer's bookkeeping use it)."""

    key: str
    rdy: int = 0
    max_rdy: int = 2500
    in_flight: int = 0
    last_message_at: float = 0.0
    rdy_changed_at: float = 0.0


@dataclass(frozen=True)
class RdyTimeouts:
    """Low-RDY rotation thresholds in seconds (go-nsq: 10 s idle, 30 s held)."""

    idle_timeout: float = 10.0
    hold_timeout: float = 30.0


def plan_rdy(
    slots: Sequence[RdyView],
    max_in_flight: int,
    mode: RdyMode,
    now: float,
    *,
    rotate: bool = False,
    timeouts: RdyTimeouts = RdyTimeouts(),
) -> dict[str, int]:
    """The RDY every connection should have, keyed by ``slot.key``."""
    plan = {s.key: 0 for s in slots}
    if not slots or max_in_flight <= 0 or mode is RdyMode.PAUSED:
        return plan
    if mode is RdyMode.TESTING:
        chosen = _testing_choice(slots, now, rotate, timeouts)
        plan[chosen.key] = min(1, chosen.max_rdy)
        return plan
    if max_in_flight >= len(slots):
        return _even_split(slots, max_in_flight)
    return _low_rdy(slots, max_in_flight, now, rotate, timeouts)


def _testing_choice(
    slots: Sequence[RdyView], now: float, rotate: bool, timeouts: RdyTimeouts
) -> RdyView:
    """Keep the connection already testing unless a rotation tick finds it idle."""
    holders = [s for s in slots if s.rdy > 0]
    if holders:
        holder = min(holders, key=lambda s: (s.rdy_changed_at, s.key))
        idle = holder.in_flight == 0 and now - holder.last_message_at >= timeouts.idle_timeout
        others = [s for s in slots if s is not holder]
        if not (rotate and idle and others):
            return holder
        return min(others, key=lambda s: (s.rdy_changed_at, s.key))
    return min(slots, key=lambda s: (s.rdy_changed_at, s.key))


def _even_split(slots: Sequence[RdyView], max_in_flight: int) -> dict[str, int]:
    ordered = sorted(slots, key=lambda s: s.key)
    base, extra = divmod(max_in_flight, len(ordered))
    return {
        s.key: max(0, min(base + (1 if i < extra else 0), s.max_rdy)) for i, s in enumerate(ordered)
    }


def _low_rdy(
    slots: Sequence[RdyView],
    max_in_flight: int,
    now: float,
    rotate: bool,
    timeouts: RdyTimeouts,
) -> dict[str, int]:
    plan = {s.key: 0 for s in slots}
    holders = [s for s in slots if s.rdy > 0 and s.max_rdy > 0]
    revoked: set[str] = set()
    if rotate:
        for s in holders:
            idle = s.in_flight == 0 and now - s.last_message_at >= timeouts.idle_timeout
            held_long = now - s.rdy_changed_at >= timeouts.hold_timeout
            if idle or held_long:
                revoked.add(s.key)
    # Keep the busiest holders first if there are more holders than the budget allows.
    keepers = sorted(
        (s for s in holders if s.key not in revoked),
        key=lambda s: (-s.in_flight, -s.last_message_at, s.key),
    )[:max_in_flight]
    for s in keepers:
        plan[s.key] = 1
    budget = max_in_flight - len(keepers)
    kept = {s.key for s in keepers}
    waiting = sorted(
        (s for s in slots if s.key not in kept and s.max_rdy > 0),
        key=lambda s: (s.key in revoked, s.rdy_changed_at, s.key),
    )
    for s in waiting[:budget]:
        plan[s.key] = 1
    return plan


def changes(slots: Sequence[RdyView], plan: dict[str, int]) -> list[tuple[str, int]]:
    """The (key, rdy) updates to send: only changed values, decreases before increases."""
    current = {s.key: s.rdy for s in slots}
    updates = [(k, v) for k, v in plan.items() if k in current and current[k] != v]
    return sorted(updates, key=lambda kv: (kv[1] > current[kv[0]], kv[0]))
