"""The partition log: a directory of segment files holding one partition's records.

Owns appends (group commit: everything appended between two ``flush()`` calls goes to
the file in one ``pwritev``), fsync scheduling by policy (``sync()`` is safe from a
worker thread while the loop thread appends, flushes and reads), retention, truncation for
replica divergence, gaps, and the leader-epoch history. Reading and seeking live in
``nsqpy.storage.reader``, recovery at open in ``nsqpy.storage.recovery`` (damaged records
salvaged, torn tails cut), the offset reservation in ``nsqpy.storage.reservation``.
Imports only the standard library, ``crc32c`` and ``nsqpy.errors``; no asyncio, no sockets.

On-disk format 2 (all integers little-endian)::

    <dir>/00000000000000000000.log     segment, named by its first offset (20 digits)
    <dir>/00000000000000000000.index   sparse index sidecar (rebuilt when missing/stale)
    <dir>/epochs                       "epoch first_offset" lines, one per leader epoch
    <dir>/reserved                     "handed H reserved R boot B" (nsqpy.storage.reservation)
    <dir>/*.corrupt                    quarantined segments and byte ranges (never read again)

    segment = batch*
    batch   = magic u32 "NQB2" | header_crc u32 | base_offset u64 | epoch u32
              | count u32 | length u32 (bytes of the records that follow)
              | records_crc u32 | max_timestamp u64 | record*count
              header_crc  = CRC32C of the 32 header bytes after it
              records_crc = CRC32C of the batch's `length` record bytes
    record  = length u32 (bytes after this field) | crc u32 | offset u64
              | timestamp u64 (publish, ns) | deliver_at u64 (ns, 0 = immediate)
              | flags u16 | ext_len u32 | extension (ext_len bytes) | body
              crc = CRC32C of everything after the crc field to the record's end
    extension (present when ext_len > 0)
            = trace_id u64 | key_len u16 | partition key | headers (UTF-8 JSON, rest)
    index   = magic "NQIX" | version u32 (2) | covered size u64 | next offset u64
              | max timestamp u64 | entries u32 | crc u32
              | entries * (batch offset u64, file position u64, max timestamp before u64)

Every record byte is covered twice: by its own CRC (so a record can be checked on its
own, end to end, and salvaged from a damaged batch) and by its batch's records CRC (so a
whole batch is checked with one C call). Offsets increase along a segment; they jump where
records were lost (a repaired batch) and between segments where a log went on past offsets
it had handed out (a power loss: see ``nsqpy.storage.reservation``); readers skip them,
never reusing one. A segment in format 1 (magic "NQB1", 28-byte headers, no records CRC) is
refused with StorageError and left untouched.

Replication (cluster mode). A follower's log takes its leader's batches as they are
(``append_raw``: same offsets, epochs and bytes, through the same pending/flush path, so
segments, indexes and the epoch history come out as the leader's) and is made equal to
the leader's by epoch history (``end_offset_for_epoch``, ``match_leader``: the loop is in
``nsqpy.storage.epochs``). Truncation lowers the reservation to the new end: offsets
above a follower's end were never committed (consumers read only below the committed
offset, which every ISR member has), so the leader's records take them. Whatever this node
does next, as follower or as a leader in a later epoch, offsets below its end are the
leader's and new ones continue from the end; the reservation is extended by ``flush``
as for any append, so no offset readable here is ever handed out again with other data.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path

from nsqpy.errors import StorageError
from nsqpy.storage.budget import LOADED_INDEXES
from nsqpy.storage.encode import encode_bodies, encode_entries
from nsqpy.storage.epochs import end_offset_for_epoch, trimmed
from nsqpy.storage.files import write_atomic
from nsqpy.storage.policy import SyncPolicy
from nsqpy.storage.raw import RawBatch, check_raw
from nsqpy.storage.reader import LogReader
from nsqpy.storage.records import Entry, Frame, OffsetMismatch, OffsetOutOfRange, Record
from nsqpy.storage.recovery import Recovery
from nsqpy.storage.reservation import RESERVED_FILE, Reservation
from nsqpy.storage.segment import (
    LOG_SUFFIX,
    Segment,
    cut_position,
    scan_segment,
    segment_name,
)

IOV_MAX = 1024
TAIL_BYTES = 1 << 20  # the most of a flush kept for ``read_raw`` (``keep_tail``)
Buf = bytes | bytearray | memoryview  # a part of a pending batch (replicated ones are views)
EPOCHS_FILE = "epochs"
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def fsync_segment(fd: int) -> None:
    """fsync a segment file: looked up at each ``sync`` so tests can observe or hold it."""
    os.fsync(fd)


class PartitionLog:
    """One partition's append-only log on disk. See the module docstring for the format."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        sync: SyncPolicy = SyncPolicy(),  # noqa: B008 (frozen, shared safely)
        segment_bytes: int = 100 * 1024 * 1024,
        index_interval_bytes: int = 4096,
        retention_ms: int = 0,
        retention_bytes: int = 0,
        clock: Callable[[], int] = time.time_ns,
        logger: logging.Logger | None = None,
        verify_on_open: bool = True,
        start_offset: int = 0,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.policy = sync
        self._segment_bytes = max(1, segment_bytes)
        self._interval = max(1, index_interval_bytes)
        self._retention_ms = retention_ms
        self._retention_bytes = retention_bytes
        self._clock = clock
        self._logger = logger or logging.getLogger("nsqpy.storage")
        self._lock = threading.RLock()  # (re-entered when a segment's fd is evicted)
        self._sync_idle = threading.Condition(self._lock)
        self._syncing = False
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        # parts, bytes, base, count, max ts of each encoded, unwritten batch
        self._pending: list[tuple[Sequence[Buf], int, int, int, int]] = []
        self._next = 0
        self._durable = 0
        self._epoch = 0
        self._epochs: list[tuple[int, int]] = []
        self._epochs_dirty = False
        self._epochs_unsynced = False
        self._dir_dirty = False
        self._unsynced_since = 0
        self._closed = False
        self.quarantined = 0
        self.truncated_bytes = 0  # torn/corrupt tail bytes cut by recovery
        self._tail_epochs: list[tuple[int, int]] = []
        self.skipped = 0  # offsets lost to a crash and jumped over at open
        self._gaps: list[tuple[int, int]] | None = None  # cache of gaps()
        self._reader = LogReader(self._segments, self._bases, self._logger)
        # A leader's followers read what it just wrote (``read_raw`` from where the last
        # flush began): with ``keep_tail`` set, that flush's bytes are kept and handed out
        # without a ``pread`` (``_tail``: first offset, end offset, segment, buffers
        # (joined once asked for), size). Only what the last flush wrote to the last
        # segment, up to ``TAIL_BYTES``, until every follower read it (``release_tail``).
        self._keep_tail = False
        self._tail: tuple[int, int, Segment, list[Buf], int] | None = None
        self._open(verify_on_open, start_offset)

    # -- properties ------------------------------------------------------------------

    @property
    def low_watermark(self) -> int:
        return self._segments[0].base

    @property
    def high_watermark(self) -> int:
        return self._next

    @property
    def flushed_offset(self) -> int:
        return self._segments[-1].end

    @property
    def closed(self) -> bool:
        """Closed or deleted: nothing more is written or fsynced."""
        return self._closed

    @property
    def durable_offset(self) -> int:
        return self._durable

    @property
    def readable_offset(self) -> int:
        """What readers may see: the flushed end, or under the ``always`` policy the durable
        end (nothing is read that a crash could take back)."""
        return self._durable if self.policy.always else self._segments[-1].end

    @property
    def size_bytes(self) -> int:
        """What the log's segments hold, in bytes."""
        return sum(s.size for s in self._segments)

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """The next batch carries ``epoch`` (which must not go backwards)."""
        if epoch < self._epoch:
            raise StorageError(f"epoch {epoch} is below the current epoch {self._epoch}")
        self._epoch = epoch

    def begin_epoch(self, epoch: int) -> None:
        """Become the leader in ``epoch``: the next batch carries it (``set_epoch``) and the
        epoch history records it now as starting at the log's end, before any record of it
        is written (Kafka's leader-epoch start offset), so a follower asking where its last
        epoch ends is answered right. The same epoch again changes nothing."""
        self._check_open()
        self.set_epoch(epoch)
        epochs = self._epochs
        if epochs and epochs[-1][0] == epoch:
            return
        if epochs and epochs[-1][1] >= self._next:
            epochs.pop()  # an epoch begun at the end that never had a record
        epochs.append((epoch, self._next))
        self._write_epochs()

    def epochs(self) -> list[tuple[int, int]]:
        """(epoch, first offset) for every epoch that has records, in order, and last an
        epoch begun at the end with none yet (``begin_epoch``)."""
        return list(self._epochs)

    @property
    def last_epoch(self) -> int:
        """The last epoch of the history: its last record's, or one begun after it (0 for
        an empty history). ``append_raw`` takes no batch below it. (``epoch``, what the
        next own append carries, may be higher: ``set_epoch`` is not history.)"""
        return self._epochs[-1][0] if self._epochs else 0

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch, asked of a leader by a follower whose last epoch
        is ``epoch``: (the largest epoch <= ``epoch`` this log knows, the offset where it
        ends here: the next epoch's first offset, or high_watermark for the last one, or
        where its records stop when a gap follows them), or (-1, -1) when every epoch known
        here is above ``epoch`` (or none is)."""
        found, end = end_offset_for_epoch(self._epochs, epoch, self._next)
        for start, stop in self.gaps():  # an epoch whose records stop before a gap (a
            if start < end <= stop:  # reboot's jump) ends where they stop: a follower
                return found, start  # must not keep records of it the gap stands for
        return found, end

    def match_leader(self, asked: int, answer: tuple[int, int]) -> bool:
        """One round of catching up (the loop is in ``nsqpy.storage.epochs``): ``answer``
        is the leader's ``end_offset_for_epoch(asked)``, ``asked`` this log's last_epoch.
        Truncates the divergent tail: past the leader's end of its epoch and past this
        log's own end of that epoch (everything for (-1, -1)), and a gap this log jumped
        to at open (a reboot's reservation) with no record after it. A log left with no
        record begins again at 0 (``restart_at``), so that it fetches the leader's records
        rather than from a reserved offset beyond the leader's end. Returns True when
        the logs agree up to this log's end; False: ask again with the new last_epoch.
        A cut below low_watermark keeps nothing (retention took what was in common)."""
        self.flush()
        epoch, end = answer
        if epoch < 0:
            self.truncate(self.low_watermark)
        else:
            own = end_offset_for_epoch(self._epochs, epoch, self._next)[1]
            cut = min(end, own if own >= 0 else self.low_watermark, self._records_end())
            self.truncate(max(cut, self.low_watermark))  # (below it: nothing is kept)
            if cut < self.low_watermark:
                self.truncate(self.low_watermark)
        if self.low_watermark == self._next and (epoch < 0 or self._next > end):
            self.restart_at(0)  # nothing kept: fetch the leader's log from its start
        return epoch < 0 or epoch == asked

    def _records_end(self) -> int:
        """The end of the last record: high_watermark, or where a gap jumped to at open
        (``advance_to``) starts when no record follows it yet."""
        segs = self._segments
        if len(segs) > 1 and segs[-1].size == 0 and segs[-2].end < segs[-1].base:
            return segs[-2].end
        return self._next

    # -- open and recovery -----------------------------------------------------------

    def _open(self, verify: bool, start_offset: int) -> None:
        for tmp in self.directory.glob("*.tmp"):
            tmp.unlink(missing_ok=True)
        bases = sorted(
            int(p.stem) for p in self.directory.glob("*" + LOG_SUFFIX) if p.stem.isdigit()
        )
        recovery = Recovery(self.directory, self._interval, self._logger)
        for i, base in enumerate(bases):
            seg = self._segment(base)
            if not recovery.segment(seg, last=i == len(bases) - 1, verify=verify):
                continue
            if self._segments and seg.base != self._segments[-1].end:
                self._logger.info(
                    "log %s: offsets %d..%d are absent (jumped over after a crash, or in a "
                    "quarantined segment); segment %s starts at %d",
                    self.directory, self._segments[-1].end, seg.base - 1, seg.path.name, seg.base,
                )  # fmt: skip
            self._segments.append(seg)
            self._bases.append(seg.base)
        self.quarantined, self.truncated_bytes = recovery.quarantined, recovery.truncated_bytes
        self._tail_epochs = recovery.tail_epochs
        self._dir_dirty |= recovery.dir_changed
        res = self._reservation = Reservation(self.directory, self._clock, self._logger)
        left_unsynced = bool(bases) and res.left_unsynced  # (before anything rewrites it)
        floor = max(start_offset, res.floor)
        if not self._segments:  # a new log: its reservation first, then its first segment
            res.handed = floor
            # (no fsync for a brand-new log, made on an event loop often: nothing was handed
            # out, and the first flush's reservation is durable before any record is
            # written; but a log made again where a deleted one kept its end must not lose
            # that end to a power loss)
            res.write(floor, durable=res.existed or floor > 0)
            seg = self._segment(floor, end=floor)
            seg.open_fd()
            self._segments.append(seg)
            self._bases.append(floor)
            self._dir_dirty = True
        active = self._segments[-1]
        active.open_fd()
        self._next = self._durable = active.end
        self._load_epochs()
        res.handed = max(res.found_handed, self._next)
        if left_unsynced:  # (before a jump below writes the reservation settled)
            self._sync_found()
        if floor > self._next:
            if self._next > self._segments[0].base or len(self._segments) > 1:
                self.skipped = floor - self._next
                self._logger.warning(
                    "log %s: the log ends at offset %d but offsets up to %d may have been "
                    "read before the last stop (the machine went down before their fsync); "
                    "new messages start at %d so that no ID is given to other data",
                    self.directory, self._next, floor - 1, floor,
                )  # fmt: skip
            self.advance_to(floor)
        res.reserved = self._next

    def _sync_found(self) -> None:
        """fsync what a process killed before its fsync may have left in the page cache only
        (what the files hold counts as durable from the open on): each segment holding
        records, one descriptor at a time, then the epochs file and the directory. A
        failure fails the open, its files closed."""
        try:
            for seg in self._segments:
                if seg.size > 0:
                    fd = os.open(seg.path, os.O_RDONLY | _O_CLOEXEC)
                    try:
                        fsync_segment(fd)
                    finally:
                        os.close(fd)
                    seg.unsynced = False
            self._dir_dirty = self._epochs_unsynced = True
            self.sync()
        except OSError:
            for seg in self._segments:
                seg.forget()
            raise

    @property
    def reserved(self) -> int:
        return self._reservation.reserved

    def advance_to(self, offset: int) -> None:
        """Continue the log at ``offset`` (> its end): the offsets between are a gap that
        readers skip. A crash recovery's jump past offsets handed out before; for a
        follower, the same jump made by its leader."""
        self._check_open()
        if offset <= self._next:
            return
        self.flush()
        active = self._segments[-1]
        if active.size == 0:  # an empty active segment is replaced by one at the new base
            self._delete(active)
            self._segments.pop()
            self._bases.pop()
        self._roll(offset)
        self._forget_reads()
        self._gaps = None
        owed = self._durable < self._next  # (what is unsynced below stays owed)
        if not owed:
            self._durable = offset
        self._next = offset
        res = self._reservation
        res.handed = max(res.handed, offset)
        if owed and res.reserved <= offset:
            res.extend(offset)  # (R == H would say the log is settled: see reservation.py)
        else:
            res.write(max(offset, res.reserved))

    def restart_at(self, offset: int) -> None:
        """A log that holds no record (a follower that has nothing in common with its
        leader, or a reboot's jump and nothing else) begins again at ``offset``, lower or
        higher: its leader's offsets take over, the epoch history is empty and the
        reservation comes down to ``offset`` (see the module doc: nothing here was ever
        committed). ValueError when the log holds records."""
        self._check_open()
        if self.low_watermark != self._next:
            raise ValueError(f"log {self.directory} holds records: it cannot restart")
        if offset == self._next:
            return
        self.flush()
        with self._lock:
            while self._syncing:
                self._sync_idle.wait()
            for seg in self._segments:
                self._delete(seg)
            self._segments.clear()
            self._bases.clear()
        self._roll(offset)
        self._forget_reads()
        self._gaps = None
        self._next = self._durable = offset
        self._epochs = []
        self._write_epochs()
        self._reservation.lower(offset)

    def gaps(self) -> list[tuple[int, int]]:
        """[start, end) ranges of offsets the log skips between its segments (a crash's
        lost tail jumped over, a quarantined segment), oldest first."""
        if self._gaps is None:
            segs = self._segments
            self._gaps = [(a.end, b.base) for a, b in pairwise(segs) if a.end < b.base]
        return self._gaps

    def _segment(self, base: int, end: int = 0) -> Segment:
        path = self.directory / (segment_name(base) + LOG_SUFFIX)
        return Segment(base, path, end=end, lock=self._lock, interval=self._interval)

    def _load_epochs(self) -> None:
        path = self.directory / EPOCHS_FILE
        known: list[tuple[int, int]] = []
        try:
            for line in path.read_text().splitlines():
                epoch_text, _, first_text = line.partition(" ")
                known.append((int(epoch_text), int(first_text)))
        except FileNotFoundError:
            known = []  # (a new log, or one written before epochs were kept)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            self._logger.warning(
                "log %s: its epoch history (%s) is damaged (%s): rebuilt from the epochs of"
                " the records in its last segment; a follower catching up from it may cut"
                " more than it must",
                self.directory,
                EPOCHS_FILE,
                exc,
            )
            known = []
        tail = self._tail_epochs
        tail_base = self._segments[-1].base
        epochs = [ef for ef in known if ef[1] < min(tail_base, self._next)]
        for e, first in tail:
            if not epochs or epochs[-1][0] != e:
                epochs.append((e, first))
        last = known[-1] if known else None
        if last is not None and last[1] == self._next and last[0] > self._epoch_of(epochs):
            epochs.append(last)  # begun at the end (``begin_epoch``), no record yet
        self._epochs = epochs
        self._epoch = self._epoch_of(epochs)
        if epochs != known:
            self._write_epochs()

    @staticmethod
    def _epoch_of(epochs: list[tuple[int, int]]) -> int:
        return epochs[-1][0] if epochs else 0

    def _write_epochs(self) -> None:
        text = "".join(f"{e} {first}\n" for e, first in self._epochs)
        write_atomic(self.directory / EPOCHS_FILE, text.encode(), durable=False)  # (synced by sync)
        self._epochs_dirty = False
        self._epochs_unsynced = True
        self._dir_dirty = True

    # -- append and flush ------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.directory} is closed")

    def append(self, entries: Sequence[Entry]) -> int:
        """Encode ``entries`` into the pending buffer (no syscall); returns the first offset."""
        self._check_open()
        base = self._next
        if not entries:
            return base
        parts, max_ts = encode_entries(entries, base, self._epoch, self._clock())
        self._queue(parts, base, len(entries), max_ts)
        return base

    def append_bodies(
        self, bodies: Sequence[bytes], timestamp: int = 0, deliver_at: int = 0
    ) -> int:
        """Fast path for PUB/MPUB/DPUB: plain bodies, one timestamp. Returns the first offset."""
        self._check_open()
        base = self._next
        if not bodies:
            return base
        ts = timestamp or self._clock()
        self._queue(encode_bodies(bodies, base, self._epoch, ts, deliver_at), base, len(bodies), ts)
        return base

    def append_raw(self, data: bytes, start_offset: int) -> int:
        """Append a leader's whole batches as they are (what its ``read_raw`` returned:
        ``RawBatch.data`` and ``.offset``): same offsets, epochs and bytes. Returns the new
        high_watermark.

        Everything is checked before anything is queued: ``start_offset`` must be the log's
        end (else ``OffsetMismatch``; where the leader's log skips offsets, ``advance_to``
        the batch's offset first), every header and records CRC32C (``CorruptRecord``
        naming the byte and offset), offsets chaining from ``start_offset``, epochs never
        below ``last_epoch`` (``StaleEpoch``: truncate first, see ``match_leader``). A
        batch in a new epoch adds it to the history at its first offset, as the leader's
        ``begin_epoch`` and writes did. Then it is pending like any append: ``flush``
        writes everything appended since the last one in one ``pwritev``, extending the
        reservation, rolling segments and indexing as for the leader. ``data`` is kept
        (not copied) until then.
        """
        self._check_open()
        if start_offset != self._next:
            raise OffsetMismatch(start_offset, self._next)
        checked = check_raw(data, start_offset, self.last_epoch)
        if not checked:
            return self._next
        view = memoryview(data) if len(checked) > 1 else None
        epochs = self._epochs
        pending = self._pending
        epoch = base = count = 0
        for pos, end, base, count, epoch, max_ts in checked:
            if not epochs or epochs[-1][0] != epoch:
                if epochs and epochs[-1][1] >= base:
                    epochs.pop()  # an epoch begun here with no record (a past leadership)
                epochs.append((epoch, base))
                self._epochs_dirty = True
            part: Buf = data if view is None else view[pos:end]
            pending.append(([part], end - pos, base, count, max_ts))
        self._next = base + count
        if epoch > self._epoch:
            self._epoch = epoch
        return self._next

    def _queue(self, parts: Sequence[Buf], base: int, count: int, max_ts: int) -> None:
        if not self._epochs or self._epochs[-1][0] != self._epoch:
            self._epochs.append((self._epoch, base))
            self._epochs_dirty = True
        size = len(parts[0]) if len(parts) == 1 else sum(map(len, parts))
        self._pending.append((parts, size, base, count, max_ts))
        self._next = base + count

    def pending(self) -> bool:
        return bool(self._pending)

    def flush(self) -> int:
        """Write everything pending: one syscall (two at a segment roll). Returns flushed_offset."""
        if not self._pending:
            return self.flushed_offset
        self._check_open()
        try:
            if self._next > self._reservation.reserved:
                self._reservation.extend(self._next)
            if self._epochs_dirty:  # before the records: a crash between never forgets an
                self._write_epochs()  # epoch change (recovery drops entries past the end)
        except OSError:
            self._undo_pending()
            raise
        pending, self._pending = self._pending, []
        seg = self._segments[-1]
        group: list[Buf] = []
        at = seg.size
        first, begun = pending[0][2], at  # (of the group written to the last segment)
        self._tail = None
        try:
            for parts, size, base, _count, max_ts in pending:
                if at > 0 and at + size > self._segment_bytes:
                    self._write(seg, group, at, base)
                    group, first, begun = [], base, 0
                    seg = self._roll(base)
                    at = 0
                seg.add_index(base, at, self._interval)
                if max_ts > seg.max_ts:
                    seg.max_ts = max_ts
                group += parts
                at += size
            self._write(seg, group, at, self._next)
        except OSError:
            self._undo_pending()
            raise
        if self._keep_tail and at - begun <= TAIL_BYTES:
            self._tail = (first, self._next, seg, group, at - begun)
        return seg.end

    def _write(self, seg: Segment, group: list[Buf], end_pos: int, end_offset: int) -> None:
        if not group:
            return
        fd = seg.open_fd()
        start = seg.size
        bufs: Sequence[Buf] = group
        if len(group) > IOV_MAX:
            bufs = [b"".join(group)]
        want = end_pos - start
        done = os.pwritev(fd, bufs, start) if len(bufs) > 1 else os.pwrite(fd, bufs[0], start)
        if done < want:  # short write (disk full, signal): finish it, or fail below
            rest = b"".join(bufs)[done:]
            while rest:
                n = os.pwrite(fd, rest, start + done)
                if n <= 0:
                    raise OSError(f"short write to {seg.path}")
                done += n
                rest = rest[n:]
        # unsynced before end: a sync() in a worker thread that sees the new end must also
        # see the segment as needing its fsync, or it would call those offsets durable.
        seg.unsynced = True
        seg.size = end_pos
        seg.end = end_offset
        if not self._unsynced_since:
            self._unsynced_since = self._clock()

    def _undo_pending(self) -> None:
        """A write failed: cut any partial batch and forget what was not written."""
        seg = self._segments[-1]
        if seg.fd is not None:
            try:
                os.ftruncate(seg.fd, seg.size)
            except OSError:
                pass
        del seg.idx_off[bisect_right(seg.idx_pos, seg.size - 1) :]
        del seg.idx_pos[len(seg.idx_off) :]
        del seg.idx_ts[len(seg.idx_off) :]
        self._pending = []
        self._next = seg.end
        epochs = trimmed(self._epochs, self._next)
        if epochs != self._epochs:
            self._epochs = epochs
            self._epochs_dirty = True

    def _roll(self, base: int) -> Segment:
        """A new active segment at ``base`` (the one before it, if any, is sealed)."""
        if self._segments:
            self._segments[-1].seal()
        seg = self._segment(base, end=base)
        seg.open_fd()
        with self._lock:
            self._segments.append(seg)
            self._bases.append(base)
            self._dir_dirty = True
            if not self._syncing:
                self._close_idle()
        return seg

    def _close_idle(self) -> None:
        """Close fds of sealed, synced segments the reader is not on (lock held, no sync)."""
        for seg in self._segments[:-1]:
            if seg.fd is not None and not seg.unsynced and seg is not self._reader.segment:
                seg.close_fd()

    # -- fsync -----------------------------------------------------------------------

    def sync_due(self, now_ns: int) -> bool:
        unsynced = self._segments[-1].end - self._durable
        if unsynced <= 0 or self._closed:  # (closed: nothing more is fsynced, ever)
            return False
        p = self.policy
        if p.always:
            return True
        if p.every_messages and unsynced >= p.every_messages:
            return True
        return bool(p.every_ms and now_ns - self._unsynced_since >= p.every_ms * 1_000_000)

    def sync_due_in(self, now_ns: int) -> float | None:
        """Seconds from ``now_ns`` until the policy's time bound makes an fsync due (0:
        it is); None when everything flushed is durable or the policy has no time bound."""
        if self._segments[-1].end - self._durable <= 0 or not self.policy.every_ms:
            return None
        every_ns = self.policy.every_ms * 1_000_000
        since = self._unsynced_since or now_ns
        # (never past the bound from now: a wall clock set back looks again that soon)
        return min(every_ns, max(0, since + every_ns - now_ns)) / 1e9

    def sync(self) -> int:
        """fsync everything flushed so far; safe from a worker thread. Returns durable_offset."""
        with self._lock:
            while self._syncing:
                self._sync_idle.wait()
            if self._closed:
                return self._durable
            target = self._segments[-1].end
            segs = [s for s in self._segments if s.unsynced]
            fds = self._sync_fds(segs)
            self._syncing = True
            for s in segs:
                s.unsynced = False
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            epochs, self._epochs_unsynced = self._epochs_unsynced, False
            since, self._unsynced_since = self._unsynced_since, 0
        ok = False
        try:
            for fd in fds:
                fsync_segment(fd)
                os.close(fd)
            fds = []
            if epochs:
                self._fsync_path(self.directory / EPOCHS_FILE, os.O_RDONLY)
            if dir_dirty:
                self._fsync_path(self.directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            ok = True
        finally:
            for fd in fds:
                os.close(fd)
            with self._lock:
                self._syncing = False
                if ok:
                    self._durable = max(self._durable, min(target, self._segments[-1].end))
                else:
                    for s in segs:
                        s.unsynced = True
                    self._dir_dirty |= dir_dirty
                    self._epochs_unsynced |= epochs
                    self._unsynced_since = self._unsynced_since or since
                self._sync_idle.notify_all()
        return self._durable

    @staticmethod
    def _sync_fds(segs: list[Segment]) -> list[int]:
        """Descriptors of their own to fsync ``segs`` with (lock held): the budget of open
        files may close a segment's descriptor while the fsync runs in another thread, and
        fsync covers the file whichever descriptor wrote it."""
        fds: list[int] = []
        try:
            for seg in segs:
                if seg.fd is not None:
                    fds.append(os.dup(seg.fd))
                else:
                    fds.append(os.open(seg.path, os.O_RDONLY | _O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    @staticmethod
    def _fsync_path(path: Path, flags: int) -> None:
        try:
            fd = os.open(path, flags | _O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- reading ---------------------------------------------------------------------

    def read(self, offset: int, max_count: int, max_bytes: int = 1 << 20) -> list[Record]:
        """Records from ``offset`` below flushed_offset, bounded by count and bytes (>= 1).

        Each batch's records CRC32C is checked (one C call) before any of its records is
        returned; a failed check raises CorruptRecord, and other batches stay readable.
        """
        self._check_offset(offset)
        return self._reader.read(offset, max_count, max_bytes, False)  # type: ignore[return-value]

    def read_frames(self, offset: int, max_count: int, max_bytes: int = 1 << 20) -> list[Frame]:
        """Like read, as (offset, timestamp, deliver_at, flags, body) tuples: the fast path."""
        self._check_offset(offset)
        return self._reader.read(offset, max_count, max_bytes, True)  # type: ignore[return-value]

    def read_raw(self, offset: int, max_bytes: int = 1 << 20, *, verify: bool = False) -> RawBatch:
        """Whole batches as stored on disk, from the one holding ``offset``: the bulk read
        for replication and the HTTP log-read API.

        Up to ``max_bytes`` but always at least one batch, below flushed_offset, from one
        segment (the next call goes on to the next); ``count == 0`` at the end. The server
        walks batch headers only, checking their CRCs and that their offsets chain; with
        ``verify`` it also checks each batch's records CRC32C (one C call per batch). The
        receiver parses the records and checks their CRCs, as ``RawBatch.records`` does.
        If ``offset`` is inside a batch, that batch is resealed to start at ``offset`` (a
        fresh header over its remaining records), so ``RawBatch.offset == offset`` unless
        records were missing.
        """
        if self._closed or offset < self._segments[0].base:
            self._check_offset(offset)
        tail = self._tail
        if tail is not None and offset == tail[0] and not verify:
            first, end, seg, parts, size = tail
            if seg is self._segments[-1] and not seg.holes and size <= max(max_bytes, 1):
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                if not isinstance(data, bytes):
                    data = bytes(data)
                self._tail = (first, end, seg, [data], size)  # (joined once for all)
                return RawBatch(first, end - first, data)
        return self._reader.read_raw(offset, max_bytes, verify)

    def release_tail(self, read_to: int) -> None:
        """Every follower has read up to ``read_to``: the last flush is let go when it
        ends there or before (``keep_tail``; an idle partition holds nothing)."""
        tail = self._tail
        if tail is not None and tail[1] <= read_to:
            self._tail = None

    @property
    def keep_tail(self) -> bool:
        return self._keep_tail

    @keep_tail.setter
    def keep_tail(self, keep: bool) -> None:
        self._keep_tail = keep
        if not keep:
            self._tail = None

    def _forget_reads(self) -> None:
        """What reads kept of the log goes (it was cut, rolled or restarted)."""
        self._reader.forget()
        self._tail = None

    def _check_offset(self, offset: int) -> None:
        self._check_open()
        if offset < self._segments[0].base:
            raise OffsetOutOfRange(offset, self._segments[0].base, self._next)

    def offset_for_timestamp(self, ts_ns: int) -> int:
        """The first offset whose timestamp is >= ts_ns (flushed_offset when there is none)."""
        self._check_open()
        return self._reader.offset_for_timestamp(ts_ns)

    # -- truncation and retention ----------------------------------------------------

    def truncate(self, offset: int) -> None:
        """Drop every record >= offset (a replica's divergent tail). The epoch history is
        cut to match (``epochs.trimmed``: an epoch begun at the new end with no record
        goes too, even when no record does), so that the leader's batches appended next
        give the leader's history. The reservation comes down to the new end: see the
        module doc. ``epoch`` (what the log's own next append carries) is left as set."""
        self._check_open()
        if offset >= self._next:
            if self._epochs and self._epochs[-1][1] >= offset:
                self._epochs = trimmed(self._epochs, offset)
                self._write_epochs()
            return
        self.flush()
        if offset < self.low_watermark:
            raise OffsetOutOfRange(offset, self.low_watermark, self._next)
        with self._lock:
            while self._syncing:
                self._sync_idle.wait()
            i = bisect_right(self._bases, offset) - 1
            for seg in self._segments[i + 1 :]:
                self._delete(seg)
            del self._segments[i + 1 :]
            del self._bases[i + 1 :]
            seg = self._segments[-1]
            self._cut_segment(seg, offset)
            self._dir_dirty = True
            self._gaps = None
        self._forget_reads()
        self._next = seg.end
        self._durable = min(self._durable, self._next)
        self._epochs = trimmed(self._epochs, self._next)
        self._write_epochs()
        self.sync()  # (the reservation below says the log is settled: see reservation.py)
        self._reservation.lower(self._next)  # (what was cut was never read: see module doc)

    def _cut_segment(self, seg: Segment, offset: int) -> None:
        fd = seg.open_fd()
        if offset < seg.end:
            cut = cut_position(seg, fd, offset)
            os.ftruncate(fd, cut)
            seg.adopt(scan_segment(fd, seg.base, cut, self._interval))
            seg.unsynced = True
            seg.index_path.unlink(missing_ok=True)
        if seg.sealed:  # the active segment again: its index lives in memory
            seg.index()
            seg.sealed = False
            LOADED_INDEXES.release(seg)

    def _delete(self, seg: Segment) -> None:
        seg.forget()
        seg.path.unlink(missing_ok=True)
        seg.index_path.unlink(missing_ok=True)

    def retain(self, confirmed: int | None, now_ns: int) -> int:
        """Delete whole segments below ``confirmed`` that retention allows; returns low_watermark.

        ``confirmed`` None means the log has no cursors: keep everything. The active
        (last) segment is never deleted.
        """
        self._check_open()
        if confirmed is None:
            return self.low_watermark
        with self._lock:
            if self._syncing:
                return self._segments[0].base  # try again on the next housekeeping pass
            total = sum(s.size for s in self._segments)
            while len(self._segments) > 1:
                seg = self._segments[0]
                if seg.end > confirmed or not self._retention_allows(seg, total, now_ns):
                    break
                self._delete(seg)
                total -= seg.size
                del self._segments[0]
                del self._bases[0]
                self._dir_dirty = True
                self._reader.dropped(seg)
                self._tail = None
                self._gaps = None
            return self._segments[0].base

    def set_retention(self, retention_ms: int) -> None:
        """Keep confirmed records this long from now on (0: as long as the size allows)."""
        self._retention_ms = retention_ms

    def _retention_allows(self, seg: Segment, total: int, now_ns: int) -> bool:
        if not self._retention_ms and not self._retention_bytes:
            return True
        if self._retention_ms and seg.max_ts <= now_ns - self._retention_ms * 1_000_000:
            return True
        return bool(self._retention_bytes and total > self._retention_bytes)

    # -- stats and close -------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        return {
            "segments": len(self._segments),
            "bytes": self.size_bytes,
            "quarantined": self.quarantined,
            "truncated_bytes": self.truncated_bytes,
            "low_watermark": self.low_watermark,
            "high_watermark": self._next,
            "flushed_offset": self.flushed_offset,
            "durable_offset": self._durable,
            "pending_messages": self._next - self.flushed_offset,
            "index_entries": sum(len(s.idx_off) for s in self._segments),
            "holes": sum(len(s.holes) for s in self._segments),
            "epoch": self._epoch,
            "reserved": self._reservation.reserved,
            "skipped": self.skipped,
        }

    def close(self) -> None:
        """Flush, fsync, save indexes, close files. Idempotent. The reservation comes down
        to the log's end: a clean restart continues without a gap."""
        if self._closed:
            return
        self.flush()
        self.sync()
        if self._reservation.reserved != self._next or not self._reservation.settled:
            try:
                self._reservation.settle(self._next)
            except OSError as exc:  # the next open jumps to the old reservation: no harm
                self._logger.error("log %s: cannot lower its reservation: %s", self.directory, exc)
        with self._lock:
            while self._syncing:
                self._sync_idle.wait()
            self._closed = True
            for seg in self._segments:
                if seg.index_dirty:
                    seg.save_index()
                seg.forget()
        self._forget_reads()

    def destroy(self) -> None:
        """Close and remove every file but the reservation (a deleted topic): the same name
        created again goes on from there, so no message ID is reused."""
        if not self._closed:
            try:
                self.flush()
            except OSError:
                pass  # (the topic goes anyway; what could not be written was never read)
            with self._lock:
                while self._syncing:
                    self._sync_idle.wait()
                self._closed = True
                for seg in self._segments:
                    seg.forget()
            self._forget_reads()
        res = self._reservation
        try:
            if res.reserved > self._next or self._durable < self._next:
                # records not known to be fsynced: settled only once they are gone
                res.handed = max(res.handed, self._next)
                res.write(max(res.reserved, self._next + 1))
            else:
                res.settle(self._next)
        except OSError:
            pass  # (a full disk, say: written again below, once the files have freed room)
        for path in self.directory.iterdir():
            if path.name == RESERVED_FILE:
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if not res.settled or res.file_handed < self._next:
            try:
                res.settle(self._next)
            except OSError as exc:
                if res.file_handed < self._next:  # (else the file holds the end already)
                    self._logger.error(
                        "log %s: deleted, but its end (%d) could not be recorded (%s): the "
                        "topic made again before a restart may give offsets from %d again",
                        self.directory, self._next, exc, res.file_handed,
                    )  # fmt: skip

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["PartitionLog"]
