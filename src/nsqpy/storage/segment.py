"""One segment file of a partition log and its sparse index sidecar.

Owns the in-memory view of a segment (first offset, size, next offset, newest timestamp,
the sparse index: offset -> file position and running max timestamp, one entry every
~``index_interval_bytes``), the CRC scan used by recovery and index rebuilds, and the
sidecar file format. Files are named by their first offset, zero-padded to 20 digits so
they sort. Imports only the standard library, ``crc32c`` and ``nsqpy.errors``; no locks
here (the log owns concurrency).
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from nsqpy.errors import CorruptRecord
from nsqpy.storage.records import BATCH_SIZE, check_batch, parse_batch_header

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
SCAN_CHUNK = 1 << 20
# magic | version | covered size u64 | next offset u64 | max ts u64 | entries u32 | crc u32
INDEX_HEADER = struct.Struct("<4sIQQQII")
INDEX_MAGIC = b"NQIX"
INDEX_VERSION = 1


def segment_name(base: int) -> str:
    return f"{base:020d}"


@dataclass(slots=True)
class ScanResult:
    """What a CRC scan of a segment found."""

    valid_size: int  # bytes of whole, valid batches from the start
    end: int  # next offset after the last valid record
    max_ts: int
    idx_off: list[int]
    idx_pos: list[int]
    idx_ts: list[int]
    epochs: list[tuple[int, int]]  # (epoch, first offset) at each epoch change in the file
    error: str | None  # why the scan stopped before the file's end (None = whole file valid)


@dataclass(slots=True)
class Segment:
    """A segment's state. ``idx_ts[i]`` is the max timestamp of every record before entry i."""

    base: int
    path: Path
    fd: int | None = None
    size: int = 0
    end: int = 0
    max_ts: int = 0
    idx_off: list[int] = field(default_factory=list)
    idx_pos: list[int] = field(default_factory=list)
    idx_ts: list[int] = field(default_factory=list)
    last_index_pos: int = -(1 << 62)
    index_dirty: bool = True
    unsynced: bool = False

    @property
    def index_path(self) -> Path:
        return self.path.with_suffix(INDEX_SUFFIX)

    def open_fd(self) -> int:
        if self.fd is None:
            self.fd = os.open(
                self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644
            )
        return self.fd

    def add_index(self, offset: int, pos: int, interval: int) -> None:
        """Note a batch starting at ``pos``; index it when ~interval bytes passed since the last."""
        if pos - self.last_index_pos >= interval:
            self.idx_off.append(offset)
            self.idx_pos.append(pos)
            self.idx_ts.append(self.max_ts)
            self.last_index_pos = pos
            self.index_dirty = True

    def locate(self, offset: int) -> tuple[int, int]:
        """(batch offset, file position) of the last indexed batch at or before ``offset``."""
        i = bisect_right(self.idx_off, offset) - 1
        if i < 0:
            return self.base, 0
        return self.idx_off[i], self.idx_pos[i]

    def locate_time(self, ts: int) -> tuple[int, int]:
        """(offset, position) of the indexed batch to scan from for the first record >= ts."""
        i = bisect_right(self.idx_ts, ts - 1) - 1  # last entry whose predecessors are all < ts
        if i < 0:
            return self.base, 0
        return self.idx_off[i], self.idx_pos[i]

    def adopt(self, scan: ScanResult) -> None:
        self.size = scan.valid_size
        self.end = scan.end
        self.max_ts = scan.max_ts
        self.idx_off, self.idx_pos, self.idx_ts = scan.idx_off, scan.idx_pos, scan.idx_ts
        self.last_index_pos = self.idx_pos[-1] if self.idx_pos else -(1 << 62)
        self.index_dirty = True

    # -- sidecar -------------------------------------------------------------------

    def save_index(self) -> None:
        """Write the sidecar atomically (temp, rename); it is rebuilt on open if lost."""
        n = len(self.idx_off)
        flat = [
            v
            for triple in zip(self.idx_off, self.idx_pos, self.idx_ts, strict=True)
            for v in triple
        ]
        body = struct.pack(f"<{3 * n}Q", *flat)
        head = INDEX_HEADER.pack(
            INDEX_MAGIC, INDEX_VERSION, self.size, self.end, self.max_ts, n, crc32c(body)
        )
        tmp = self.index_path.with_suffix(INDEX_SUFFIX + ".tmp")
        with open(tmp, "wb") as f:
            f.write(head + body)
        os.replace(tmp, self.index_path)
        self.index_dirty = False

    def load_index(self, file_size: int) -> bool:
        """Adopt the sidecar if it is intact and covers exactly ``file_size`` bytes."""
        try:
            data = self.index_path.read_bytes()
        except OSError:
            return False
        if len(data) < INDEX_HEADER.size:
            return False
        magic, version, covered, end, max_ts, n, crc = INDEX_HEADER.unpack_from(data)
        body = data[INDEX_HEADER.size :]
        if (magic, version) != (INDEX_MAGIC, INDEX_VERSION) or covered != file_size:
            return False
        if len(body) != 24 * n or crc32c(body) != crc or end < self.base:
            return False
        flat = struct.unpack(f"<{3 * n}Q", body)
        self.idx_off, self.idx_pos, self.idx_ts = (
            list(flat[0::3]),
            list(flat[1::3]),
            list(flat[2::3]),
        )
        self.size, self.end, self.max_ts = covered, end, max_ts
        self.last_index_pos = self.idx_pos[-1] if n else -(1 << 62)
        self.index_dirty = False
        return True


def scan_segment(fd: int, base: int, file_size: int, interval: int) -> ScanResult:
    """Walk every batch of a segment file, checking headers, lengths, offsets and CRCs."""
    res = ScanResult(0, base, 0, [], [], [], [], None)
    seg = Segment(base, Path())
    data = b""
    data_at = 0
    pos = 0
    expect = base
    last_epoch = -1
    while pos < file_size:
        if pos + BATCH_SIZE > data_at + len(data):
            data, data_at = os.pread(fd, SCAN_CHUNK, pos), pos
        head = parse_batch_header(data, pos - data_at)
        if head is None:
            res.error = f"bad batch header at position {pos}"
            break
        bbase, epoch, count, length = head
        if bbase != expect or count == 0:
            res.error = f"batch at position {pos} has base {bbase} count {count}, expected {expect}"
            break
        need = BATCH_SIZE + length
        if pos + need > file_size:
            res.error = f"torn batch at position {pos} ({file_size - pos} of {need} bytes)"
            break
        if pos + need > data_at + len(data):
            data, data_at = os.pread(fd, max(SCAN_CHUNK, need), pos), pos
        try:
            ts = check_batch(data, pos - data_at + BATCH_SIZE, bbase, count, length)
        except CorruptRecord as exc:
            res.error = f"at position {pos}: {exc}"
            break
        seg.add_index(bbase, pos, interval)
        if ts > seg.max_ts:
            seg.max_ts = ts
        if epoch != last_epoch:
            res.epochs.append((epoch, bbase))
            last_epoch = epoch
        pos += need
        expect = bbase + count
    res.valid_size = pos
    res.end = expect
    res.max_ts = seg.max_ts
    res.idx_off, res.idx_pos, res.idx_ts = seg.idx_off, seg.idx_pos, seg.idx_ts
    return res
