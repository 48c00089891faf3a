"""The trace store: a bounded, durable table of message life events, queried by ID.

Owns ``TraceStore``, one SQLite file (stdlib ``sqlite3``, WAL, synchronous=NORMAL) holding
``TraceEvent`` rows in arrival order: when, which topic/channel/partition/offset and
message ID, the record's trace ID, what happened (published, delivered, requeued,
timed_out, finished, dead_lettered, expired), to or from which client, the attempt, and a
detail. It keeps at most ``max_records`` rows: each ``append`` deletes the oldest rows
beyond the bound in the same transaction. A lock serialises the writer thread and readers,
so one store may be shared between them. Imports only the standard library and
``nsqpy.errors``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from nsqpy.errors import StorageError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS trace (
    seq INTEGER PRIMARY KEY,
    ts INTEGER NOT NULL,
    topic TEXT NOT NULL,
    channel TEXT NOT NULL,
    partition INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    msg_id TEXT NOT NULL,
    trace_id TEXT,
    event TEXT NOT NULL,
    client TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS trace_by_msg ON trace (topic, msg_id);
CREATE INDEX IF NOT EXISTS trace_by_trace_id ON trace (trace_id);
"""
_COLUMNS = (
    "ts, topic, channel, partition, offset, msg_id, trace_id, event, client, attempts, detail"
)
_INSERT = f"INSERT INTO trace ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


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


def _row(e: TraceEvent) -> tuple[object, ...]:
    tid = str(e.trace_id) if e.trace_id else None  # u64 does not fit SQLite's i64
    return (e.ts, e.topic, e.channel, e.partition, e.offset, e.msg_id, tid,
            e.event, e.client, e.attempts, e.detail)  # fmt: skip


def _event(row: tuple[object, ...]) -> TraceEvent:
    ts, topic, channel, partition, offset, msg_id, tid, event, client, attempts, detail = row
    return TraceEvent(
        int(ts), str(topic), str(channel), int(partition), int(offset), str(msg_id),  # type: ignore[call-overload]
        int(tid) if tid else 0, str(event), str(client), int(attempts), str(detail),  # type: ignore[call-overload]
    )  # fmt: skip


class TraceStore:
    """At most ``max_records`` trace events in one SQLite file."""

    def __init__(self, path: str | os.PathLike[str], max_records: int = 1_000_000) -> None:
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records}")
        self.path = Path(path)
        self.max_records = max_records
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StorageError(f"trace store {self.path}: {exc}") from exc

    def append(self, events: Sequence[TraceEvent]) -> None:
        """Insert ``events`` and drop the oldest beyond the bound, in one transaction."""
        if not events:
            return
        with self._lock:
            try:
                self._db.execute("BEGIN")
                try:
                    self._db.executemany(_INSERT, [_row(e) for e in events])
                    self._db.execute(
                        "DELETE FROM trace WHERE seq <= (SELECT MAX(seq) FROM trace) - ?",
                        (self.max_records,),
                    )
                except sqlite3.Error:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StorageError(f"trace store {self.path}: {exc}") from exc

    def _select(self, where: str, args: tuple[object, ...], limit: int) -> list[TraceEvent]:
        sql = f"SELECT {_COLUMNS} FROM trace WHERE {where} ORDER BY seq LIMIT ?"
        with self._lock:
            try:
                rows = self._db.execute(sql, (*args, limit)).fetchall()
            except sqlite3.Error as exc:
                raise StorageError(f"trace store {self.path}: {exc}") from exc
        return [_event(r) for r in rows]

    def by_message(self, topic: str, msg_id: str, limit: int = 1000) -> list[TraceEvent]:
        """The events of message ``msg_id`` (16 hex characters) of ``topic``, oldest first."""
        return self._select("topic = ? AND msg_id = ?", (topic, msg_id), limit)

    def by_trace_id(
        self, trace_id: int, topic: str | None = None, limit: int = 1000
    ) -> list[TraceEvent]:
        """The events of every message whose record carries ``trace_id``, oldest first."""
        if topic is None:
            return self._select("trace_id = ?", (str(trace_id),), limit)
        return self._select("trace_id = ? AND topic = ?", (str(trace_id), topic), limit)

    def count(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT COUNT(*) FROM trace").fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
