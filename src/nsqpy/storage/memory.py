"""The in-memory log for ephemeral topics and channels: bounded, overflow dropped.

Owns ``MemoryLog``, which offers the part of ``PartitionLog``'s interface the broker uses.
It holds at most ``capacity`` records (None: no bound, the owner bounds it): what an append
brings beyond that is dropped, the newest first, never given an offset, and counted in
``dropped``, as NSQ's full memory queue drops what comes in (the oldest stay).
``retain`` forgets records from the front once their readers are done with them.
Nothing touches disk: flush is a no-op and everything appended is at once flushed and
"durable". ``read_raw`` encodes what it holds into log-format batches on the fly.
Imports only the standard library, ``crc32c`` and ``nsqpy.errors``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from nsqpy.errors import StorageError
from nsqpy.storage.encode import Buf, encode_entries
from nsqpy.storage.raw import RawBatch
from nsqpy.storage.records import (
    RECORD_SIZE,
    Entry,
    Frame,
    OffsetOutOfRange,
    Record,
    extension_bytes,
)


class MemoryLog:
    """A bounded list of records with dense offsets."""

    def __init__(
        self,
        capacity: int | None = 10000,
        *,
        clock: Callable[[], int] = time.time_ns,
        start_offset: int = 0,
    ) -> None:
        if capacity is not None and capacity < 0:
            raise StorageError(f"memory log capacity {capacity} must be >= 0")
        self.capacity = capacity
        self._clock = clock
        self._records: list[Record] = []
        self._head = 0  # index in _records of the record at low_watermark
        self._low = start_offset  # (a topic created again goes on above its old offsets)
        self._next = start_offset
        self._epoch = 0
        self._epochs: list[tuple[int, int]] = []
        self._closed = False
        self.dropped = 0
        self.quarantined = 0

    # -- watermarks ------------------------------------------------------------------

    @property
    def low_watermark(self) -> int:
        return self._low

    @property
    def high_watermark(self) -> int:
        return self._next

    @property
    def flushed_offset(self) -> int:
        return self._next

    @property
    def closed(self) -> bool:
        """Closed or deleted: nothing more is written or fsynced."""
        return self._closed

    @property
    def durable_offset(self) -> int:
        return self._next

    @property
    def readable_offset(self) -> int:
        return self._next

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        if epoch < self._epoch:
            raise StorageError(f"epoch {epoch} is below the current epoch {self._epoch}")
        self._epoch = epoch

    def epochs(self) -> list[tuple[int, int]]:
        return list(self._epochs)

    # -- append ----------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> int:
        """Append what fits (see the module doc); returns the first offset given."""
        now = self._clock()
        epoch = self._epoch
        base = self._next
        kept = entries[: self._room(len(entries))]
        recs = [
            Record(
                base + i,
                e.timestamp or now,
                e.deliver_at,
                e.flags,
                bytes(e.body),
                e.trace_id,
                bytes(e.partition_key),
                bytes(e.headers),
                epoch,
            )
            for i, e in enumerate(kept)
        ]
        self._add(recs)
        return base

    def append_bodies(
        self, bodies: Sequence[bytes], timestamp: int = 0, deliver_at: int = 0
    ) -> int:
        """Append what fits (see the module doc); returns the first offset given."""
        ts = timestamp or self._clock()
        base = self._next
        epoch = self._epoch
        kept = bodies[: self._room(len(bodies))]
        self._add(
            [Record(base + i, ts, deliver_at, 0, bytes(b), epoch=epoch) for i, b in enumerate(kept)]
        )
        return base

    def _room(self, wanted: int) -> int:
        """How many of ``wanted`` new records fit; the rest are dropped and counted."""
        if self._closed:
            raise StorageError("memory log is closed")
        if self.capacity is None:
            return wanted
        room = max(0, min(wanted, self.capacity - (len(self._records) - self._head)))
        self.dropped += wanted - room
        return room

    def _add(self, recs: list[Record]) -> None:
        if not recs:
            return
        if not self._epochs or self._epochs[-1][0] != self._epoch:
            self._epochs.append((self._epoch, self._next))
        self._next += len(recs)
        self._records.extend(recs)

    def flush(self) -> int:
        return self._next

    def gaps(self) -> list[tuple[int, int]]:
        return []

    def pending(self) -> bool:
        return False

    def sync_due(self, now_ns: int) -> bool:
        return False

    def sync(self) -> int:
        return self._next

    # -- read ------------------------------------------------------------------------

    def read(self, offset: int, max_count: int, max_bytes: int = 1 << 20) -> list[Record]:
        if offset < self._low:
            raise OffsetOutOfRange(offset, self._low, self._next)
        if offset >= self._next or max_count <= 0:
            return []
        start = self._head + offset - self._low
        out = self._records[start : start + max_count]
        total = 0
        for i, rec in enumerate(out):
            total += len(rec.body)
            if total > max_bytes and i:
                return out[:i]
        return out

    def read_frames(self, offset: int, max_count: int, max_bytes: int = 1 << 20) -> list[Frame]:
        return [(r.offset, r.timestamp, r.deliver_at, r.flags, r.body,
                 extension_bytes(r.trace_id, r.partition_key, r.headers))
                for r in self.read(offset, max_count, max_bytes)]  # fmt: skip

    def read_raw(self, offset: int, max_bytes: int = 1 << 20, *, verify: bool = False) -> RawBatch:
        """``PartitionLog.read_raw``'s answer for what is held here: the records from
        ``offset`` (at least one, about ``max_bytes`` of bodies) encoded as log batches,
        one per run of records that share an epoch. ``verify`` has nothing to check."""
        recs = self.read(offset, max(1, max_bytes // RECORD_SIZE), max_bytes)
        if not recs:
            return RawBatch(offset, 0, b"")
        parts: list[Buf] = []
        i = 0
        while i < len(recs):
            epoch = recs[i].epoch
            j = i + 1
            while j < len(recs) and recs[j].epoch == epoch:
                j += 1
            entries = [Entry(r.body, r.timestamp, r.deliver_at, r.flags, r.trace_id,
                             r.partition_key, r.headers) for r in recs[i:j]]  # fmt: skip
            parts += encode_entries(entries, recs[i].offset, epoch, 0)[0]
            i = j
        return RawBatch(recs[0].offset, len(recs), b"".join(parts))

    def offset_for_timestamp(self, ts_ns: int) -> int:
        live = self._records[self._head :]
        for rec in live:  # timestamps may be given by producers, so not always sorted
            if rec.timestamp >= ts_ns:
                return rec.offset
        return self._next

    # -- truncate, retain, stats, close ----------------------------------------------

    def truncate(self, offset: int) -> None:
        if offset >= self._next:
            return
        if offset < self._low:
            raise OffsetOutOfRange(offset, self._low, self._next)
        del self._records[self._head + offset - self._low :]
        self._next = offset
        self._epochs = [e for e in self._epochs if e[1] < offset]

    def retain(self, confirmed: int | None, now_ns: int) -> int:
        """Forget records below ``confirmed`` (None: no cursors, keep them)."""
        if confirmed is not None and confirmed > self._low:
            n = min(confirmed, self._next) - self._low
            self._head += n
            self._low += n
            if self._head * 2 > len(self._records):
                del self._records[: self._head]
                self._head = 0
        return self._low

    @property
    def size_bytes(self) -> int:
        """The bodies it holds, in bytes."""
        return sum(len(r.body) for r in self._records[self._head :])

    def stats(self) -> dict[str, int]:
        return {
            "segments": 0,
            "bytes": self.size_bytes,
            "quarantined": 0,
            "low_watermark": self._low,
            "high_watermark": self._next,
            "flushed_offset": self._next,
            "durable_offset": self._next,
            "pending_messages": 0,
            "dropped": self.dropped,
            "epoch": self._epoch,
        }

    def close(self) -> None:
        self._closed = True


__all__ = ["MemoryLog"]
