"""A follower's log: the leader's batches taken as they are (append_raw), the epoch history
questions of the catch-up protocol (end_offset_for_epoch, match_leader), divergent tails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nsqpy.errors import CorruptRecord
from nsqpy.storage import (
    Entry,
    OffsetMismatch,
    PartitionLog,
    RawBatch,
    StaleEpoch,
    SyncPolicy,
)
from nsqpy.storage import reservation as reservation_module
from nsqpy.storage.encode import encode_bodies
from nsqpy.storage.records import BATCH_SIZE
from nsqpy.testing import simulate_reboot

from .helpers import segments

SEGMENT = 1000  # small segments: rolls happen on both sides


def body(i: int) -> bytes:
    return (b"%06d;" % i) * (1 + i % 5)


def lead(log: PartitionLog, epoch: int, sizes: list[int], *, flush_every: int = 1) -> None:
    """As a leader in ``epoch``: one batch per size (every third with extensions)."""
    log.begin_epoch(epoch)
    for k, n in enumerate(sizes):
        base = log.high_watermark
        if k % 3 == 2:
            log.append([Entry(body(base + i), trace_id=base + i, headers=b"{}") for i in range(n)])
        else:
            log.append_bodies([body(base + i) for i in range(n)])
        if (k + 1) % flush_every == 0:
            log.flush()
    log.flush()


def replicate(leader: PartitionLog, follower: PartitionLog, max_bytes: int = 1 << 20) -> int:
    """Pull everything the leader has flushed, a read_raw chunk at a time; returns calls."""
    calls = 0
    while (raw := leader.read_raw(follower.high_watermark, max_bytes)).count:
        if raw.offset > follower.high_watermark:  # the leader's log skips offsets here
            follower.advance_to(raw.offset)
        assert follower.append_raw(raw.data, raw.offset) == raw.next_offset
        follower.flush()
        calls += 1
    return calls


def catch_up(follower: PartitionLog, leader: PartitionLog) -> int:
    """The catch-up protocol (nsqpy.storage.epochs): truncate by epochs, then pull.
    Returns the rounds of questions it took."""
    rounds = 0
    while True:
        rounds += 1
        asked = follower.last_epoch
        if follower.match_leader(asked, leader.end_offset_for_epoch(asked)):
            break
        assert rounds < 10
    replicate(leader, follower)
    return rounds


def assert_same(leader: PartitionLog, follower: PartitionLog) -> None:
    assert follower.high_watermark == leader.high_watermark
    assert follower.epochs() == leader.epochs()
    assert follower.last_epoch == leader.last_epoch
    low = leader.low_watermark
    assert follower.read(low, 10**6, 1 << 40) == leader.read(low, 10**6, 1 << 40)


def state(log: PartitionLog) -> tuple[object, ...]:
    files = tuple((p.name, p.stat().st_size) for p in segments(log.directory))
    return (log.high_watermark, log.pending(), log.epochs(), log.last_epoch, files)


@pytest.fixture
def leader(tmp_path: Path) -> PartitionLog:
    log = PartitionLog(tmp_path / "leader", segment_bytes=SEGMENT, index_interval_bytes=256)
    lead(log, 1, [3, 1, 7, 4])
    lead(log, 2, [5, 2, 9], flush_every=2)
    lead(log, 3, [1, 6, 6, 3, 8, 2])
    return log


def follower_log(tmp_path: Path, name: str = "follower") -> PartitionLog:
    return PartitionLog(tmp_path / name, segment_bytes=SEGMENT, index_interval_bytes=256)


@pytest.mark.parametrize("max_bytes", [1, 700, 1 << 20])
def test_a_follower_takes_the_leaders_batches_byte_for_byte(
    tmp_path: Path, leader: PartitionLog, max_bytes: int
) -> None:
    follower = follower_log(tmp_path)
    calls = replicate(leader, follower, max_bytes)
    assert calls >= len(segments(leader.directory))
    assert_same(leader, follower)
    assert leader.epochs() == [(1, 0), (2, 15), (3, 31)]
    assert follower.epoch == 3
    follower.close()
    leader.close()
    ours, theirs = segments(follower.directory), segments(leader.directory)
    assert [p.name for p in ours] == [p.name for p in theirs] and len(ours) > 2
    for a, b in zip(ours, theirs, strict=True):
        assert a.read_bytes() == b.read_bytes()
        assert a.with_suffix(".index").read_bytes() == b.with_suffix(".index").read_bytes()
    with follower_log(tmp_path) as again, PartitionLog(leader.directory) as lead_again:
        assert_same(lead_again, again)
        assert again.read(20, 1)[0].offset == 20  # the sparse index seeks


def test_append_raw_refuses_bad_offers_and_writes_nothing(
    tmp_path: Path, leader: PartitionLog
) -> None:
    follower = follower_log(tmp_path)
    replicate(leader, follower)  # up to the end of epoch 3 ...
    follower.truncate(31)  # ... then back to the end of epoch 2
    data, offset = b"", 31
    while offset < leader.high_watermark:  # chunks of consecutive segments chain as one
        chunk = leader.read_raw(offset)
        data, offset = data + chunk.data, chunk.next_offset
    raw = RawBatch(31, offset - 31, data)
    assert len(list(raw.batches())) >= 3
    before = state(follower)

    with pytest.raises(OffsetMismatch) as mismatch:
        follower.append_raw(raw.data, 32)
    assert (mismatch.value.offset, mismatch.value.end) == (32, 31)
    assert "32" in str(mismatch.value) and "31" in str(mismatch.value)

    second = BATCH_SIZE + next(h.length for h, _ in raw.batches())  # the 2nd batch's start
    for position in (5, 12, BATCH_SIZE + 3, len(raw.data) - 1, second + 20, second + BATCH_SIZE):
        bad = bytearray(raw.data)
        bad[position] ^= 0x40
        with pytest.raises(CorruptRecord, match="offset"):
            follower.append_raw(bytes(bad), 31)
        assert state(follower) == before, position
    with pytest.raises(CorruptRecord, match="runs past"):
        follower.append_raw(raw.data[:-1], 31)
    with pytest.raises(CorruptRecord, match="stray"):
        follower.append_raw(raw.data + b"\0" * 7, 31)
    with pytest.raises(CorruptRecord, match="expected 31"):
        follower.append_raw(leader.read_raw(32, 1 << 20).data, 31)  # data of another offset
    assert state(follower) == before

    follower.begin_epoch(4)  # this node led epoch 4 (nothing written): epoch 3 is behind it
    with pytest.raises(StaleEpoch) as stale:
        follower.append_raw(raw.data, 31)
    assert (stale.value.epoch, stale.value.last_epoch, stale.value.offset) == (3, 4, 31)
    assert follower.high_watermark == 31 and follower.epochs()[-1] == (4, 31)
    follower.truncate(31)  # the catch-up protocol's cut drops the epoch begun at the end
    assert follower.epochs() == [(1, 0), (2, 15)]
    assert follower.append_raw(b"", 31) == 31
    assert follower.append_raw(raw.data, 31) == raw.next_offset
    follower.flush()
    replicate(leader, follower)
    assert_same(leader, follower)


def test_epochs_never_go_back_along_the_data(tmp_path: Path) -> None:
    data = b"".join(encode_bodies([b"x"], 0, 5, 1, 0) + encode_bodies([b"y", b"z"], 1, 2, 1, 0))
    assert [(h.base, h.epoch) for h, _ in RawBatch(0, 3, data).batches()] == [(0, 5), (1, 2)]
    with PartitionLog(tmp_path) as log:
        with pytest.raises(StaleEpoch) as stale:
            log.append_raw(data, 0)
        assert (stale.value.epoch, stale.value.last_epoch, stale.value.offset) == (2, 5, 1)
        assert (log.high_watermark, log.pending(), log.epochs()) == (0, False, [])


def test_a_divergent_tail_is_truncated_by_epoch_history(tmp_path: Path) -> None:
    leader = PartitionLog(tmp_path / "leader", segment_bytes=SEGMENT)
    old = follower_log(tmp_path, "old-leader")
    lead(leader, 1, [4, 6])
    lead(leader, 2, [5])
    replicate(leader, old)  # both hold 0..15 in epochs 1 and 2
    lead(old, 2, [3, 2])  # the old leader's tail 15..20 in epoch 2, never replicated
    lead(leader, 3, [4, 4, 9])  # the new leader's epoch 3 starts at 15
    assert leader.end_offset_for_epoch(2) == (2, 15)  # where the old leader must cut
    assert old.end_offset_for_epoch(2) == (2, 20)
    assert catch_up(old, leader) == 1
    assert_same(leader, old)
    assert old.epochs() == [(1, 0), (2, 10), (3, 15)]
    old.close()
    with follower_log(tmp_path, "old-leader") as again:
        assert_same(leader, again)
    leader.close()


def test_a_follower_further_behind_asks_again_until_the_histories_meet(tmp_path: Path) -> None:
    leader = PartitionLog(tmp_path / "leader", segment_bytes=SEGMENT)
    other = follower_log(tmp_path, "other")
    lead(leader, 1, [5])
    lead(leader, 2, [5])
    replicate(leader, other)  # both: epoch 1 at 0, epoch 2 at 5, up to 10
    lead(other, 2, [2])  # other's divergent 10..12 in epoch 2
    lead(other, 4, [4])  # and epoch 4 at 12..16, which the leader never had
    lead(leader, 3, [4])  # leader: epoch 3 at 10..14
    lead(leader, 5, [6])  # and epoch 5 at 14..20
    assert leader.end_offset_for_epoch(4) == (3, 14)
    assert other.end_offset_for_epoch(3) == (2, 12)
    assert catch_up(other, leader) == 2  # cut at 12 (epoch 4 goes), then at 10
    assert_same(leader, other)
    assert other.epochs() == [(1, 0), (2, 5), (3, 10), (5, 14)]
    other.close()
    leader.close()


def test_end_offset_for_epoch_answers_like_kafka(tmp_path: Path) -> None:
    with PartitionLog(tmp_path / "empty") as empty:
        assert empty.end_offset_for_epoch(3) == (-1, -1)
        assert empty.last_epoch == 0
    with PartitionLog(tmp_path / "log") as log:
        lead(log, 2, [3])
        lead(log, 4, [2, 2])
        log.append_bodies([b"pending"])  # counted: the log's end is its high watermark
        log.begin_epoch(7)  # begun at the end, no record yet
        assert log.epochs() == [(2, 0), (4, 3), (7, 8)]
        assert log.last_epoch == 7
        assert log.end_offset_for_epoch(1) == (-1, -1)  # below every epoch known
        assert [log.end_offset_for_epoch(e) for e in (2, 3, 4, 5, 6)] == [
            (2, 3), (2, 3), (4, 8), (4, 8), (4, 8)
        ]  # fmt: skip
        assert log.end_offset_for_epoch(7) == log.end_offset_for_epoch(9) == (7, 8)


def test_nothing_in_common_truncates_everything(tmp_path: Path) -> None:
    leader = PartitionLog(tmp_path / "leader")
    stray = follower_log(tmp_path, "stray")
    lead(stray, 1, [3, 3])
    lead(leader, 2, [4])
    assert leader.end_offset_for_epoch(1) == (-1, -1)
    assert catch_up(stray, leader) == 1
    assert_same(leader, stray)
    stray.close()
    leader.close()


def test_a_crash_keeps_exactly_the_flushed_batches(tmp_path: Path, leader: PartitionLog) -> None:
    follower = follower_log(tmp_path)
    flushed = RawBatch(0, 0, b"")
    while (raw := leader.read_raw(follower.high_watermark, 400)).offset < 35:
        follower.append_raw(raw.data, raw.offset)
        flushed = raw
        follower.flush()
    assert flushed.next_offset >= 35 and len(segments(follower.directory)) > 1
    end = follower.high_watermark
    follower.append_raw(raw.data, raw.offset)  # never flushed: the process dies now
    # (never closed: a SIGKILL leaves the files as they are; the kernel keeps them)
    with follower_log(tmp_path) as again:
        assert again.quarantined == 0 and again.truncated_bytes == 0
        assert again.high_watermark == end
        assert again.read(0, 10**6, 1 << 40) == leader.read(0, end, 1 << 40)
        assert again.epochs() == [(1, 0), (2, 15), (3, 31)]
        assert again.reserved >= end
        catch_up(again, leader)
        assert_same(leader, again)
        again.begin_epoch(9)  # it leads now: its own offsets go on from the end
        assert again.append_bodies([b"mine"]) == leader.high_watermark


def test_the_epoch_history_is_on_disk_before_the_records_of_a_new_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between the two writes of a flush must not forget an epoch change (in a
    segment that is sealed later, recovery would not find it again)."""
    leader = PartitionLog(tmp_path / "leader")
    lead(leader, 1, [3])
    lead(leader, 2, [2])
    follower = follower_log(tmp_path)
    follower.append_raw(leader.read_raw(0, 1).data, 0)
    follower.flush()
    seen: list[str] = []
    real_pwrite, real_pwritev = os.pwrite, os.pwritev

    def pwrite(fd: int, buf: bytes, at: int) -> int:
        seen.append((follower.directory / "epochs").read_text())
        return real_pwrite(fd, buf, at)

    def pwritev(fd: int, bufs: list[bytes], at: int) -> int:
        seen.append((follower.directory / "epochs").read_text())
        return real_pwritev(fd, bufs, at)

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "pwritev", pwritev)
    follower.append_raw(leader.read_raw(3, 1).data, 3)
    assert seen == []
    follower.flush()
    monkeypatch.undo()
    assert seen == ["1 0\n2 3\n"]
    assert_same(leader, follower)
    follower.close()
    leader.close()


def test_group_commit_many_append_raw_calls_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leader = PartitionLog(tmp_path / "leader")
    for i in range(101):
        leader.append_bodies([body(i), body(i + 1)])
        leader.flush()
    chunks = []
    offset = 0
    while (raw := leader.read_raw(offset, 1)).count:
        chunks.append(raw)
        offset = raw.next_offset
    assert len(chunks) == 101
    follower = PartitionLog(tmp_path / "follower")
    follower.append_raw(chunks[0].data, 0)
    follower.flush()  # (the first flush also makes the reservation durable)
    calls: list[str] = []
    real_pwrite, real_pwritev, real_write = os.pwrite, os.pwritev, os.write

    def count(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(*a):  # type: ignore[no-untyped-def]
            calls.append(name)
            return fn(*a)

        return wrapper

    monkeypatch.setattr(os, "pwrite", count("pwrite", real_pwrite))
    monkeypatch.setattr(os, "pwritev", count("pwritev", real_pwritev))
    monkeypatch.setattr(os, "write", count("write", real_write))
    for raw in chunks[1:]:
        follower.append_raw(raw.data, raw.offset)
    assert calls == []  # appending is no syscall
    follower.flush()
    assert calls == ["pwritev"]
    monkeypatch.undo()
    assert_same(leader, follower)
    follower.close()
    leader.close()


def test_a_reboot_jump_on_a_follower_is_cut_by_the_catch_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reservation_module, "RESERVE_MIN", 4)
    leader = PartitionLog(tmp_path / "leader")
    follower = follower_log(tmp_path)
    lead(leader, 1, [3, 3])
    replicate(leader, follower)
    simulate_reboot(follower.directory)  # reserved ahead of the end, from an earlier boot
    with follower_log(tmp_path) as again:
        jumped = again.high_watermark
        assert jumped > 6 and again.gaps() == [(6, jumped)]
        lead(leader, 1, [jumped + 4])  # the leader's records run past the jump
        catch_up(again, leader)
        assert again.gaps() == []
        assert_same(leader, again)
    leader.close()


def test_a_log_with_nothing_in_common_begins_again_at_zero(tmp_path: Path) -> None:
    """A follower whose log starts above its leader's end (a reboot's reserved jump with
    no record kept, or retention) must not fetch from there: it would receive nothing and
    acknowledge an end it does not have. With no record kept it begins again at 0."""
    with PartitionLog(tmp_path / "jumped", start_offset=65_536) as log:
        assert log.match_leader(0, (-1, -1))
        assert (log.low_watermark, log.high_watermark, log.epochs()) == (0, 0, [])
        assert log.reserved == 0
    leader = PartitionLog(tmp_path / "leader")
    lead(leader, 1, [5])
    with PartitionLog(tmp_path / "retained", start_offset=10) as log:
        assert log.match_leader(1, leader.end_offset_for_epoch(1))  # (1, 5): below it
        assert log.high_watermark == 0
        replicate(leader, log)
        assert_same(leader, log)
    with PartitionLog(tmp_path / "kept", start_offset=3) as log:
        assert log.match_leader(1, (1, 5))  # empty, but not beyond the leader's end
        assert log.high_watermark == 3
    leader.close()


def test_a_follower_that_lost_everything_in_a_reboot_fetches_the_whole_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(Found by the data-plane simulation.) A follower that never fsynced anything loses
    it all in a power loss and reopens at its reserved offset, with no epoch: its catch-up
    must bring it back to the leader's start, not FETCH from beyond the leader's end."""
    monkeypatch.setattr(reservation_module, "RESERVE_MIN", 4)
    leader = PartitionLog(tmp_path / "leader")
    lead(leader, 1, [3, 3])
    follower = follower_log(tmp_path)
    replicate(leader, follower)
    reserved = (tmp_path / "follower" / "reserved").read_text()
    follower.truncate(0)  # what a power loss leaves of a log never fsynced ...
    follower.close()
    (tmp_path / "follower" / "reserved").write_text(reserved)  # ... and its reservation
    simulate_reboot(tmp_path / "follower")
    with follower_log(tmp_path) as again:
        assert again.high_watermark > 0 and again.epochs() == []
        catch_up(again, leader)
        assert_same(leader, again)
    leader.close()


@pytest.mark.parametrize("damage", [b"3 x\n", b"\xff\xfe\n", b"7\n"])
def test_a_damaged_epoch_history_is_said_in_one_line_and_the_log_opens(
    tmp_path: Path, damage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """A damaged ``epochs`` file (a flipped byte on disk) is rebuilt from the records'
    epochs, with one warning that names it; a missing one (a new log) says nothing."""
    log = PartitionLog(tmp_path / "p", segment_bytes=SEGMENT)
    lead(log, 2, [3, 4])
    log.flush()
    log.close()
    (tmp_path / "p" / "epochs").unlink()
    with caplog.at_level("WARNING", logger="nsqpy.storage"):
        PartitionLog(tmp_path / "p", segment_bytes=SEGMENT).close()
    assert not [r for r in caplog.records if "epoch history" in r.getMessage()]
    (tmp_path / "p" / "epochs").write_bytes(damage)
    with caplog.at_level("WARNING", logger="nsqpy.storage"):
        again = PartitionLog(tmp_path / "p", segment_bytes=SEGMENT)
    lines = [r.getMessage() for r in caplog.records if "epoch history" in r.getMessage()]
    assert len(lines) == 1 and "damaged" in lines[0] and str(tmp_path / "p") in lines[0]
    assert again.last_epoch == 2 and again.high_watermark == 7
    again.close()


def test_a_jump_leaves_what_was_not_fsynced_before_it_owed(tmp_path: Path) -> None:
    """A jump (a follower's leader skipped offsets) over records written and not fsynced
    keeps them owed: the fsync by the time bound still comes, and covers them; a jump from
    a durable end keeps the log durable (the gap needs no fsync)."""
    log = PartitionLog(tmp_path / "p", segment_bytes=SEGMENT, sync=SyncPolicy(0, 60_000))
    try:
        lead(log, 1, [3])
        log.advance_to(10)
        assert (log.high_watermark, log.durable_offset) == (10, 0)
        assert log.sync_due_in(0) is not None  # (an fsync still owed, by the time bound)
        assert log.sync() == 10
        log.advance_to(20)
        assert (log.high_watermark, log.durable_offset) == (20, 20)
        assert log.sync_due_in(0) is None
    finally:
        log.close()
