"""What the broker writes besides the logs and cursors: the data path's lock, ``nsqd.dat``,
and what a failure left unsaved.

Owns ``Persistence``, which the ``Broker`` creates first and keeps as ``persistence``, given
the data path, the broker's topics by name (read only) and its health state
(``nsqpy.broker.health``, what /ping answers, where every failure here is reported). It
takes the data path's lock (``lock_data_path``: ``flock`` on ``nsqd.lock``, exclusive,
non-blocking) for as long as the broker is open, as NSQ locks its data path: two nsqd on
one data path would overwrite each other's logs and cursors; then checks the data path's
format version (``nsqpy.broker.dataformat``: newer refused, older upgraded). It writes
``nsqd.dat``
(``nsqpy.broker.metadata`` makes and reads the document), at once or at the next timer
tick after a creation (``metadata_write``: the server runs that write in a worker thread,
so that its two fsyncs do not stop the event loop; a save at once, after an operator's
action, still runs on the caller's thread), and loads it at start through a ``Restorer``
(the broker). Writes are serialized, and each document is numbered when it is
taken: one taken earlier never replaces a later one on disk. A
metadata save that failed, and the deferred rows of a deleted channel the delayed store
refused to clear, are written again by ``retry_metadata``/``retry_purges`` (the server's
ticker, through ``Broker.retry_saves``) until they succeed, each reported under its own key
until then. Must not import asyncio or any server, nor the broker.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from nsqpy.broker import dataformat, metadata
from nsqpy.broker.health import Health
from nsqpy.errors import StorageError

if TYPE_CHECKING:
    from nsqpy.broker.partition import Partition
    from nsqpy.broker.topic import Topic

log = logging.getLogger("nsqpy.broker")

METADATA_FILE = metadata.METADATA_FILE
LOCK_FILE = "nsqd.lock"
METADATA_FAILED = "failed to persist metadata"


class DataPathInUse(StorageError):
    """Another process (another nsqd) holds the data path's lock."""


def lock_data_path(path: Path) -> int:
    """Take the exclusive lock of the data path; returns the fd that holds it."""
    lock = path / LOCK_FILE
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataPathInUse(
            f"--data-path={path} in use (possibly by another instance of nsqd): {lock} is locked"
        ) from None
    except OSError:
        os.close(fd)
        raise
    return fd


class Persistence:
    """The data path's lock, ``nsqd.dat`` and the saves retried after a failure."""

    def __init__(self, data_path: Path, topics: Mapping[str, Topic], health: Health) -> None:
        self.data_path = data_path
        self.topics = topics
        self.health = health
        self._lock_fd: int | None = lock_data_path(data_path)
        try:
            dataformat.check(data_path)  # (a newer format: refused before anything is read)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._metadata_due = False  # topics or channels were created: retry writes it
        # Documents of nsqd.dat are numbered as they are taken (``_taken``); the file holds
        # number ``_written`` (a write failed or none ran yet while it is below ``_taken``:
        # retry writes it). One write at a time (``_write_lock``), a document never
        # replaced by an older one; ``_writing``: one runs in a worker thread
        self._taken = 0
        self._written = 0
        self._write_lock = threading.Lock()
        self._writing = False
        self._purging: set[Partition] = set()  # deleted channels' deferred rows left behind

    # -- metadata (nsqpy.broker.metadata) --------------------------------------------

    def document(self) -> dict[str, object]:
        return metadata.document(self.topics.values())

    def save_metadata(self) -> None:
        """Write ``nsqd.dat``; a failure is reported to the health state and the file is
        written again by ``retry_metadata`` until it succeeds."""
        try:
            self.write_metadata()
        except OSError as exc:
            self.health.failed(METADATA_FAILED, exc)

    def metadata_changed(self) -> None:
        """A topic or channel was created: ``nsqd.dat`` is written by the next timer tick
        (``retry_metadata``), once for all created meanwhile. Each one's own files (a topic's
        log and offset reservation, a channel's cursor) are already on disk, and the start
        finds them even if the metadata did not name them yet (``metadata.read``); writing
        the whole file at each creation made creating N topics take time in N squared."""
        self._metadata_due = True

    def write_metadata(self) -> None:
        """Write ``nsqd.dat`` now (OSError when it cannot be written)."""
        self._write(*self._take())
        self._report(None)

    @property
    def metadata_owed(self) -> bool:
        """Whether ``nsqd.dat`` does not hold the topics and channels as they are."""
        return self._metadata_due or self._written < self._taken

    def metadata_write(self) -> Callable[[], None] | None:
        """The write ``nsqd.dat`` is owed (a creation, a failed save), of the document as it
        is now, to be run off the event loop (it fsyncs twice), its outcome given to
        ``metadata_written`` after; None when none is owed or one already runs."""
        if self._writing or not self.metadata_owed:
            return None
        doc, number = self._take()
        self._writing = True
        return functools.partial(self._write, doc, number)

    def metadata_written(self, exc: BaseException | None) -> None:
        """How a write of ``metadata_write`` ended, or why it could not start (on the event
        loop): the next may be taken."""
        self._writing = False
        self._report(exc)

    def _report(self, exc: BaseException | None) -> None:
        """A failure turns the health NOK while the file is behind (the write is owed
        again); the file holding the latest document turns it OK."""
        if self._written < self._taken:
            if exc is not None:
                self.health.failed(METADATA_FAILED, exc)
        elif self.health.error:
            self.health.ok(METADATA_FAILED)

    def _take(self) -> tuple[dict[str, object], int]:
        """The document as it is now, and its number."""
        self._metadata_due = False
        self._taken += 1
        return self.document(), self._taken

    def _write(self, doc: dict[str, object], number: int) -> None:
        with self._write_lock:
            if self._lock_fd is None:  # (unlocked: the data path may be another's now)
                return
            if number <= self._written:  # (a later one is on disk already)
                return
            metadata.write(self.data_path, doc)
            self._written = number

    def load_metadata(self, restorer: metadata.Restorer) -> None:
        """Recreate what ``nsqd.dat`` (reconciled with the disk) names, through ``restorer``,
        then write it as it now is."""
        topics = metadata.read(self.data_path)
        if topics is None:
            return
        for entry in topics:
            metadata.load_topic(restorer, entry)
        self.save_metadata()
        for topic in self.topics.values():
            for part in topic.partitions:
                part.settle_lost_deferred()

    # -- retried saves ---------------------------------------------------------------

    def retry_metadata(self) -> None:
        """Timer: write ``nsqd.dat`` if a save failed or a creation is not in it yet."""
        if self.metadata_owed:
            self.save_metadata()

    def purge_later(self, topic: Topic) -> None:
        """A channel of ``topic`` was deleted: its partitions that could not clear its
        deferred rows clear them in ``retry_purges``."""
        self._purging.update(p for p in topic.partitions if p.purges)

    def retry_purges(self) -> None:
        """Timer: clear again the deferred rows of deleted channels a failure left behind."""
        for part in list(self._purging):
            part.retry_purges()
            if not part.purges:
                self._purging.discard(part)

    # -- the data path's lock --------------------------------------------------------

    def unlock(self) -> None:
        """Let go of the data path (closing the fd releases the flock)."""
        with self._write_lock:  # (a write running in a thread ends first; none after)
            fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)
