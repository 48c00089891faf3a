"""Offsets are never handed out twice: the log's durable reservation (``reserved``).

A killed process loses nothing the kernel holds, so in the same boot a log reopens at its
end; after a reboot (power loss), a log shorter than its reservation goes on past it; a
deleted log keeps its end for a log created again in its place."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from nsqpy.storage import PartitionLog
from nsqpy.storage.reservation import RESERVE_MIN, Reservation
from nsqpy.testing import FakeClock, simulate_reboot

from .helpers import cut, segments


def write(directory: Path, n: int, **kw: object) -> PartitionLog:
    log = PartitionLog(directory, **kw)  # type: ignore[arg-type]
    for i in range(n):
        log.append_bodies([b"m%d" % i])
        log.flush()
    return log


def offsets(log: PartitionLog) -> list[int]:
    return [f[0] for f in log.read_frames(log.low_watermark, 10**6, 1 << 40)]


def test_the_reservation_is_durable_before_anything_is_readable(tmp_path: Path) -> None:
    log = write(tmp_path, 1)
    text = (tmp_path / "reserved").read_text().split()
    assert text[:4] == ["handed", "0", "reserved", str(1 + RESERVE_MIN)]
    assert text[4] == "boot" and text[5]
    log.close()
    assert (tmp_path / "reserved").read_text().split()[:4] == ["handed", "1", "reserved", "1"]


def test_a_killed_process_reopens_at_its_end_in_the_same_boot(tmp_path: Path) -> None:
    write(tmp_path, 5)  # never closed: the process "died" with its reservation ahead
    with PartitionLog(tmp_path) as log:
        assert log.high_watermark == 5 and log.gaps() == [] and log.skipped == 0
        assert log.append_bodies([b"next"]) == 5


def test_after_a_power_loss_the_log_goes_on_past_what_may_have_been_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = write(tmp_path, 3)
    seg = segments(tmp_path)[0]
    synced_size = seg.stat().st_size
    for i in range(3, 10):  # read by consumers, never fsynced
        log.append_bodies([b"m%d" % i])
        log.flush()
    reserved = log.reserved
    # the power goes: the unsynced tail is gone, and the machine boots again
    cut(seg, synced_size)
    assert simulate_reboot(tmp_path) == 1
    with PartitionLog(tmp_path) as again:
        assert again.high_watermark == reserved and again.skipped == reserved - 3
        assert again.gaps() == [(3, reserved)]
        assert again.append_bodies([b"new"]) == reserved
        again.flush()
        assert offsets(again) == [0, 1, 2, reserved]
    assert f"new messages start at {reserved}" in caplog.text


@pytest.mark.parametrize("frames", [False, True])
def test_reading_again_at_the_gap_after_a_power_loss(tmp_path: Path, frames: bool) -> None:
    """(Found by the data-plane simulation.) A reader that read every record before the
    gap, then reads from the gap's first offset, gets nothing, and the next record once
    one is written past the gap: the read position it keeps must not mix the segment
    before the gap with the empty one after it (it read a batch header of the one at the
    position of the other: CorruptRecord)."""
    log = write(tmp_path, 30, segment_bytes=1024)
    seg = segments(tmp_path)[-1]
    synced_size = seg.stat().st_size
    for i in range(30, 34):
        log.append_bodies([b"m%d" % i])
        log.flush()
    cut(seg, synced_size)
    simulate_reboot(tmp_path)
    with PartitionLog(tmp_path, segment_bytes=1024) as again:
        ((gap_start, gap_end),) = again.gaps()

        def read(offset: int) -> list[int]:
            if frames:
                return [f[0] for f in again.read_frames(offset, 1000, 1 << 20)]
            return [r.offset for r in again.read(offset, 1000)]

        offset, seen = again.low_watermark, []
        while got := read(offset):
            seen += got
            offset = got[-1] + 1
        assert seen == list(range(gap_start)) and offset == gap_start
        assert read(gap_start) == []
        again.append_bodies([b"after"])
        again.flush()
        assert read(gap_start) == [gap_end]


def test_a_clean_stop_leaves_no_gap_after_a_reboot(tmp_path: Path) -> None:
    write(tmp_path, 4).close()
    simulate_reboot(tmp_path)
    with PartitionLog(tmp_path) as log:
        assert log.high_watermark == 4 and log.gaps() == []


def test_a_log_destroyed_and_made_again_goes_on_after_its_old_end(tmp_path: Path) -> None:
    log = write(tmp_path, 7)
    log.destroy()
    assert [p.name for p in tmp_path.iterdir()] == ["reserved"]
    with PartitionLog(tmp_path) as again:
        assert again.low_watermark == 7 and again.high_watermark == 7
        assert again.append_bodies([b"reborn"]) == 7


def test_truncating_a_divergent_tail_lowers_the_reservation(tmp_path: Path) -> None:
    log = write(tmp_path, 6)
    log.truncate(4)  # a replica's tail that readers never saw
    log.append_bodies([b"leader's 4"])
    log.flush()
    log.truncate(4)
    simulate_reboot(tmp_path)
    with PartitionLog(tmp_path) as again:
        assert again.high_watermark == 4 and again.gaps() == []


def test_one_reservation_write_per_block_and_the_block_grows_under_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    log = PartitionLog(tmp_path, clock=clock)
    writes: list[int] = []
    real = Reservation.write

    def spy(self: Reservation, reserved: int) -> None:
        writes.append(reserved)
        real(self, reserved)

    monkeypatch.setattr(Reservation, "write", spy)
    for _ in range(3 * RESERVE_MIN // 1000 + 1):
        log.append_bodies([b"x"] * 1000)
        log.flush()
    # 64Ki past the first flush's end; then (the first block lasted under a second, by
    # the fake clock that never moved) a block twice as large, past the flush that needed it
    assert writes == [1000 + RESERVE_MIN, 67000 + 2 * RESERVE_MIN]
    log.close()


def test_a_damaged_reservation_file_is_logged_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, 2).close()
    (tmp_path / "reserved").write_bytes(b"\xff\x00garbage")
    with PartitionLog(tmp_path) as log:
        assert log.high_watermark == 2
    assert "reserved is damaged" in caplog.text or "cannot read reserved" in caplog.text


def test_a_reservation_that_cannot_be_written_fails_the_flush_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog(tmp_path)
    real_fsync = os.fsync

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    log.append_bodies([b"lost"])
    with pytest.raises(OSError):
        log.flush()
    assert log.high_watermark == 0 and log.flushed_offset == 0
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert log.append_bodies([b"kept"]) == 0
    log.flush()
    assert [f[4] for f in log.read_frames(0, 10)] == [b"kept"]
    log.close()


def test_a_new_log_fsyncs_nothing_until_its_first_flush_makes_the_reservation_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creating a log (on an event loop, often: a PUB to a new topic, a partition taken
    up) waits for no fsync: nothing is handed out yet. The first flush makes the
    reservation durable (the file, then its directory) before any record is written."""
    real_fsync = os.fsync
    synced: list[tuple[str, int]] = []  # (what was fsynced, the segment's size then)
    directory = tmp_path / "p0"

    def spy(fd: int) -> None:
        seg = segments(directory)
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), seg[0].stat().st_size if seg else -1))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    log = PartitionLog(directory)
    assert synced == []
    assert (directory / "reserved").read_text().split()[:4] == ["handed", "0", "reserved", "0"]
    log.append_bodies([b"first"])
    log.flush()
    assert synced[:2] == [
        (str(directory / "reserved.tmp"), 0),
        (str(directory), 0),
    ]
    assert log.reserved == 1 + RESERVE_MIN
    log.close()


def test_a_log_made_again_where_a_deleted_one_ended_fsyncs_its_reservation_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reservation a deleted log left (its end) is the only record of what it handed
    out: the log made again in its place replaces it durably, before anything else."""
    write(tmp_path, 5).destroy()
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    with PartitionLog(tmp_path) as again:
        assert synced[:2] == [str(tmp_path / "reserved.tmp"), str(tmp_path)]
        assert again.high_watermark == 5 and again.append_bodies([b"next"]) == 5
