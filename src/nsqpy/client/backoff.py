"""Consumer backoff (SPEC 7.3): a pure state machine, the caller runs the timer.

A failed message (handler raised, or ``requeue`` with backoff) raises the level by one and
blocks the consumer for ``multiplier * 2**level`` seconds: RDY 0 everywhere. As go-nsq's
``ExponentialStrategy``: the first failure blocks for 2 x ``multiplier`` (2 s by default),
and the level rises only while the next duration stays within ``max_duration`` (so the
defaults, 1 s and 2 m, top out at 64 s; a ``max_duration`` below 2 x ``multiplier``
never blocks). When the timer expires the consumer tests with RDY 1 on one connection.
Each success lowers the level; back at level 0 every connection returns to its normal RDY,
otherwise the consumer blocks again for the shorter duration and tests again. Signals that
arrive while blocked are ignored (they come from messages sent before the block), as in
go-nsq. ``max_duration == 0`` disables backoff. Imports only ``rdy``.
"""

from __future__ import annotations

from nsqpy.client.rdy import RdyMode


class Backoff:
    """Backoff level and blocked flag; ``signal`` says how long to block, if at all."""

    def __init__(self, multiplier: float = 1.0, max_duration: float = 120.0) -> None:
        if multiplier < 0 or max_duration < 0:
            raise ValueError("backoff multiplier and max duration must be >= 0")
        self.multiplier = multiplier
        self.max_duration = max_duration
        self.level = 0
        self.blocked = False
        self.max_level = 0  # go-nsq raises the level only if the next duration <= max
        while self.max_level < 64 and multiplier * 2 ** (self.max_level + 1) <= max_duration:
            self.max_level += 1

    @property
    def enabled(self) -> bool:
        return self.max_duration > 0

    def duration(self, level: int) -> float:
        """Seconds blocked at ``level`` (>= 1): go-nsq's ``multiplier * 2^level``, capped."""
        return float(min(self.multiplier * 2**level, self.max_duration))

    @property
    def mode(self) -> RdyMode:
        if self.blocked:
            return RdyMode.PAUSED
        return RdyMode.TESTING if self.level > 0 else RdyMode.NORMAL

    def signal(self, success: bool) -> float | None:
        """Record a message outcome; returns the seconds to block for, or None for no timer."""
        if not self.enabled or self.blocked:
            return None
        if success:
            if self.level == 0:
                return None
            self.level -= 1
            if self.level == 0:
                return None
        else:
            self.level = min(self.level + 1, self.max_level)
            if self.level == 0:
                return None  # max_duration < 2 x multiplier: go-nsq never backs off
        self.blocked = True
        return self.duration(self.level)

    def unblock(self) -> None:
        """The timer expired: move to testing (one connection RDY 1)."""
        self.blocked = False
