"""Channel cursors: confirmed offset, out-of-order confirmed ranges, next-read offset.

Owns ``CursorState`` (the in-memory cursor of one channel over one partition, with the
range merging of out-of-order FINs) and ``CursorFile`` (its atomic persistence: temp
file, fsync, rename, fsync of the directory; saved every N confirmations or T ms). A save
comes in two halves so the caller can keep the fsyncs off its event loop: ``snapshot``
(the bytes, cheap, on the thread that owns the cursor) and ``write`` (the file work, safe
from a worker thread; an older snapshot never overwrites a newer one). ``save`` does both.
Imports only the standard library, ``crc32c`` and ``nsqpy.errors``.

File format (little-endian): magic "NQCU" | version u32 | confirmed u64 | next_read u64
| ranges u32 | ranges * (start u64, end u64) | crc32c u32 of everything before it.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from nsqpy.errors import CorruptRecord
from nsqpy.storage.files import write_atomic

_HEAD = struct.Struct("<4sIQQI")
_MAGIC = b"NQCU"
_VERSION = 1
_CRC = struct.Struct("<I")
_log = logging.getLogger("nsqpy.storage")


def fsync_file(fd: int) -> None:
    """fsync a cursor file or its directory: looked up at each write so tests can observe it."""
    os.fsync(fd)


class CursorSnapshot(NamedTuple):
    """A cursor's bytes at one moment, numbered so that writes keep their order."""

    seq: int
    data: bytes


class CursorState:
    """Every offset < ``confirmed`` is confirmed; ``ranges`` are the confirmed [start, end)
    runs above it (sorted, disjoint, never adjacent, never touching ``confirmed``)."""

    __slots__ = ("_starts", "confirmed", "next_read", "ranges")

    def __init__(
        self,
        confirmed: int = 0,
        next_read: int | None = None,
        ranges: Iterable[tuple[int, int]] = (),
    ) -> None:
        self.confirmed = confirmed
        self.next_read = confirmed if next_read is None else next_read
        self.ranges: list[tuple[int, int]] = []
        for start, end in sorted(ranges):
            self._add_range(start, end)

    def _add_range(self, start: int, end: int) -> None:
        """Merge [start, end) in (used when loading; keeps the invariants)."""
        start = max(start, self.confirmed)
        if start >= end:
            return
        merged = [(s, e) for s, e in self.ranges if e < start or s > end]
        for s, e in self.ranges:
            if not (e < start or s > end):
                start, end = min(s, start), max(e, end)
        merged.append((start, end))
        merged.sort()
        self.ranges = merged
        self._absorb()

    def _absorb(self) -> None:
        ranges = self.ranges
        while ranges and ranges[0][0] <= self.confirmed:
            self.confirmed = max(self.confirmed, ranges.pop(0)[1])
        if self.next_read < self.confirmed:
            self.next_read = self.confirmed

    def confirm(self, offset: int) -> bool:
        """Confirm one offset; False when it already was."""
        confirmed = self.confirmed
        if offset < confirmed:
            return False
        ranges = self.ranges
        if offset == confirmed:
            confirmed += 1
            if ranges and ranges[0][0] == confirmed:
                confirmed = ranges.pop(0)[1]
            self.confirmed = confirmed
            if self.next_read < confirmed:
                self.next_read = confirmed
            return True
        i = bisect_right(ranges, (offset, 1 << 64))  # first range starting after offset
        if i and ranges[i - 1][1] > offset:
            return False
        joins_left = i > 0 and ranges[i - 1][1] == offset
        joins_right = i < len(ranges) and ranges[i][0] == offset + 1
        if joins_left and joins_right:
            ranges[i - 1] = (ranges[i - 1][0], ranges[i][1])
            del ranges[i]
        elif joins_left:
            ranges[i - 1] = (ranges[i - 1][0], offset + 1)
        elif joins_right:
            ranges[i] = (offset, ranges[i][1])
        else:
            ranges.insert(i, (offset, offset + 1))
        return True

    def confirm_range(self, start: int, end: int) -> int:
        """Confirm every offset in [start, end) (a gap readers skip); returns how many were new."""
        start = max(start, self.confirmed)
        if start >= end:
            return 0
        before = self.confirmed + self.pending_confirmed()
        self._add_range(start, end)
        return self.confirmed + self.pending_confirmed() - before

    def confirm_many(self, offsets: Iterable[int]) -> int:
        """Confirm several offsets; returns how many were newly confirmed."""
        confirm = self.confirm
        return sum(1 for off in offsets if confirm(off))

    def is_confirmed(self, offset: int) -> bool:
        if offset < self.confirmed:
            return True
        ranges = self.ranges
        i = bisect_right(ranges, (offset, 1 << 64))
        return bool(i and ranges[i - 1][1] > offset)

    def reset(self, offset: int) -> None:
        """Replay: confirmed = next_read = offset, ranges cleared."""
        self.confirmed = self.next_read = offset
        self.ranges = []

    def pending_confirmed(self) -> int:
        """How many offsets above ``confirmed`` are confirmed (the size of ``ranges``)."""
        return sum(e - s for s, e in self.ranges)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CursorState):
            return NotImplemented
        return (self.confirmed, self.next_read, self.ranges) == (
            other.confirmed, other.next_read, other.ranges,
        )  # fmt: skip

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CursorState(confirmed={self.confirmed}, next_read={self.next_read}, ranges={self.ranges})"

    def to_bytes(self) -> bytes:
        flat = [v for pair in self.ranges for v in pair]
        body = _HEAD.pack(_MAGIC, _VERSION, self.confirmed, self.next_read, len(self.ranges))
        body += struct.pack(f"<{len(flat)}Q", *flat)
        return body + _CRC.pack(crc32c(body))

    @classmethod
    def from_bytes(cls, data: bytes) -> CursorState:
        if len(data) < _HEAD.size + _CRC.size:
            raise CorruptRecord(f"cursor of {len(data)} bytes is too short")
        body, (crc,) = data[:-4], _CRC.unpack_from(data, len(data) - 4)
        if crc32c(body) != crc:
            raise CorruptRecord("cursor failed its CRC32C check")
        magic, version, confirmed, next_read, n = _HEAD.unpack_from(body)
        if magic != _MAGIC or version != _VERSION or len(body) != _HEAD.size + 16 * n:
            raise CorruptRecord(f"cursor has bad magic/version/size ({magic!r}, {version}, {n})")
        flat = struct.unpack_from(f"<{2 * n}Q", body, _HEAD.size)
        state = cls(confirmed, next_read)
        prev = confirmed
        for start, end in zip(flat[0::2], flat[1::2], strict=True):
            if start <= prev or end <= start:
                raise CorruptRecord(f"cursor range [{start}, {end}) out of order")
            state.ranges.append((start, end))
            prev = end
        return state


class CursorFile:
    """Where one channel's cursor is persisted, and when it is due to be saved."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        every_confirmations: int = 1000,
        every_ms: int = 1000,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.path = Path(path)
        self.every_confirmations = every_confirmations
        self.every_ms = every_ms
        self._clock = clock
        self._unsaved = 0
        self._saved_at = clock()
        self._seq = 0
        self._written = 0  # seq of the newest snapshot on disk
        self._removed = False
        self._write_lock = threading.Lock()

    def load(self) -> CursorState | None:
        """The saved cursor; None when missing. A corrupt file is logged and renamed aside."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return CursorState.from_bytes(data)
        except CorruptRecord as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{self._clock()}")
            os.replace(self.path, aside)
            _log.error("cursor %s is corrupt (%s); renamed to %s", self.path, exc, aside.name)
            return None

    def save(self, state: CursorState) -> None:
        """Snapshot and write now (creation, shutdown, HTTP actions)."""
        self.write(self.snapshot(state))

    def snapshot(self, state: CursorState) -> CursorSnapshot:
        """The bytes to write for ``state``; from now on the cursor counts as saved."""
        self._seq += 1
        self._unsaved = 0
        self._saved_at = self._clock()
        return CursorSnapshot(self._seq, state.to_bytes())

    def write(self, snap: CursorSnapshot) -> bool:
        """Write a snapshot atomically: temp file, fsync, rename, fsync the directory.

        Safe from a worker thread. Skipped (False) when a newer snapshot is already on
        disk or the file was removed (its channel deleted)."""
        with self._write_lock:
            if self._removed or snap.seq <= self._written:
                return False
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, snap.data, fsync=fsync_file)
            self._written = snap.seq
            return True

    @property
    def saved(self) -> bool:
        """Whether the newest snapshot taken is on disk."""
        return self._written >= self._seq

    def note(self, confirmations: int) -> bool:
        """Count confirmations; True when a save is due (N confirmations or T ms elapsed)."""
        self._unsaved += confirmations
        if not self._unsaved:
            return False
        if self.every_confirmations and self._unsaved >= self.every_confirmations:
            return True
        return bool(self.every_ms and self._clock() - self._saved_at >= self.every_ms * 1_000_000)

    def remove(self) -> None:
        """Delete the file; a write still queued for it is dropped."""
        with self._write_lock:
            self._removed = True
            self.path.unlink(missing_ok=True)
            self.path.with_name(self.path.name + ".tmp").unlink(missing_ok=True)
