"""fsync bookkeeping: a concurrent sync() never calls unsynced bytes durable."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nsqpy.storage import PartitionLog
from nsqpy.storage import log as log_module
from nsqpy.storage.segment import Segment


class HookedSegment(Segment):
    """A segment that runs ``hook`` each time its ``end`` is assigned: the moment a sync
    thread could run between two statements of the loop thread's write."""

    hook: Callable[[], None] | None = None

    @property
    def end(self) -> int:
        return int(self.__dict__.get("_end", 0))

    @end.setter
    def end(self, value: int) -> None:
        self.__dict__["_end"] = value
        hook = self.__dict__.get("hook")
        if hook is not None:
            hook()


def test_sync_between_the_write_and_its_bookkeeping_fsyncs_what_it_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []

    def spy(fd: int) -> None:
        synced.append(fd)

    monkeypatch.setattr(log_module, "fsync_segment", spy)
    log = PartitionLog(tmp_path)
    try:
        old = log._segments[-1]
        fields: dict[str, Any] = {k: getattr(old, k) for k in Segment.__slots__}
        hooked = HookedSegment(**fields)
        log._segments[-1] = hooked
        seen: list[tuple[int, int]] = []

        def concurrent_sync() -> None:
            before = len(synced)
            seen.append((log.sync(), len(synced) - before))

        hooked.__dict__["hook"] = concurrent_sync
        log.append_bodies([b"acknowledged only after its fsync"] * 3)
        log.flush()
        hooked.__dict__["hook"] = None
        ((durable, fsyncs),) = seen
        # Whatever the concurrent sync calls durable, it has fsynced.
        assert durable == 0 or fsyncs == 1, (durable, fsyncs)
    finally:
        log.close()


def test_open_fsyncs_what_a_killed_process_left_unsynced_before_calling_it_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed before its fsync leaves its last records in the page cache only; the
    next open counts the files' contents as durable, so it fsyncs them first (every segment
    holding records, the epochs file and the directory)."""
    writer = PartitionLog(tmp_path / "killed", segment_bytes=4096)
    try:
        for _ in range(6):  # over several segments
            writer.append_bodies([b"x" * 200] * 10)
            writer.flush()
        assert writer.durable_offset == 0  # flushed to the page cache, never fsynced
        # the directory as the kill left it: copied, so the new files' data is unsynced too
        shutil.copytree(tmp_path / "killed", tmp_path / "restarted")
    finally:
        writer.close()
    synced: list[int] = []
    real = log_module.fsync_segment

    def spy(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(log_module, "fsync_segment", spy)
    opened = PartitionLog(tmp_path / "restarted", segment_bytes=4096)
    try:
        with_records = [s for s in opened._segments if s.size > 0]
        assert len(with_records) > 1
        assert len(synced) == len(with_records)  # before open returned
        assert opened.durable_offset == opened.high_watermark == 60
        assert not any(s.unsynced for s in opened._segments)
    finally:
        opened.close()
    # closed cleanly (fsynced, then settled): the next open has nothing to fsync
    synced.clear()
    PartitionLog(tmp_path / "restarted", segment_bytes=4096).close()
    assert synced == []


def test_a_truncated_log_is_fsynced_before_it_is_left_settled(tmp_path: Path) -> None:
    """A truncation leaves the reservation as a clean close does (what was cut was never
    read), which the next open takes as "nothing to fsync": so the truncation fsyncs what
    stays first."""
    log = PartitionLog(tmp_path, segment_bytes=4096)
    try:
        for _ in range(4):
            log.append_bodies([b"y" * 200] * 10)
            log.flush()
        assert log.durable_offset == 0
        log.truncate(25)
        assert log.durable_offset == log.high_watermark == 25
        assert not any(s.unsynced for s in log._segments)
    finally:
        log.close()
