"""Recovery: a damaged range loses only the records in it that no longer hold (their own
CRC32C); the rest are kept, the damaged bytes copied aside; a torn tail with no whole
record in it is cut; a sealed segment with nothing valid in it is quarantined."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqpy.errors import CorruptRecord
from nsqpy.storage import PartitionLog
from nsqpy.storage.records import BATCH_SIZE, RECORD_SIZE

from .helpers import cut, flip_byte, segments

BODY = 40
REC = RECORD_SIZE + BODY
BATCH = BATCH_SIZE + 3 * REC  # every batch below holds 3 records


def fill(d: Path, batches: int, segment_bytes: int = 1 << 20) -> None:
    with PartitionLog(d, segment_bytes=segment_bytes) as log:
        for i in range(batches):
            log.append_bodies([bytes([65 + i % 26]) * BODY] * 3)
            log.flush()


def offsets(d: Path, **kw: int) -> list[int]:
    with PartitionLog(d, **kw) as log:  # type: ignore[arg-type]
        return [f[0] for f in log.read_frames(log.low_watermark, 10**6, 1 << 40)]


@pytest.mark.parametrize("keep", [0, 1, BATCH_SIZE - 1, BATCH_SIZE, BATCH_SIZE + REC, BATCH - 1])
def test_torn_last_batch_is_cut_whole(tmp_path: Path, keep: int) -> None:
    """A batch cut short by the file's end is a write a crash interrupted: never
    acknowledged, so it goes whole (its whole records too), with a warning, not as damage."""
    fill(tmp_path, 5)
    seg = segments(tmp_path)[0]
    cut(seg, 4 * BATCH + keep)
    with PartitionLog(tmp_path) as log:
        # offsets 12..14 were handed out before the cut (the log was closed with them): the
        # log goes on at 15, so none of them is ever given to other data
        assert log.high_watermark == 15 and log.gaps() == [(12, 15)]
        assert log.stats()["truncated_bytes"] == keep
        assert log.quarantined == 0 and not list(tmp_path.glob("*.corrupt"))
        assert seg.stat().st_size == 4 * BATCH
        assert log.append_bodies([b"z"]) == 15
        log.flush()
    assert offsets(tmp_path) == [*range(12), 15]


@pytest.mark.parametrize(
    ("where", "lost"),
    [
        (4 * BATCH + 2, []),  # header magic of the last batch: its records still hold
        (4 * BATCH + 12, []),  # base offset of the last batch (header CRC catches it)
        (4 * BATCH + BATCH_SIZE + 10, [12]),  # first record's offset field
        (5 * BATCH - 1, [14]),  # last byte of the last record body
    ],
)
def test_flipped_byte_in_the_last_batch_loses_only_its_record(
    tmp_path: Path, where: int, lost: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    fill(tmp_path, 5)
    flip_byte(segments(tmp_path)[0], where)
    with caplog.at_level(logging.WARNING, "nsqpy.storage"):
        assert offsets(tmp_path) == [o for o in range(15) if o not in lost]
    assert "are damaged" in caplog.text
    assert len(list(tmp_path.glob("*.corrupt"))) == 1


@pytest.mark.parametrize(
    ("where", "lost"),
    [
        (2 * BATCH + BATCH_SIZE + REC + 20, [7]),  # a record mid-segment: only it
        (2 * BATCH + BATCH_SIZE + 2, [6]),  # a record's length field (not under its CRC)
        (2 * BATCH + 28, []),  # a batch's length field (header CRC catches it)
        (BATCH + 1, []),  # a batch's magic
        (3, []),  # the very first batch header
    ],
)
def test_flipped_byte_mid_segment_loses_only_its_record(
    tmp_path: Path, where: int, lost: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    fill(tmp_path, 5)
    seg = segments(tmp_path)[0]
    bad_batch = (where // BATCH) * BATCH
    original = seg.read_bytes()[bad_batch : bad_batch + BATCH]
    flip_byte(seg, where)
    kept = [o for o in range(15) if o not in lost]
    with caplog.at_level(logging.WARNING, "nsqpy.storage"), PartitionLog(tmp_path) as log:
        assert log.quarantined == 1 and log.stats()["holes"] == 0
        assert log.high_watermark == 15 and log.stats()["truncated_bytes"] == 0
        assert [f[0] for f in log.read_frames(0, 100)] == kept
        if lost:  # a reader asking for a lost offset gets the next one kept
            assert log.read(lost[0], 1)[0].offset == lost[0] + 1
        assert log.append_bodies([b"after"]) == 15
        log.flush()
    assert "truncating" not in caplog.text
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert f"{3 - len(lost)} records in it still held and are kept" in errors[0]
    (copy,) = tmp_path.glob("*.corrupt")
    assert copy.name == f"{seg.name}.{bad_batch}.corrupt"
    flipped = bytearray(original)
    flipped[where - bad_batch] ^= 0xFF
    assert copy.read_bytes() == bytes(flipped)
    # The segment was repaired: reopening finds nothing wrong and keeps everything.
    with caplog.at_level(logging.WARNING, "nsqpy.storage"), PartitionLog(tmp_path) as log:
        assert log.quarantined == 0
        assert [f[0] for f in log.read_frames(0, 100)] == [*kept, 15]
    assert len(list(tmp_path.glob("*.corrupt"))) == 1


def test_two_damaged_records_and_raw_reads_and_truncation_across_them(tmp_path: Path) -> None:
    fill(tmp_path, 6)
    seg = segments(tmp_path)[0]
    flip_byte(seg, BATCH + BATCH_SIZE + REC + 30)  # batch 1, record 1: offset 4
    flip_byte(seg, 3 * BATCH + BATCH_SIZE + 2 * REC + 50)  # batch 3, record 2: offset 11
    kept = [o for o in range(18) if o not in (4, 11)]
    with PartitionLog(tmp_path, verify_on_open=False) as log:
        assert log.quarantined == 2
        assert [f[0] for f in log.read_frames(0, 100)] == kept
        raw_offsets: list[int] = []
        at = 0
        while at < log.flushed_offset:
            raw = log.read_raw(at, 1 << 20, verify=True)
            assert raw.count
            raw_offsets += [r.offset for r in raw.records()]
            at = raw_offsets[-1] + 1
        assert raw_offsets == kept
        assert [f[0] for f in log.read_frames(4, 100)] == kept[4:]
        log.truncate(11)  # at the second lost offset: what follows goes, the first gap stays
        assert log.high_watermark == 11
        assert [f[0] for f in log.read_frames(0, 100)] == kept[:10]
        assert log.append_bodies([b"x"]) == 11
        log.flush()
    assert offsets(tmp_path) == [*kept[:10], 11]


def test_a_damaged_record_in_a_sealed_segment_loses_only_that_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fill(tmp_path, 12, segment_bytes=2 * BATCH)
    segs = segments(tmp_path)
    assert len(segs) == 6
    flip_byte(segs[2], BATCH + BATCH_SIZE + 5)  # segment 2, batch 1, record 0: offset 15
    with caplog.at_level(logging.ERROR, "nsqpy.storage"), PartitionLog(tmp_path) as log:
        assert log.quarantined == 1 and log.stats()["quarantined"] == 1
        got = [f[0] for f in log.read_frames(0, 1000)]
        assert log.high_watermark == 36
    assert got == [o for o in range(36) if o != 15]
    assert "are damaged" in caplog.text and segs[2].name in caplog.text
    assert segs[2].exists() and not segs[2].with_name(segs[2].name + ".corrupt").exists()


def test_a_sealed_segment_cut_short_keeps_its_whole_batches(tmp_path: Path) -> None:
    fill(tmp_path, 8, segment_bytes=2 * BATCH)
    segs = segments(tmp_path)
    cut(segs[1], BATCH + 10)
    with PartitionLog(tmp_path) as log:
        assert log.quarantined == 1
        assert log.gaps() == [(9, 12)]
        assert [f[0] for f in log.read_frames(0, 1000)] == list(range(9)) + list(range(12, 24))


def test_a_sealed_segment_with_nothing_valid_is_quarantined_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fill(tmp_path, 6, segment_bytes=2 * BATCH)
    segs = segments(tmp_path)
    segs[1].write_bytes(b"\x01" * (2 * BATCH))
    with caplog.at_level(logging.ERROR, "nsqpy.storage"), PartitionLog(tmp_path) as log:
        assert log.quarantined == 1
        assert [f[0] for f in log.read_frames(0, 1000)] == [*range(6), *range(12, 18)]
    assert segs[1].with_name(segs[1].name + ".corrupt").exists() and not segs[1].exists()
    assert "nothing in it could be kept" in caplog.text


def test_flip_in_a_sealed_segment_is_caught_on_read_when_open_trusts_the_index(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fill(tmp_path, 6, segment_bytes=2 * BATCH)
    flip_byte(segments(tmp_path)[0], BATCH_SIZE + REC - 1)  # body of record 0
    with PartitionLog(tmp_path, verify_on_open=False) as log:
        assert log.read(3, 3)[0].offset == 3  # other records still read
        with caplog.at_level(logging.ERROR, "nsqpy.storage"), pytest.raises(CorruptRecord):
            log.read_frames(0, 10)
        assert "CRC32C" in caplog.text
        with pytest.raises(CorruptRecord):
            log.read(0, 1)


def test_index_for_a_changed_segment_is_stale_and_rebuilt(tmp_path: Path) -> None:
    fill(tmp_path, 6, segment_bytes=2 * BATCH)
    segs = segments(tmp_path)
    cut(segs[0], BATCH)  # index says 2 batches, file has 1: stale -> rescan finds a gap
    with PartitionLog(tmp_path, verify_on_open=False) as log:
        assert [f[0] for f in log.read_frames(0, 100)] == [0, 1, 2, *range(6, 18)]


def test_empty_and_junk_files(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    with PartitionLog(tmp_path) as log:
        assert log.high_watermark == 0
    (tmp_path / "00000000000000000000.log").write_bytes(b"\x00" * 1000)
    with PartitionLog(tmp_path) as log:
        assert log.high_watermark == 0 and log.stats()["truncated_bytes"] == 1000
        log.append_bodies([b"a"])
    assert offsets(tmp_path) == [0]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_property_a_flip_loses_at_most_its_record_and_a_cut_leaves_whole_batches(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    d = tmp_path_factory.mktemp("fuzz")
    fill(d, 6)
    seg = segments(d)[0]
    size = seg.stat().st_size
    if data.draw(st.booleans()):
        pos = data.draw(st.integers(0, size - 1))
        flip_byte(seg, pos)
        batch, within = divmod(pos, BATCH)
        lost = {3 * batch + (within - BATCH_SIZE) // REC} if within >= BATCH_SIZE else set()
        expected = [o for o in range(18) if o not in lost]
    else:
        pos = data.draw(st.integers(0, size))
        cut(seg, pos)  # a torn tail: the batch cut short goes whole
        expected = list(range(3 * min(pos // BATCH, 6)))
    assert offsets(d) == expected
