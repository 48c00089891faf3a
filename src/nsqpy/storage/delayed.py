"""The delayed store: deferred and requeued messages of a partition's channels, on disk.

Owns ``DelayedStore``, one SQLite file (stdlib ``sqlite3``, WAL mode) per topic partition holding, for every channel, entries keyed by (channel, offset) and
ordered by (channel, deliver-at, offset), with their attempt counts. The body stays in
the log; an entry only says when to deliver which offset again. Each write commits at once:
with synchronous=NORMAL a commit survives a crash of the process; with ``durable`` (FULL,
for ``--sync-always``) it is fsynced before the call returns, so it also survives a power
loss before the channel's cursor, which confirms the entry's offset, is saved. The file is
opened on first use (a partition that never deferred anything has none) and its connection
counts three descriptors in the storage layer's budget of open files, which closes the least
recently used stores when it needs room (they reopen on their next use). A file found
damaged at its first open is moved aside (logged, ``damaged`` says why: its entries are
lost) and a new one made. Imports only the standard library and ``nsqpy.errors``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nsqpy.errors import StorageError
from nsqpy.storage.budget import OPEN_FILES
from nsqpy.storage.files import write_atomic

_log = logging.getLogger("nsqpy.storage")
FILES_PER_STORE = 3  # the database, its WAL and its shared-memory index
_DAMAGE_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB: the file itself is damaged


class _Damaged(sqlite3.DatabaseError):
    """The file opened but failed its integrity check."""


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    """Whether the error says the file is damaged (not full, locked or out of reach)."""
    return isinstance(exc, _Damaged) or getattr(exc, "sqlite_errorcode", None) in _DAMAGE_CODES


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

_INSERT_NEW = (
    "INSERT OR IGNORE INTO delayed (channel, offset, deliver_at, attempts) VALUES (?, ?, ?, ?)"
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
        self._lost = self.path.with_name(self.path.name + ".lost")
        # Why a damaged file was moved aside ("" if none was): its entries are lost, so the
        # channels must read the log again; the ``.lost`` marker says so until ``settled``.
        self.damaged = self._lost.read_text() if self._lost.exists() else ""
        self.losses = 0  # damaged files moved aside while open: every entry went at once
        self._durable = durable
        self._conn: sqlite3.Connection | None = None
        self._checked = False  # the file was checked (quick_check) at its first open
        self._closed = False
        if self.path.exists():  # a damaged file is found (and moved aside) at once
            try:
                self._connect()
            except StorageError as exc:  # (a full disk, say): tried again when used
                _log.error("%s", exc)

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection, opened on first use (and again after the budget of open files
        closed it); each use makes it the most recently used."""
        db = self._conn
        if db is None:
            db = self._connect()
        OPEN_FILES.touch(self, self._evict, FILES_PER_STORE)
        return db

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise StorageError(f"delayed store {self.path} is closed")
        try:
            db = self._open()
        except sqlite3.DatabaseError as exc:
            if self._checked or not _is_damage(exc):  # a full disk, no descriptors, ...
                raise StorageError(f"delayed store {self.path}: {exc}") from exc
            self._move_aside(str(exc))
            try:
                db = self._open()
            except sqlite3.Error as again:
                raise StorageError(f"delayed store {self.path}: {again}") from again
        except sqlite3.Error as exc:
            raise StorageError(f"delayed store {self.path}: {exc}") from exc
        self._conn = db
        OPEN_FILES.touch(self, self._evict, FILES_PER_STORE)
        return db

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={'FULL' if self._durable else 'NORMAL'}")
            db.executescript(_SCHEMA)
            if not self._checked:
                check = db.execute("PRAGMA quick_check").fetchone()
                if check is None or check[0] != "ok":
                    raise _Damaged(f"quick_check: {check}")
                self._checked = True
        except sqlite3.Error:
            db.close()
            raise
        return db

    def _evict(self) -> bool:
        """Close the connection to free its descriptors (not inside a transaction)."""
        db = self._conn
        if db is None:
            return True
        if db.in_transaction:
            return False
        self._conn = None
        OPEN_FILES.release(self)
        db.close()
        return True

    def _absent(self) -> bool:
        """No file yet (nothing was ever deferred here): reads need not create one."""
        return self._conn is None and not self.path.exists()

    def _move_aside(self, why: str) -> None:
        """Rename the damaged file (and its WAL and shared-memory files) aside, logged. The
        ``.lost`` marker is made durable first: until ``settled``, a restart still knows
        that the channels must read the log again."""
        write_atomic(self._lost, why.encode())
        self.damaged = why
        self.losses += 1
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.time_ns()}")
        for suffix in ("", "-wal", "-shm"):
            src = self.path.with_name(self.path.name + suffix)
            if src.exists():
                os.replace(src, aside.with_name(aside.name + suffix))
        _log.error(
            "delayed store %s is damaged (%s); moved aside to %s: its deferred entries are "
            "lost, so the channels of this partition are read again from the log's start",
            self.path, why, aside.name,
        )  # fmt: skip

    def settled(self) -> None:
        """The channels have read the log again from its start (their cursors are saved):
        the loss is made good, the marker goes."""
        if self.damaged:
            self._lost.unlink(missing_ok=True)
            self.damaged = ""

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

    def add_new(self, channel: str, entries: Iterable[tuple[int, int]]) -> int:
        """Insert the (offset, deliver_at) entries of ``channel`` it has not got yet, with no
        attempts, in one transaction; returns how many went in. StorageError: none did."""
        rows = [(channel, offset, deliver_at, 0) for offset, deliver_at in entries]
        db = self._db
        try:
            db.execute("BEGIN")
            before = db.total_changes
            db.executemany(_INSERT_NEW, rows)
            added = db.total_changes - before
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:  # a COMMIT that failed (a full disk) leaves it open
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise StorageError(f"delayed store {self.path}: {exc}") from exc
        return added

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
        if self._absent():
            return None
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
        if self._absent():
            return []
        rows = self._run(
            "SELECT offset FROM delayed WHERE channel = ? ORDER BY offset", (channel,)
        ).fetchall()
        return [int(r[0]) for r in rows]

    def entries(self, channel: str, limit: int) -> list[DelayedEntry]:
        """The channel's first ``limit`` entries by offset."""
        if self._absent():
            return []
        rows = self._run(
            "SELECT offset, deliver_at, attempts FROM delayed WHERE channel = ? "
            "ORDER BY offset LIMIT ?",
            (channel, limit),
        ).fetchall()
        return [DelayedEntry(channel, o, d, a) for o, d, a in rows]

    def replace(self, channel: str, entries: Iterable[tuple[int, int, int]]) -> None:
        """Make the channel's entries exactly ``entries`` (offset, deliver_at, attempts), in
        one transaction (a follower takes its leader's). StorageError: unchanged."""
        rows = [(channel, offset, deliver_at, attempts) for offset, deliver_at, attempts in entries]
        try:
            with self._transaction():
                self._db.execute("DELETE FROM delayed WHERE channel = ?", (channel,))
                self._db.executemany(_UPSERT, rows)
        except sqlite3.Error as exc:
            raise StorageError(f"delayed store {self.path}: {exc}") from exc

    def count(self, channel: str) -> int:
        if self._absent():
            return 0
        row = self._run("SELECT COUNT(*) FROM delayed WHERE channel = ?", (channel,)).fetchone()
        return int(row[0])

    def clear(self, channel: str) -> int:
        return self._run("DELETE FROM delayed WHERE channel = ?", (channel,)).rowcount

    def channels(self) -> list[str]:
        rows = self._run("SELECT DISTINCT channel FROM delayed ORDER BY channel").fetchall()
        return [r[0] for r in rows]

    def min_offset(self) -> int | None:
        """The smallest offset any channel still needs from the log (None when empty)."""
        if self._absent():
            return None
        row = self._run("SELECT MIN(offset) FROM delayed").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def synchronous(self) -> str:
        """SQLite's synchronous setting in force: "NORMAL" or "FULL"."""
        level = int(self._run("PRAGMA synchronous").fetchone()[0])
        return {1: "NORMAL", 2: "FULL"}.get(level, str(level))

    def close(self) -> None:
        self._evict()
        self._closed = True


class _Tx:
    """BEGIN ... COMMIT (ROLLBACK on error) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._db.execute("ROLLBACK" if exc_type is not None else "COMMIT")
