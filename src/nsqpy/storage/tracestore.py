"""The trace store: a bounded, durable table of message life events, queried by ID.

Owns ``TraceStore``, one SQLite file (stdlib ``sqlite3``, WAL, synchronous=NORMAL) holding
events in batches (``TraceBatch``), in arrival order: one row per burst of the same event
(published, delivered, requeued, timed_out, finished, dead_lettered, expired) of one
topic partition and channel, to or from one client, at one time and with one detail, with
the burst's offsets and attempts packed in blobs and the trace IDs of the messages that
carry one. The usual burst, a run of consecutive offsets at one attempt count, packs to
almost nothing: no offsets blob (the row's ``first`` and ``count`` say them) and a single
attempt count; other bursts keep one entry per event. A row per burst rather than per event keeps the writer's cost (and its hold on
the GIL) per burst: a traced channel drains nearly as fast as an untraced one. A side
table maps each trace ID to the rows that hold it. A message is known by (topic,
partition, offset); the caller formats message IDs (``msg_id``). It keeps at most
``max_records`` events: each ``append_batches`` drops the oldest beyond the bound (whole
rows, then the head of the oldest row left) in the same transaction. A lock serialises the
writer thread and readers, so one store may be shared between them. A file written by
the old one-row-per-event schema (table ``trace``) is left as it is and not read. Imports
only the standard library and ``nsqpy.errors``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from nsqpy.errors import StorageError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS trace_batch (
    seq INTEGER PRIMARY KEY,
    ts INTEGER NOT NULL,
    topic TEXT NOT NULL,
    channel TEXT NOT NULL,
    partition INTEGER NOT NULL,
    event TEXT NOT NULL,
    client TEXT NOT NULL,
    detail TEXT NOT NULL,
    first INTEGER NOT NULL,
    last INTEGER NOT NULL,
    count INTEGER NOT NULL,
    offsets BLOB NOT NULL,
    attempts BLOB NOT NULL,
    tids BLOB
);
CREATE INDEX IF NOT EXISTS trace_batch_by_offset ON trace_batch (topic, partition, first);
CREATE TABLE IF NOT EXISTS trace_id (trace_id TEXT NOT NULL, seq INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS trace_id_by_id ON trace_id (trace_id);
"""
_COLUMNS = (
    "seq, ts, topic, channel, partition, event, client, detail, first, count, offsets, "
    "attempts, tids"
)
_INSERT = (
    "INSERT INTO trace_batch (ts, topic, channel, partition, event, client, detail, first, "
    "last, count, offsets, attempts, tids) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class TraceEvent(NamedTuple):
    """One event of a message's life (``trace_id`` 0 = the record has none)."""

    ts: int  # ns since the epoch
    topic: str
    channel: str  # "" for topic events (published)
    partition: int
    offset: int
    msg_id: str
    trace_id: int
    event: str
    client: str
    attempts: int
    detail: str = ""


class TraceBatch(NamedTuple):
    """One burst of the same event: ``offsets[i]`` with ``attempts[i]``; ``trace_ids`` maps
    the offsets whose record carries a trace ID to it."""

    ts: int
    topic: str
    channel: str
    partition: int
    event: str
    client: str
    detail: str
    offsets: Sequence[int]
    attempts: Sequence[int]
    trace_ids: Mapping[int, int]


def _hex_id(partition: int, offset: int) -> str:
    return f"{partition:x}:{offset:x}"


def batches_of(events: Sequence[TraceEvent]) -> list[TraceBatch]:
    """Consecutive events of the same burst, grouped."""
    out: list[TraceBatch] = []
    for e in events:
        key = (e.ts, e.topic, e.channel, e.partition, e.event, e.client, e.detail)
        if not out or out[-1][:7] != key:
            out.append(TraceBatch(*key, [], [], {}))
        last = out[-1]
        last.offsets.append(e.offset)  # type: ignore[attr-defined]
        last.attempts.append(e.attempts)  # type: ignore[attr-defined]
        if e.trace_id:
            last.trace_ids[e.offset] = e.trace_id  # type: ignore[index]
    return out


def _pack_offsets(offsets: Sequence[int]) -> bytes:
    """b"" for a run of consecutive offsets (the row's first and count are enough), else
    every offset."""
    first, n = offsets[0], len(offsets)
    if offsets[-1] - first == n - 1 and list(offsets) == list(range(first, first + n)):
        return b""
    return array("q", offsets).tobytes()


def _pack_attempts(attempts: Sequence[int]) -> bytes:
    """One count when every event has the same, else one per event."""
    if attempts.count(attempts[0]) == len(attempts):  # type: ignore[attr-defined]
        return array("I", attempts[:1]).tobytes()
    return array("I", attempts).tobytes()


def _unpack(raw_o: bytes, raw_a: bytes, first: int, count: int) -> tuple[array[int], array[int]]:
    """A row's offsets and attempts, one each per event (see ``_pack_offsets``,
    ``_pack_attempts``)."""
    offsets, attempts = array("q"), array("I")
    if raw_o:
        offsets.frombytes(raw_o)
    else:
        offsets.extend(range(first, first + count))
    attempts.frombytes(raw_a)
    if len(attempts) == 1 and count > 1:
        attempts *= count
    return offsets, attempts


def _pack_tids(trace_ids: Mapping[int, int]) -> bytes | None:
    if not trace_ids:
        return None
    flat = array("Q")
    for offset, tid in trace_ids.items():
        flat.append(offset)
        flat.append(tid)
    return flat.tobytes()


def _unpack_tids(raw: bytes | None) -> dict[int, int]:
    if not raw:
        return {}
    flat = array("Q")
    flat.frombytes(raw)
    return dict(zip(flat[0::2], flat[1::2], strict=True))


class TraceStore:
    """At most ``max_records`` trace events in one SQLite file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        max_records: int = 1_000_000,
        msg_id: Callable[[int, int], str] = _hex_id,
    ) -> None:
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records}")
        self.path = Path(path)
        self.max_records = max_records
        self.msg_id = msg_id  # (partition, offset) -> the message ID shown
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT COALESCE(SUM(count), 0) FROM trace_batch").fetchone()
        except sqlite3.Error as exc:
            raise StorageError(f"trace store {self.path}: {exc}") from exc
        self._count = int(row[0])

    def append(self, events: Sequence[TraceEvent]) -> None:
        """Insert ``events`` (consecutive ones of one burst share a row)."""
        self.append_batches(batches_of(events))

    def append_batches(self, batches: Sequence[TraceBatch]) -> None:
        """Insert ``batches`` and drop the oldest events beyond the bound, in one
        transaction."""
        batches = [b for b in batches if b.offsets]
        if not batches:
            return
        with self._lock:
            try:
                self._db.execute("BEGIN")
                try:
                    self._insert(batches)
                    self._trim(self._count - self.max_records)
                except sqlite3.Error:
                    self._db.execute("ROLLBACK")
                    self._count = int(self._db.execute(
                        "SELECT COALESCE(SUM(count), 0) FROM trace_batch").fetchone()[0])  # fmt: skip
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StorageError(f"trace store {self.path}: {exc}") from exc

    def _insert(self, batches: Sequence[TraceBatch]) -> None:
        added = 0
        for b in batches:
            offsets = b.offsets
            raw_o = _pack_offsets(offsets)
            low, high = (offsets[0], offsets[-1]) if not raw_o else (min(offsets), max(offsets))
            cur = self._db.execute(_INSERT, (
                b.ts, b.topic, b.channel, b.partition, b.event, b.client, b.detail,
                low, high, len(offsets), raw_o, _pack_attempts(b.attempts),
                _pack_tids(b.trace_ids),
            ))  # fmt: skip
            if b.trace_ids:
                self._db.executemany(
                    "INSERT INTO trace_id (trace_id, seq) VALUES (?, ?)",
                    [(str(tid), cur.lastrowid) for tid in set(b.trace_ids.values())],
                )
            added += len(offsets)
        self._count += added

    def _trim(self, excess: int) -> None:
        """Drop the ``excess`` oldest events: whole rows, then the head of the next."""
        while excess > 0:
            row = self._db.execute(
                "SELECT seq, first, count, offsets, attempts, tids FROM trace_batch "
                "ORDER BY seq LIMIT 1"
            ).fetchone()
            if row is None:
                return
            seq, first, count, raw_offsets, raw_attempts, raw_tids = row
            if count <= excess:
                self._db.execute("DELETE FROM trace_batch WHERE seq = ?", (seq,))
                self._db.execute("DELETE FROM trace_id WHERE seq = ?", (seq,))
                excess -= count
                self._count -= count
                continue
            offsets, attempts = _unpack(raw_offsets, raw_attempts, first, count)
            offsets, attempts = offsets[excess:], attempts[excess:]
            tids = _unpack_tids(raw_tids)
            if tids:
                kept = set(offsets)
                tids = {o: t for o, t in tids.items() if o in kept}
            raw_o = _pack_offsets(offsets)
            self._db.execute(
                "UPDATE trace_batch SET first = ?, last = ?, count = ?, offsets = ?, "
                "attempts = ?, tids = ? WHERE seq = ?",
                (offsets[0] if not raw_o else min(offsets), max(offsets), len(offsets), raw_o,
                 _pack_attempts(attempts), _pack_tids(tids), seq),
            )  # fmt: skip
            self._count -= excess
            return

    def _events(
        self, rows: list[tuple[object, ...]], want: Callable[[int, int], bool], limit: int
    ) -> Iterator[TraceEvent]:
        for row in rows:
            (_seq, ts, topic, channel, partition, event, client, detail, first, count, raw_o,
             raw_a, raw_t) = row  # fmt: skip
            offsets, attempts = _unpack(raw_o, raw_a, first, count)  # type: ignore[arg-type]
            tids = _unpack_tids(raw_t)  # type: ignore[arg-type]
            p = int(partition)  # type: ignore[call-overload]
            for offset, attempt in zip(offsets, attempts, strict=True):
                tid = tids.get(offset, 0)
                if not want(offset, tid):
                    continue
                if limit <= 0:
                    return
                limit -= 1
                yield TraceEvent(int(ts), str(topic), str(channel), p, offset,  # type: ignore[call-overload]
                                 self.msg_id(p, offset), tid, str(event), str(client), attempt,
                                 str(detail))  # fmt: skip

    def _select(self, where: str, args: tuple[object, ...]) -> list[tuple[object, ...]]:
        sql = f"SELECT {_COLUMNS} FROM trace_batch WHERE {where} ORDER BY seq"
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise StorageError(f"trace store {self.path}: {exc}") from exc

    def by_message(
        self, topic: str, partition: int, offset: int, limit: int = 1000
    ) -> list[TraceEvent]:
        """The events of the message at ``offset`` of ``topic``'s ``partition``, oldest
        first."""
        rows = self._select("topic = ? AND partition = ? AND first <= ? AND last >= ?",
                            (topic, partition, offset, offset))  # fmt: skip
        return list(self._events(rows, lambda o, _t: o == offset, limit))

    def by_trace_id(
        self, trace_id: int, topic: str | None = None, limit: int = 1000
    ) -> list[TraceEvent]:
        """The events of every message whose record carries ``trace_id``, oldest first."""
        where = "seq IN (SELECT seq FROM trace_id WHERE trace_id = ?)"
        args: tuple[object, ...] = (str(trace_id),)
        if topic is not None:
            where, args = where + " AND topic = ?", (*args, topic)
        rows = self._select(where, args)
        return list(self._events(rows, lambda _o, t: t == trace_id, limit))

    def count(self) -> int:
        with self._lock:
            return self._count

    def close(self) -> None:
        with self._lock:
            self._db.close()
