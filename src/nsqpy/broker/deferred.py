"""A channel's deferred messages: DPUB'd, REQ'd with a delay, and in flight from there.

Durable channels keep them in the partition's SQLite delayed store (so delays survive
restarts and may be days long); ephemeral channels keep them in a heap in memory. Both
hold only offsets and attempts for durable topics: the body is read back from the topic
log when the message comes due. An entry that is delivered stays in the store, "leased"
until its in-flight deadline, and is removed only when it is finished, so a crash never
loses it. A write the store refuses (a full disk) raises StorageError and changes nothing.
Must not import asyncio or any server.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from nsqpy.errors import StorageError
from nsqpy.storage import DelayedStore

log = logging.getLogger("nsqpy.broker")


@dataclass(slots=True)
class Due:
    """A deferred message that came due: the body is None when it must be read from the log."""

    offset: int
    attempts: int
    timestamp: int = 0
    body: bytes | None = None
    deliver_at: int = 0  # when it came due (ns)


class Deferred(Protocol):
    keeps_bodies: bool  # False: ``put`` ignores timestamp and body (the log keeps them)

    def put(
        self, offset: int, deliver_at: int, attempts: int, timestamp: int, body: bytes
    ) -> None: ...

    def add_new(self, entries: Sequence[NewEntry]) -> None: ...

    def due(self, now: int, limit: int) -> list[Due]: ...

    def remove(self, offset: int) -> bool: ...

    def remove_from(self, offset: int) -> int: ...

    def count(self) -> int: ...

    def clear(self) -> int: ...

    def next_due(self) -> int | None: ...

    def offsets(self) -> list[int]: ...

    def entries(self, limit: int) -> list[Entry]:
        """The first ``limit`` entries by offset: (offset, deliver_at, attempts)."""
        ...

    def replace(self, entries: Sequence[Entry]) -> None:
        """Hold exactly ``entries`` (a follower takes its leader's); StorageError: unchanged."""
        ...

    def sent(self, limit: int) -> tuple[tuple[Entry, ...], tuple[int, ...]]:
        """What a follower is sent of the set: its first ``limit`` entries, and the offsets
        of the rest when there are more."""
        ...


def first_and_rest(deferred: Deferred, limit: int) -> tuple[tuple[Entry, ...], tuple[int, ...]]:
    """``Deferred.sent``, looked up."""
    if not deferred.count():
        return (), ()
    entries = tuple(deferred.entries(limit))
    if len(entries) < limit:
        return entries, ()
    return entries, tuple(o for o in deferred.offsets() if o > entries[-1][0])


# A deferred entry as a follower is sent it: (offset, deliver_at ns, attempts).
Entry = tuple[int, int, int]

# A message deferred before any attempt: (offset, deliver_at, timestamp, body).
NewEntry = tuple[int, int, int, bytes]

# Stale heap entries (removed or re-put offsets) tolerated beyond twice the live count.
STALE_SLACK = 4096


class MemoryDeferred:
    """Deferred messages of an ephemeral channel: a heap with lazy deletion."""

    keeps_bodies = True

    def __init__(self) -> None:
        self._entries: dict[int, tuple[int, int, int, bytes]] = {}
        self._heap: list[tuple[int, int]] = []

    def put(self, offset: int, deliver_at: int, attempts: int, timestamp: int, body: bytes) -> None:
        self._entries[offset] = (deliver_at, attempts, timestamp, body)
        heap = self._heap
        if len(heap) > 2 * len(self._entries) + STALE_SLACK:  # removed entries linger: rebuild
            heap[:] = [(entry[0], off) for off, entry in self._entries.items()]
            heapq.heapify(heap)
            return
        heapq.heappush(heap, (deliver_at, offset))

    def add_new(self, entries: Sequence[NewEntry]) -> None:
        """Defer messages not yet attempted; one already here stays as it is."""
        for offset, deliver_at, timestamp, body in entries:
            if offset not in self._entries:
                self.put(offset, deliver_at, 0, timestamp, body)

    def due(self, now: int, limit: int) -> list[Due]:
        out: list[Due] = []
        heap = self._heap
        while heap and len(out) < limit and heap[0][0] <= now:
            deliver_at, offset = heapq.heappop(heap)
            entry = self._entries.get(offset)
            if entry is None or entry[0] != deliver_at:
                continue
            # A leased entry is re-put with its deadline by the channel when delivered.
            del self._entries[offset]
            out.append(Due(offset, entry[1], entry[2], entry[3], deliver_at))
        return out

    def remove(self, offset: int) -> bool:
        return self._entries.pop(offset, None) is not None

    def remove_from(self, offset: int) -> int:
        gone = [off for off in self._entries if off >= offset]
        for off in gone:
            del self._entries[off]
        return len(gone)

    def offsets(self) -> list[int]:
        return sorted(self._entries)

    def entries(self, limit: int) -> list[Entry]:
        return [(o, self._entries[o][0], self._entries[o][1]) for o in self.offsets()[:limit]]

    def replace(self, entries: Sequence[Entry]) -> None:
        """(Ephemeral channels are not replicated; the bodies would be empty.)"""
        self.clear()
        for offset, deliver_at, attempts in entries:
            self.put(offset, deliver_at, attempts, 0, b"")

    def sent(self, limit: int) -> tuple[tuple[Entry, ...], tuple[int, ...]]:
        return first_and_rest(self, limit)

    def count(self) -> int:
        return len(self._entries)

    def clear(self) -> int:
        n = len(self._entries)
        self._entries.clear()
        self._heap.clear()
        return n

    def next_due(self) -> int | None:
        heap = self._heap
        while heap:
            deliver_at, offset = heap[0]
            entry = self._entries.get(offset)
            if entry is not None and entry[0] == deliver_at:
                return deliver_at
            heapq.heappop(heap)
        return None


class DurableDeferred:
    """Deferred messages of a durable channel, in the partition's SQLite delayed store."""

    keeps_bodies = False

    def __init__(self, store: DelayedStore, channel: str) -> None:
        self._store = store
        self._channel = channel
        self._counted = True
        try:
            self._count = store.count(channel)
        except StorageError as exc:  # (a full disk at start): counted when it opens again
            log.error("channel %s: cannot count its deferred messages yet: %s", channel, exc)
            self._count, self._counted = 0, False
        self._next: int | None = None
        self._known = False
        # Changes made through this object (the only writer of its channel's rows; the
        # store's losses reach them too): ``sent`` is looked up again only after one.
        self._changes = 0
        self._sent: tuple[tuple[int, int, int], tuple[Entry, ...], tuple[int, ...]] | None = None

    def sent(self, limit: int) -> tuple[tuple[Entry, ...], tuple[int, ...]]:
        """(the leader sends it with every CURSORS of a partition: an ordered channel's FIN
        must not read a neighbour's thousands of rows again)"""
        key = (self._changes, self._store.losses, limit)
        if self._sent is None or self._sent[0] != key:
            looked_up = first_and_rest(self, limit)
            if not self._counted:  # (the store could not be read: not known, not kept)
                return looked_up
            self._sent = (key, *looked_up)
        return self._sent[1], self._sent[2]

    def put(self, offset: int, deliver_at: int, attempts: int, timestamp: int, body: bytes) -> None:
        del timestamp, body  # the log keeps them
        new = self._store.get(self._channel, offset) is None
        self._changes += 1  # (before: a failed write may have done part of it)
        self._store.put(self._channel, offset, deliver_at, attempts)  # StorageError: unchanged
        if new:
            self._count += 1
        if self._known and (self._next is None or deliver_at < self._next):
            self._next = deliver_at

    def add_new(self, entries: Sequence[NewEntry]) -> None:
        """Defer messages not yet attempted in one write (a DPUB burst); one already here
        stays as it is. StorageError: none went in."""
        self._changes += 1
        self._count += self._store.add_new(self._channel, ((e[0], e[1]) for e in entries))
        first = min((e[1] for e in entries), default=None)
        if self._known and first is not None and (self._next is None or first < self._next):
            self._next = first

    def due(self, now: int, limit: int) -> list[Due]:
        nxt = self.next_due()
        if nxt is None or nxt > now:
            return []
        entries = self._store.due(self._channel, now, limit)
        self._known = False  # the caller leases what it got; ask the store again next time
        return [Due(e.offset, e.attempts, deliver_at=e.deliver_at) for e in entries]

    def remove(self, offset: int) -> bool:
        self._changes += 1
        removed = self._store.remove(self._channel, offset)
        if removed:
            self._count -= 1
            self._known = False
        return removed

    def remove_from(self, offset: int) -> int:
        self._changes += 1
        removed = self._store.remove_from(self._channel, offset)
        self._count = self._store.count(self._channel)
        self._known = False
        return removed

    def count(self) -> int:
        if not self._counted:
            try:
                self._count, self._counted = self._store.count(self._channel), True
            except StorageError:
                pass
        return self._count

    def offsets(self) -> list[int]:
        return self._store.offsets(self._channel)

    def entries(self, limit: int) -> list[Entry]:
        return [
            (e.offset, e.deliver_at, e.attempts) for e in self._store.entries(self._channel, limit)
        ]

    def replace(self, entries: Sequence[Entry]) -> None:
        self._changes += 1
        self._store.replace(self._channel, entries)
        self._count = len(entries)
        self._counted = True
        self._known = False

    def clear(self) -> int:
        self._changes += 1
        n = self._store.clear(self._channel)
        self._count = 0
        self._next = None
        self._known = True
        return n

    def next_due(self) -> int | None:
        if not self._known:
            self._next = self._store.next_due(self._channel)
            self._known = True
        return self._next
