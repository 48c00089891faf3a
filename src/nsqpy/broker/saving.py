"""What the broker writes besides the logs and cursors: the data path's lock, ``nsqd.dat``
and ``features.json`` again after a failure, and the health those failures set.

Owns ``Saving``, the part of ``Broker`` that keeps the metadata (``nsqpy.broker.metadata``
writes and reads the file) and the health state (``nsqpy.broker.health``, what /ping
answers), and ``lock_data_path``: the data path is locked (``flock`` on ``nsqd.lock``,
exclusive, non-blocking) for as long as the broker is open, as NSQ locks its data path: two
nsqd on one data path would overwrite each other's logs and cursors. A metadata or
``features.json`` save that failed, and the deferred rows of a deleted channel the delayed
store refused to clear, are written again by ``retry_saves`` (the server's ticker) until
they succeed, each reported under its own key until then. ``Broker`` inherits it and
provides the attributes declared below. Must not import asyncio or any server.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, cast

from nsqpy.broker import metadata
from nsqpy.broker.health import Health, StorageFailed
from nsqpy.errors import StorageError

if TYPE_CHECKING:
    from nsqpy.broker.broker import Broker
    from nsqpy.broker.features import Features
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


class Saving:
    """Mixed into ``Broker``: metadata, retried saves, health, the data path's lock."""

    data_path: Path
    topics: dict[str, Topic]
    health_state: Health
    features: Features
    _loading: bool
    _lock_fd: int | None

    def _init_saving(self) -> None:
        self._metadata_unsaved = False  # nsqd.dat failed to be written: retry_saves writes it
        self._metadata_due = False  # topics or channels were created: retry_saves writes it
        self._purging: set[Partition] = set()  # deleted channels' deferred rows left behind

    # -- health ----------------------------------------------------------------------

    @property
    def health_error(self) -> str:
        """The latest storage failure still unresolved ("" while healthy)."""
        return self.health_state.error

    @property
    def healthy(self) -> bool:
        return not self.health_state.error

    @property
    def health(self) -> str:
        return "OK" if self.healthy else f"NOK - {self.health_error}"

    def storage_failed(self, what: str, exc: BaseException) -> StorageFailed:
        """Report a failure that nothing retries (a topic or channel not created, so nothing
        was acknowledged) to the health state; returns the error for the caller."""
        self.health_state.failed_once(what, exc)
        return StorageFailed(str(exc))

    # -- metadata (nsqpy.broker.metadata) --------------------------------------------

    def metadata(self) -> dict[str, object]:
        return metadata.document(self.topics.values())

    def save_metadata(self) -> None:
        """Write ``nsqd.dat``; a failure is reported to the health state and the file is
        written again by ``retry_saves`` until it succeeds."""
        if self._loading:
            return
        try:
            self.write_metadata()
        except OSError as exc:
            self._metadata_unsaved = True
            self.health_state.failed(METADATA_FAILED, exc)

    def metadata_changed(self) -> None:
        """A topic or channel was created: ``nsqd.dat`` is written by the next timer tick
        (``retry_saves``), once for all created meanwhile. Each one's own files (a topic's
        log and offset reservation, a channel's cursor) are already on disk, and the start
        finds them even if the metadata did not name them yet (``metadata.read``); writing
        the whole file at each creation made creating N topics take time in N squared."""
        self._metadata_due = True

    def write_metadata(self) -> None:
        """Write ``nsqd.dat`` now (OSError when it cannot be written)."""
        self._metadata_due = False
        metadata.write(self.data_path, self.metadata())
        self._metadata_unsaved = False
        if self.health_state.error:
            self.health_state.ok(METADATA_FAILED)

    def load_metadata(self) -> None:
        topics = metadata.read(self.data_path)
        if topics is None:
            return
        self._loading = True
        try:
            for entry in topics:
                metadata.load_topic(cast("Broker", self), entry)
        finally:
            self._loading = False
        self.save_metadata()
        for topic in self.topics.values():
            for part in topic.partitions:
                part.settle_lost_deferred()

    # -- retried saves ---------------------------------------------------------------

    def purge_later(self, topic: Topic) -> None:
        """A channel of ``topic`` was deleted: its partitions that could not clear its
        deferred rows clear them in ``retry_saves``."""
        self._purging.update(p for p in topic.partitions if p.purges)

    def retry_saves(self) -> None:
        """Timer: write again what a storage failure left unsaved (the metadata,
        ``features.json``, deleted channels' deferred rows)."""
        if self._metadata_unsaved or self._metadata_due:
            self.save_metadata()
        self.features.retry_saves()
        for part in list(self._purging):
            part.retry_purges()
            if not part.purges:
                self._purging.discard(part)

    # -- the data path's lock --------------------------------------------------------

    def unlock(self) -> None:
        """Let go of the data path (closing the fd releases the flock)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)
