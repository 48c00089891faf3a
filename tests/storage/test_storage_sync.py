"""fsync bookkeeping: a concurrent sync() never calls unsynced bytes durable."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nsqpy.storage import PartitionLog
from nsqpy.storage import files as files_module
from nsqpy.storage import log as log_module
from nsqpy.storage import reservation as reservation_module
from nsqpy.storage.reservation import RESERVED_FILE
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


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The descriptors of every segment fsync from here on (each fsync really done)."""
    synced: list[int] = []
    real = log_module.fsync_segment

    def spy(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(log_module, "fsync_segment", spy)
    return synced


def killed(tmp_path: Path, batches: int = 6, size: int = 200, **kw: Any) -> Path:
    """A log directory as a process killed before its fsync left it: written and flushed,
    never fsynced, then copied (so the copy's data is in the page cache only too)."""
    writer = PartitionLog(tmp_path / "killed", segment_bytes=4096)
    try:
        for _ in range(batches):  # (a segment ends after a batch past its size)
            writer.append_bodies([b"x" * size] * 10)
            writer.flush()
        if "advance_to" in kw:
            writer.advance_to(kw["advance_to"])
        assert writer.durable_offset == 0  # flushed to the page cache, never fsynced
        shutil.copytree(tmp_path / "killed", tmp_path / "restarted")
    finally:
        writer.close()
    return tmp_path / "restarted"


def test_open_fsyncs_what_a_killed_process_left_unsynced_before_calling_it_durable(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    """A process killed before its fsync leaves its last records in the page cache only; the
    next open counts the files' contents as durable, so it fsyncs them first (every segment
    holding records, the epochs file and the directory)."""
    path = killed(tmp_path)
    fsyncs.clear()  # (the writer's own close fsynced the original)
    opened = PartitionLog(path, segment_bytes=4096)
    try:
        with_records = [s for s in opened._segments if s.size > 0]
        assert len(with_records) > 1
        assert len(fsyncs) == len(with_records)  # before open returned
        assert opened.durable_offset == opened.high_watermark == 60
        assert not any(s.unsynced for s in opened._segments)
    finally:
        opened.close()
    # closed cleanly (fsynced, then settled): the next open has nothing to fsync
    fsyncs.clear()
    PartitionLog(path, segment_bytes=4096).close()
    assert fsyncs == []


def test_open_fsyncs_after_a_kill_where_the_boot_is_not_known(
    tmp_path: Path, fsyncs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a boot id the open jumps to the reservation (a reboot cannot be ruled out),
    which rewrites the file before the open is done: the fsync is decided before that."""
    monkeypatch.setattr(reservation_module, "boot_id", lambda: "")
    path = killed(tmp_path)
    fsyncs.clear()  # (the writer's own close fsynced the original)
    opened = PartitionLog(path, segment_bytes=4096)
    try:
        assert opened.skipped > 0  # jumped
        assert len(fsyncs) == sum(1 for s in opened._segments if s.size > 0) > 1
        assert not any(s.unsynced for s in opened._segments)
    finally:
        opened.close()


def test_a_jump_over_unsynced_records_leaves_the_log_unsettled(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    """A follower's jump to its leader's offset past the reservation: the records below it
    are still owed their fsync, so the reservation stays above what was handed out and an
    open after a kill fsyncs them."""
    path = killed(tmp_path, advance_to=1 << 20)
    fsyncs.clear()  # (the writer's own close fsynced the original)
    opened = PartitionLog(path, segment_bytes=4096)
    try:
        assert len(fsyncs) == sum(1 for s in opened._segments if s.size > 0) > 1
        assert opened.durable_offset == opened.high_watermark == 1 << 20
    finally:
        opened.close()


def test_an_open_after_a_kill_in_another_boot_has_nothing_to_fsync(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    """After a reboot the page cache is gone: what the files hold is all there is."""
    path = killed(tmp_path)
    fsyncs.clear()  # (the writer's own close fsynced the original)
    line = (path / RESERVED_FILE).read_text().split()
    line[5] = "an-earlier-boot"
    (path / RESERVED_FILE).write_text(" ".join(line) + "\n")
    PartitionLog(path, segment_bytes=4096).close()
    assert fsyncs == []


def test_the_open_fsyncs_a_killed_log_of_many_segments_under_a_small_descriptor_limit(
    tmp_path: Path,
) -> None:
    """One descriptor at a time: 300 segments open under a limit of 128 open files."""
    path = killed(tmp_path, batches=300, size=400)
    assert len(list(path.glob("*.log"))) >= 300
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))\n"
        "from nsqpy.storage import PartitionLog, log as log_module\n"
        "fsyncs = []\n"
        "real = log_module.fsync_segment\n"
        "log_module.fsync_segment = lambda fd: (fsyncs.append(fd), real(fd))\n"
        "log = PartitionLog(sys.argv[1], segment_bytes=4096)\n"
        "print(log.durable_offset, log.high_watermark, len(fsyncs))\n"
        "log.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    durable, end, synced = map(int, done.stdout.split())
    assert durable == end == 3000 and synced >= 300


def destroyed(log: PartitionLog, directory: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Delete ``log``; the reservation file as it was when the first file went."""
    seen: list[str] = []
    real_unlink = Path.unlink

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if not seen:
            seen.append((directory / RESERVED_FILE).read_text())
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    log.destroy()
    return seen[0]


def test_a_deleted_log_is_left_settled_only_once_its_files_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill while a topic is deleted can leave its files (the topic still listed): until
    they are gone the reservation must not say that they were fsynced."""
    log = PartitionLog(tmp_path, segment_bytes=4096)
    log.append_bodies([b"z" * 200] * 10)
    log.flush()
    fields = destroyed(log, tmp_path, monkeypatch).split()
    assert int(fields[3]) > int(fields[1]) == 10  # R above H while files remain
    fields = (tmp_path / RESERVED_FILE).read_text().split()
    assert fields[1] == fields[3] == "10"  # settled at the end once they are gone


def test_a_deleted_log_flushed_exactly_to_its_reservation_is_not_settled_early(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flushed up to R exactly: the in-memory R equals the end, the records are unsynced."""
    log = PartitionLog(tmp_path)
    log.append_bodies([b"a"])
    log.flush()
    log.append_bodies([b"b"] * (log.reserved - 1))
    log.flush()
    assert log.reserved == log.high_watermark and log.durable_offset == 0
    fields = destroyed(log, tmp_path, monkeypatch).split()
    assert int(fields[3]) > int(fields[1])  # R above H while files remain


def test_a_delete_on_a_full_disk_records_the_logs_end_once_its_files_freed_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log opened after a kill: the file's H is below the end. The reservation cannot be
    written while the disk is full; deleting the files frees room, and the end is recorded
    then, so a topic made again does not give those offsets again."""
    path = killed(tmp_path, batches=2)
    log = PartitionLog(path, segment_bytes=4096)
    assert log.high_watermark == 20
    real = files_module.write_atomic

    def full_while_segments_remain(target: Path, data: bytes, **kw: Any) -> None:
        if list(path.glob("*.log")):
            raise OSError(28, "No space left on device")
        real(target, data, **kw)

    monkeypatch.setattr(reservation_module, "write_atomic", full_while_segments_remain)
    log.destroy()
    monkeypatch.undo()
    assert not list(path.glob("*.log"))
    again = PartitionLog(path, segment_bytes=4096)
    try:
        assert again.high_watermark == 20  # goes on from the deleted log's end
    finally:
        again.close()


def test_an_open_whose_fsync_fails_leaves_the_log_unsettled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The open fails (as recovery's writes do), and nothing it wrote before says settled:
    the next open fsyncs again. Where the boot is not known the open also jumps, which
    writes the reservation; the fsync comes first."""
    monkeypatch.setattr(reservation_module, "boot_id", lambda: "")
    path = killed(tmp_path)
    before = (path / RESERVED_FILE).read_text()

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(log_module, "fsync_segment", failing)
    with pytest.raises(OSError):
        PartitionLog(path, segment_bytes=4096)
    assert (path / RESERVED_FILE).read_text() == before
    synced: list[int] = []
    monkeypatch.setattr(log_module, "fsync_segment", synced.append)
    PartitionLog(path, segment_bytes=4096).close()
    assert len(synced) > 1


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
