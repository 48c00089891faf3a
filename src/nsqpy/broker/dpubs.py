"""Messages published with a delay on their way to the channels' deferred sets.

Owns ``PublishedDeferred`` and ``NoteBudget``. NSQ puts a message published with a delay
(DPUB, ``/pub?defer``) straight into the deferred queue of every channel of its topic,
consumer or not, so it counts in each channel's ``deferred_count`` and never in its
``depth``; a topic with no channel (or a paused one) holds it in its own depth until a
channel takes it. A partition notes here the offsets and due time of each such publish
(one note per publish, its first and last offsets: three integers in arrays; a plain PUB
notes nothing); a channel asks for the offsets that reach it (``between``) and defers them
at once; what every channel has taken is forgotten (``forget_below``), and so is what a
failed write never stored (``forget_from``). At most ``MAX_NOTES`` notes are kept per
partition and ``MAX_NOTES_TOTAL`` over every partition of a broker (its ``NoteBudget``),
so they take at most 24 bytes each, about 6 MB in all: past that (topics without channels
holding that many DPUBs), and after a restart for what a topic still held, a message is
deferred when a channel reads it (its record carries its due time), counting in depth until
then. Must not import asyncio or any server.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

MAX_NOTES = 1 << 16  # per partition
MAX_NOTES_TOTAL = 1 << 18  # per broker (every partition of every topic)
_COMPACT = 1024  # forgotten notes kept at the head of the arrays before they are moved


class NoteBudget:
    """How many more notes the partitions of one broker may keep."""

    __slots__ = ("left",)

    def __init__(self, limit: int = MAX_NOTES_TOTAL) -> None:
        self.left = limit


class PublishedDeferred:
    """(first, last, deliver_at) of the delayed publishes of one partition, in offset order."""

    __slots__ = ("_at", "_budget", "_first", "_head", "_last")

    def __init__(self, budget: NoteBudget | None = None) -> None:
        self._budget = budget if budget is not None else NoteBudget()
        self._first = array("q")
        self._last = array("q")
        self._at = array("q")
        self._head = 0  # notes before it are forgotten (moved out in bulk)

    def __bool__(self) -> bool:
        return len(self._first) > self._head

    def __len__(self) -> int:
        """How many notes (publishes) are kept."""
        return len(self._first) - self._head

    def note(self, first: int, last: int, deliver_at: int) -> None:
        """Offsets ``first``..``last`` were published to be delivered at ``deliver_at``."""
        budget = self._budget
        if last < first or budget.left <= 0 or len(self) >= MAX_NOTES:
            return
        budget.left -= 1
        self._first.append(first)
        self._last.append(last)
        self._at.append(deliver_at)

    def between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(offset, deliver_at) of the noted offsets in [start, end)."""
        first, last, at = self._first, self._last, self._at
        out: list[tuple[int, int]] = []
        i = bisect_left(last, start, self._head)  # the first note that ends at or after start
        n = len(first)
        while i < n and first[i] < end:
            when = at[i]
            out.extend(
                (offset, when) for offset in range(max(first[i], start), min(last[i] + 1, end))
            )
            i += 1
        return out

    def forget_below(self, offset: int) -> None:
        """Every channel has taken the offsets below ``offset`` (or they were emptied)."""
        head = self._head
        if head >= len(self._last) or self._last[head] >= offset:
            return
        end = bisect_left(self._last, offset, head)
        self._budget.left += end - head
        self._head = end
        if end == len(self._first):
            self.clear()
        elif end > _COMPACT and 2 * end > len(self._first):
            for arr in (self._first, self._last, self._at):
                del arr[:end]
            self._head = 0

    def forget_from(self, offset: int) -> None:
        """A write failed: offsets from ``offset`` on were not stored."""
        first, last = self._first, self._last
        cut = max(self._head, bisect_left(first, offset, self._head))
        gone = len(first) - cut
        if gone:
            self._budget.left += gone
            for arr in (first, last, self._at):
                del arr[cut:]
        if len(first) > self._head and last[-1] >= offset:
            last[-1] = offset - 1  # a note that began before the failed write
        if len(first) == self._head:
            self.clear()

    def clear(self) -> None:
        """Forget every note (the partition is deleted)."""
        self._budget.left += len(self)
        for arr in (self._first, self._last, self._at):
            del arr[:]
        self._head = 0
