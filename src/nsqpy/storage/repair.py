"""Repair of a damaged segment file: keep every record that still holds, lose only the rest.

Owns ``salvage`` (the records inside a damaged byte range whose own CRC32C holds, found by
scanning forward byte by byte past what does not; a run of zero bytes is skipped at once)
and ``rewrite_segment`` (the segment made again from its valid batches as they are, each
damaged range replaced by its salvaged records resealed into fresh batches, through a
temp file, fsync and rename; the damaged bytes themselves are copied aside first into
``<segment>.<position>.corrupt``). Offsets that were lost are simply absent from the
rewritten file: its batches jump over them, and readers skip them. Called by recovery
(``PartitionLog``'s open). Imports only the standard library, ``crc32c`` and the storage
layout modules; no asyncio, no sockets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from nsqpy.storage.records import RECORD, RECORD_CRC_FROM, RECORD_SIZE, RECORD_TAIL, batch_header

COPY_CHUNK = 1 << 20
_NONZERO = re.compile(rb"[^\x00]")
_ZEROS = b"\x00\x00\x00\x00"


class Run(NamedTuple):
    """Salvaged records with consecutive offsets, as they were stored."""

    base: int
    records: list[bytes]
    max_ts: int


class Damage(NamedTuple):
    """A damaged byte range of a segment and what replaces it."""

    start: int
    end: int
    first_missing: int  # the first offset the range should have held
    epoch: int  # the leader epoch the range's batches were written in (as best known)
    runs: list[Run]

    end_offset: int = 0  # the offset after the range (0: unknown, a damaged tail)


def _record_at(data: bytes, p: int, low: int, high: int | None) -> tuple[int, int, int] | None:
    """(offset, timestamp, size) of a whole record at ``p`` whose CRC holds and whose offset
    is in [low, high), or None."""
    if p + RECORD_SIZE > len(data):
        return None
    rlen, crc, off, ts, _da, _fl, ext = RECORD.unpack_from(data, p)
    size = 4 + rlen
    if rlen < RECORD_TAIL + ext or p + size > len(data):
        return None
    if off < low or (high is not None and off >= high):
        return None
    if crc32c(memoryview(data)[p + RECORD_CRC_FROM : p + size]) != crc:
        return None
    return off, ts, size


def salvage(data: bytes, low: int, high: int | None) -> list[Run]:
    """The valid records in ``data`` with offsets in [low, high) (None: no bound), in
    increasing offset order, grouped in runs of consecutive offsets."""
    runs: list[Run] = []
    records: list[bytes] = []
    base = max_ts = 0
    nxt = low
    p = 0
    end = len(data) - RECORD_SIZE
    while p <= end:
        if data[p : p + 4] == _ZEROS:  # a record never starts with a zero length
            m = _NONZERO.search(data, p)
            if m is None:
                break
            p = max(p + 1, m.start() - 3)
            continue
        found = _record_at(data, p, nxt, high)
        if found is None:
            p += 1
            continue
        off, ts, size = found
        if records and off != base + len(records):
            runs.append(Run(base, records, max_ts))
            records = []
        if not records:
            base, max_ts = off, 0
        records.append(data[p : p + size])
        max_ts = max(max_ts, ts)
        nxt = off + 1
        p += size
    if records:
        runs.append(Run(base, records, max_ts))
    return runs


def _copy(src: int, dst: int, start: int, end: int) -> None:
    at = start
    while at < end:
        chunk = os.pread(src, min(COPY_CHUNK, end - at), at)
        if not chunk:
            raise OSError(f"segment shorter than {end} bytes while repairing")
        os.write(dst, chunk)
        at += len(chunk)


def keep_aside(path: Path, fd: int, start: int, end: int) -> str:
    """Copy bytes [start, end) of the segment to ``<segment>.<start>.corrupt`` (once)."""
    name = f"{path.name}.{start}.corrupt"
    target = path.with_name(name)
    if not target.exists():
        tmp = target.with_name(name + ".tmp")
        with open(tmp, "wb") as f:
            at = start
            while at < end:
                chunk = os.pread(fd, min(COPY_CHUNK, end - at), at)
                if not chunk:
                    break
                f.write(chunk)
                at += len(chunk)
        os.replace(tmp, target)
    return name


def rewrite_segment(path: Path, fd: int, size: int, damage: Sequence[Damage]) -> None:
    """Make the segment again: its bytes outside ``damage`` as they are, each damaged range
    replaced by its salvaged runs resealed as batches. Atomic (temp file, fsync, rename,
    fsync of the directory); ``fd`` still reads the old file afterwards."""
    tmp = path.with_name(path.name + ".repair.tmp")
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        at = 0
        for dmg in damage:
            _copy(fd, out, at, dmg.start)
            for run in dmg.runs:
                body = b"".join(run.records)
                head = batch_header(
                    run.base, dmg.epoch, len(run.records), len(body), crc32c(body), run.max_ts
                )
                os.write(out, bytes(head) + body)
            at = dmg.end
        _copy(fd, out, at, size)
        os.fsync(out)
    finally:
        os.close(out)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


__all__ = ["Damage", "Run", "keep_aside", "rewrite_segment", "salvage"]
