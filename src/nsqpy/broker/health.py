"""The daemon's health, as NSQ's ``SetHealth``: NOK while a storage failure is unresolved.

Owns ``Health``. Every path that writes to disk reports into it: the topic log's flush
(a segment roll included) and fsync, topic and channel creation, the cursor saves, the
metadata file, the delayed store and ``features.json``. Failures are kept by what failed
(``key``, the failure's text unless given): ``failed`` is for a write that is retried
until it works (the metadata, a cursor, an fsync, a deferral) and stays until that path
reports ``ok(key)``, whatever else succeeds meanwhile; ``failed_once`` is for a write that
left nothing to retry (its client was told, or nothing was stored), cleared by the next
write that works, whichever it is, as nsqd's next good write clears its health.
``forget(key)`` drops the failure of something deleted. The health is NOK (what /ping
answers with a 500, and /stats and /metrics show) while any failure is kept, with the text
of the most recent one. A key is logged when it is added and when it is cleared: a path
that keeps failing (a full disk retried every loop turn), or two that fail in turn, do not
fill the log. Thread-safe (the trace writer reports from its own thread).
``StorageFailed`` is the error a caller gets for a failure already reported here. Must not
import asyncio or any server.
"""

from __future__ import annotations

import logging
import os
import threading

from nsqpy.errors import StorageError

log = logging.getLogger("nsqpy.broker")


class StorageFailed(StorageError):
    """A storage failure already reported to the health state; its text is the failure's
    own (``[Errno 28] No space left on device``), what a client is told after its verb."""


def cursor_key(path: str | os.PathLike[str]) -> str:
    """The key (and text) of a failed save of the cursor file at ``path``."""
    return f"failed to save cursor {os.fspath(path)}"


def fsync_key(topic: str, partition: int) -> str:
    """The key (and text) of a failed fsync of a partition's log."""
    where = f"topic {topic}" if partition == 0 else f"topic {topic} partition {partition}"
    return f"fsync of {where} failed"


class Health:
    """OK, or the failures still unresolved (``error``: the text of the most recent)."""

    __slots__ = ("_failing", "_lock", "_once", "error")

    def __init__(self) -> None:
        self.error = ""
        self._failing: dict[str, str] = {}  # key -> text, the most recent failure last
        self._once: set[str] = set()  # keys that nothing retries: the next good write clears
        self._lock = threading.Lock()

    def failed(self, what: str, exc: BaseException | str, *, key: str = "") -> str:
        """``what`` failed with ``exc`` and is retried: NOK until ``ok(key or what)``."""
        return self._add(key or what, f"{what}: {exc}", once=False)

    def failed_once(self, what: str, exc: BaseException | str) -> str:
        """``what`` failed with ``exc`` and nothing retries it: NOK until a write works."""
        return self._add(what, f"{what}: {exc}", once=True)

    def _add(self, key: str, message: str, *, once: bool) -> str:
        with self._lock:
            failing = self._failing
            new = failing.pop(key, None) is None
            failing[key] = message
            if once:
                self._once.add(key)
            else:
                self._once.discard(key)
            self.error = message
        if new:
            log.error("%s", message)
        return message

    def ok(self, key: str = "") -> None:
        """A write worked: the failure kept under ``key`` (if any) is resolved, and so is
        every failure that nothing retries."""
        if not self.error:
            return
        with self._lock:
            cleared = [k for k in (key, *self._once) if k in self._failing]
            self._once.clear()
            self._clear(cleared)

    def forget(self, key: str) -> None:
        """What ``key`` was about is gone (a deleted channel's cursor): no longer failing."""
        if key in self._failing:
            with self._lock:
                self._once.discard(key)
                self._clear([key])

    def failing(self) -> list[str]:
        """The texts of the failures still unresolved, the most recent last."""
        with self._lock:
            return list(self._failing.values())

    def _clear(self, keys: list[str]) -> None:
        failing = self._failing
        gone = [k for k in dict.fromkeys(keys) if failing.pop(k, None) is not None]
        self.error = next(reversed(failing.values()), "")
        for k in gone:
            done = not failing and k == gone[-1]
            log.info("resolved: %s%s", k, "; health is OK again" if done else "")
