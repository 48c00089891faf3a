"""Recovery of a partition log's segments when the log is opened.

Owns ``Recovery``: each segment is checked (a sealed one's intact sidecar index is trusted
unless ``verify``), and one with damaged bytes is repaired (``nsqpy.storage.repair``):
every record whose own CRC32C still holds is kept, the segment rewritten with them, the
damaged bytes copied aside to ``<segment>.<position>.corrupt``, and each damaged range
counted and logged in one line. A batch cut short by the end of the last segment (a write
a crash interrupted, never acknowledged) is cut whole with a warning. A sealed segment with
nothing valid in it is renamed ``.corrupt`` whole. Imports only the standard library,
``crc32c`` and the storage layout modules; no asyncio, no sockets.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from nsqpy.errors import StorageError
from nsqpy.storage.repair import Damage, keep_aside, rewrite_segment, salvage
from nsqpy.storage.segment import ScanResult, Segment, refuse_old_format, scan_segment


def _epoch_at(epochs: Sequence[tuple[int, int]], offset: int) -> int:
    """The epoch in effect at ``offset`` by (epoch, first offset) changes (0 before any)."""
    epoch = 0
    for e, first in epochs:
        if first > offset:
            break
        epoch = e
    return epoch


class Recovery:
    """The segments of one log, recovered one after the other at open."""

    def __init__(self, directory: Path, interval: int, logger: logging.Logger) -> None:
        self.directory = directory
        self.interval = interval
        self.logger = logger
        self.quarantined = 0  # damaged ranges and segments kept aside
        self.truncated_bytes = 0  # bytes of a torn tail cut
        self.tail_epochs: list[tuple[int, int]] = []  # the last segment's epoch changes
        self.dir_changed = False  # files were renamed or rewritten: the directory needs fsync

    def segment(self, seg: Segment, *, last: bool, verify: bool) -> bool:
        """Make ``seg`` ready (its index loaded or scanned, damage repaired); False when it
        was quarantined whole. ``last``: the active segment (its index stays in memory).
        ``verify``: scan a sealed segment even when its sidecar index is intact."""
        fd = seg.open_fd()
        try:
            refuse_old_format(fd, seg.path)
        except StorageError:
            seg.close_fd()
            raise
        size = os.fstat(fd).st_size
        if not last and not verify and seg.load_index(size):
            seg.close_fd()
            seg.seal()
            return True
        scan = scan_segment(fd, seg.base, size, self.interval)
        if scan.holes or scan.error is not None:
            repaired = self._repair(seg, size, scan, last)
            if repaired is None:
                return False
            scan = repaired
        seg.adopt(scan)
        if last:
            self.tail_epochs = scan.epochs
        else:
            seg.close_fd()
            seg.seal()
        return True

    def _repair(self, seg: Segment, size: int, scan: ScanResult, last: bool) -> ScanResult | None:
        """A segment with damaged bytes: every record that still holds is kept (see
        ``nsqpy.storage.repair``) and the damaged bytes go aside, each range logged and
        counted; a torn tail of the last segment with nothing to keep in it (what a crash
        leaves) is only cut. Returns the segment's scan afterwards, or None when nothing in
        it could be kept (a sealed segment is then quarantined whole)."""
        fd = seg.open_fd()
        damage: list[tuple[Damage, str]] = []
        for h in scan.holes:
            data = os.pread(fd, h.end - h.start, h.start)
            runs = salvage(data, h.first_missing, h.next_offset)
            epoch = _epoch_at(scan.epochs, h.first_missing)
            dmg = Damage(h.start, h.end, h.first_missing, epoch, runs, h.next_offset)
            damage.append((dmg, h.why))
        if scan.error is not None:
            torn = last and scan.torn  # a write a crash cut short: never acknowledged
            runs = (
                []
                if torn
                else salvage(os.pread(fd, size - scan.valid_size, scan.valid_size), scan.end, None)
            )
            if last and not damage and not runs:
                self.logger.warning(
                    "log %s: truncating the tail of %s at byte %d of %d: %s",
                    self.directory, seg.path.name, scan.valid_size, size, scan.error,
                )  # fmt: skip
                os.ftruncate(fd, scan.valid_size)
                os.fsync(fd)
                self.truncated_bytes += size - scan.valid_size
                return scan
            epoch = _epoch_at(scan.epochs, scan.end)
            damage.append((Damage(scan.valid_size, size, scan.end, epoch, runs), scan.error))
        if not last and scan.valid_size == 0 and not scan.holes and not damage[0][0].runs:
            self._quarantine(seg, scan.error or "no valid batch")
            return None
        try:
            for dmg, why in damage:
                self._report(seg, fd, dmg, why, scan.end if dmg.end == size else None)
            rewrite_segment(seg.path, fd, size, [d for d, _ in damage])
        except OSError as exc:  # (a full disk, say): the file stays, readers skip the ranges
            self.logger.error("log %s: cannot repair %s: %s", self.directory, seg.path.name, exc)
            if scan.error is not None:
                os.ftruncate(fd, scan.valid_size)
            return scan
        seg.close_fd()  # (the old file's: the repaired one has its own)
        fd = seg.open_fd()
        repaired = scan_segment(fd, seg.base, os.fstat(fd).st_size, self.interval, resync=False)
        if repaired.error is not None:  # never expected: keep it out of the way
            self._quarantine(seg, f"after its repair: {repaired.error}")
            return None
        self.dir_changed = True
        return repaired

    def _report(self, seg: Segment, fd: int, dmg: Damage, why: str, tail_from: int | None) -> None:
        """Keep a damaged range's bytes aside, count it and log it (one line)."""
        name = keep_aside(seg.path, fd, dmg.start, dmg.end)
        self.quarantined += 1
        kept = sorted(
            off for run in dmg.runs for off in range(run.base, run.base + len(run.records))
        )
        if tail_from is None:
            lost = f"offsets {dmg.first_missing}..{dmg.end_offset - 1} less the {len(kept)} kept"
        else:
            lost = f"what it held from offset {tail_from} on, less the {len(kept)} records kept"
        self.logger.error(
            "log %s: bytes %d..%d of segment %s are damaged (%s); %s are lost; %d records in "
            "it still held and are kept; the damaged bytes are kept in %s",
            self.directory, dmg.start, dmg.end - 1, seg.path.name, why, lost, len(kept), name,
        )  # fmt: skip

    def _quarantine(self, seg: Segment, why: str) -> None:
        target = seg.path.with_name(seg.path.name + ".corrupt")
        n = 1
        while target.exists():
            n += 1
            target = seg.path.with_name(f"{seg.path.name}.{n}.corrupt")
        seg.close_fd()
        os.replace(seg.path, target)
        seg.index_path.unlink(missing_ok=True)
        self.quarantined += 1
        self.dir_changed = True
        self.logger.error(
            "log %s: segment %s is corrupt (%s); nothing in it could be kept; quarantined as %s",
            self.directory, seg.path.name, why, target.name,
        )  # fmt: skip
