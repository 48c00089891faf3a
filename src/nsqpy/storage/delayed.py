"""The delayed store: deferred and requeued messages of a partition's channels, on disk.

Owns ``DelayedStore``, one SQLite file (stdlib ``sqlite3``, WAL mode) per topic partition holding, for every channel, entries keyed by (channel, offset) and
ordered by (channel, deliver-at, offset), with their attempt counts. The body stays in
the log; an entry only says when to deliver which offset again. Each write commits at once:
with synchronous=NORMAL a commit survives a crash of the process; with ``durable`` (FULL,
for ``--sync-always``) it is fsynced before the call returns, so it also survives a power
loss before the channel's cursor, which confirms the entry's offset, is saved. Imports only the standard
library and ``nsqpy.errors``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nsqpy.errors import StorageError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS delayed (
    channel TEXT NOT NULL,
    offset INTEGER NOT NULL,
    deliver_at INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    PRIMARY KEY (channel, offset)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS delayed_due ON delayed (channel, deliver_at, offset);
"""
_UPSERT = (
    "INSERT INTO delayed (channel, offset, deliver_at, attempts) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (channel, offset) DO UPDATE SET deliver_at = excluded.deliver_at, "
    "attempts = excluded.attempts"
)


@dataclass(frozen=True, slots=True)
class DelayedEntry:
    channel: str
    offset: int
    deliver_at: int  # ns
    attempts: int


class DelayedStore:
    """All channels' deferred entries of one partition."""

    def __init__(self, path: str | os.PathLike[str], *, durable: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StorageError(f"delayed store {self.path}: {exc}") from exc

    def _run(self, sql: str, args: tuple[object, ...] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, args)
        except sqlite3.Error as exc:
            raise StorageError(f"delayed store {self.path}: {exc}") from exc

    def put(self, channel: str, offset: int, deliver_at: int, attempts: int) -> None:
        """Insert or replace the entry of (channel, offset)."""
        self._run(_UPSERT, (channel, offset, deliver_at, attempts))

    def put_many(self, entries: Iterable[DelayedEntry]) -> None:
        """Upsert several entries in one transaction."""
        rows = [(e.channel, e.offset, e.deliver_at, e.attempts) for e in entries]
        try:
            with self._transaction():
                self._db.executemany(_UPSERT, rows)
        except sqlite3.Error as exc:
            raise StorageError(f"delayed store {self.path}: {exc}") from exc

    def _transaction(self) -> _Tx:
        return _Tx(self._db)

    def due(self, channel: str, now_ns: int, limit: int) -> list[DelayedEntry]:
        """Entries with deliver_at <= now, earliest first (they stay in the store)."""
        rows = self._run(
            "SELECT offset, deliver_at, attempts FROM delayed WHERE channel = ? AND deliver_at <= ? "
            "ORDER BY deliver_at, offset LIMIT ?",
            (channel, now_ns, limit),
        ).fetchall()
        return [DelayedEntry(channel, o, d, a) for o, d, a in rows]

    def next_due(self, channel: str) -> int | None:
        row = self._run(
            "SELECT MIN(deliver_at) FROM delayed WHERE channel = ?", (channel,)
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def get(self, channel: str, offset: int) -> DelayedEntry | None:
        row = self._run(
            "SELECT deliver_at, attempts FROM delayed WHERE channel = ? AND offset = ?",
            (channel, offset),
        ).fetchone()
        return None if row is None else DelayedEntry(channel, offset, row[0], row[1])

    def remove(self, channel: str, offset: int) -> bool:
        cur = self._run("DELETE FROM delayed WHERE channel = ? AND offset = ?", (channel, offset))
        return cur.rowcount > 0

    def remove_many(self, channel: str, offsets: Iterable[int]) -> int:
        rows = [(channel, off) for off in offsets]
        try:
            with self._transaction():
                before = self._db.total_changes
                self._db.executemany("DELETE FROM delayed WHERE channel = ? AND offset = ?", rows)
                return self._db.total_changes - before
        except sqlite3.Error as exc:
            raise StorageError(f"delayed store {self.path}: {exc}") from exc

    def remove_from(self, channel: str, offset: int) -> int:
        """Remove the channel's entries at or above ``offset`` (a replay covers them again)."""
        cur = self._run("DELETE FROM delayed WHERE channel = ? AND offset >= ?", (channel, offset))
        return cur.rowcount

    def offsets(self, channel: str) -> list[int]:
        """Every offset ``channel`` has an entry for, in order."""
        rows = self._run(
            "SELECT offset FROM delayed WHERE channel = ? ORDER BY offset", (channel,)
        ).fetchall()
        return [int(r[0]) for r in rows]

    def count(self, channel: str) -> int:
        row = self._run("SELECT COUNT(*) FROM delayed WHERE channel = ?", (channel,)).fetchone()
        return int(row[0])

    def clear(self, channel: str) -> int:
        return self._run("DELETE FROM delayed WHERE channel = ?", (channel,)).rowcount

    def channels(self) -> list[str]:
        rows = self._run("SELECT DISTINCT channel FROM delayed ORDER BY channel").fetchall()
        return [r[0] for r in rows]

    def min_offset(self) -> int | None:
        """The smallest offset any channel still needs from the log (None when empty)."""
        row = self._run("SELECT MIN(offset) FROM delayed").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def synchronous(self) -> str:
        """SQLite's synchronous setting in force: "NORMAL" or "FULL"."""
        level = int(self._run("PRAGMA synchronous").fetchone()[0])
        return {1: "NORMAL", 2: "FULL"}.get(level, str(level))

    def close(self) -> None:
        self._db.close()


class _Tx:
    """BEGIN ... COMMIT (ROLLBACK on error) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._db.execute("ROLLBACK" if exc_type is not None else "COMMIT")
