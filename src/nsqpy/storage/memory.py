"""The in-memory log for ephemeral topics and channels: bounded, overflow dropped.

Owns ``MemoryLog``, which offers the part of ``PartitionLog``'s interface the broker uses.
It keeps at most ``capacity`` records; appending beyond that evicts the oldest (the low
watermark moves up) and counts them in ``dropped``, as NSQ drops ephemeral overflow.
Nothing touches disk: flush is a no-op and everything appended is at once flushed and
"durable". Imports only the standard library and ``nsqpy.errors``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from nsqpy.errors import StorageError
from nsqpy.storage.records import Entry, Frame, OffsetOutOfRange, Record


class MemoryLog:
    """A bounded list of records with dense offsets."""

    def __init__(self, capacity: int = 10000, *, clock: Callable[[], int] = time.time_ns) -> None:
        if capacity < 0:
            raise StorageError(f"memory log capacity {capacity} must be >= 0")
        self.capacity = capacity
        self._clock = clock
        self._records: list[Record] = []
        self._head = 0  # index in _records of the record at low_watermark
        self._low = 0
        self._next = 0
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
    def durable_offset(self) -> int:
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
        now = self._clock()
        epoch = self._epoch
        base = self._next
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
            for i, e in enumerate(entries)
        ]
        self._add(recs)
        return base

    def append_bodies(
        self, bodies: Sequence[bytes], timestamp: int = 0, deliver_at: int = 0
    ) -> int:
        ts = timestamp or self._clock()
        base = self._next
        epoch = self._epoch
        self._add(
            [
                Record(base + i, ts, deliver_at, 0, bytes(b), epoch=epoch)
                for i, b in enumerate(bodies)
            ]
        )
        return base

    def _add(self, recs: list[Record]) -> None:
        if self._closed:
            raise StorageError("memory log is closed")
        if not recs:
            return
        if not self._epochs or self._epochs[-1][0] != self._epoch:
            self._epochs.append((self._epoch, self._next))
        self._next += len(recs)
        self._records.extend(recs)
        over = (len(self._records) - self._head) - self.capacity
        if over > 0:
            self._head += over
            self._low += over
            self.dropped += over
            if self._head > 1024 and self._head * 2 > len(self._records):
                del self._records[: self._head]
                self._head = 0

    def flush(self) -> int:
        return self._next

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
        return [(r.offset, r.timestamp, r.deliver_at, r.flags, r.body)
                for r in self.read(offset, max_count, max_bytes)]  # fmt: skip

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

    def stats(self) -> dict[str, int]:
        return {
            "segments": 0,
            "bytes": sum(len(r.body) for r in self._records[self._head :]),
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
