"""Recovery: torn tails are cut whole-batch; a corrupt batch with valid ones after it is
quarantined alone (a hole readers skip); a corrupt sealed segment is quarantined."""

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
def test_torn_last_batch_is_truncated_whole(tmp_path: Path, keep: int) -> None:
    fill(tmp_path, 5)
    seg = segments(tmp_path)[0]
    cut(seg, 4 * BATCH + keep)
    with PartitionLog(tmp_path) as log:
        assert log.high_watermark == 12
        assert log.stats()["truncated_bytes"] == keep
        assert seg.stat().st_size == 4 * BATCH
        assert log.append_bodies([b"z"]) == 12
        log.flush()
    assert offsets(tmp_path) == list(range(13))


@pytest.mark.parametrize(
    "where",
    [
        4 * BATCH + 2,  # header magic of the last batch
        4 * BATCH + 12,  # base offset of the last batch (header CRC catches it)
        4 * BATCH + BATCH_SIZE + 10,  # first record's offset field
        5 * BATCH - 1,  # last byte of the last record body
    ],
)
def test_flipped_byte_in_the_last_batch_is_a_torn_tail_and_is_cut(
    tmp_path: Path, where: int, caplog: pytest.LogCaptureFixture
) -> None:
    fill(tmp_path, 5)
    flip_byte(segments(tmp_path)[0], where)
    with caplog.at_level(logging.WARNING, "nsqpy.storage"):
        assert offsets(tmp_path) == list(range(12))
    assert "truncating the tail" in caplog.text
    assert not list(tmp_path.glob("*.corrupt"))


@pytest.mark.parametrize(
    ("where", "lost"),
    [
        (2 * BATCH + BATCH_SIZE + REC + 20, range(6, 9)),  # a record mid-segment
        (2 * BATCH + 28, range(6, 9)),  # a batch's length field (header CRC catches it)
        (BATCH + 1, range(3, 6)),  # a batch's magic
        (3, range(0, 3)),  # the very first batch header
    ],
)
def test_flipped_byte_mid_tail_segment_quarantines_only_its_batch(
    tmp_path: Path, where: int, lost: range, caplog: pytest.LogCaptureFixture
) -> None:
    fill(tmp_path, 5)
    seg = segments(tmp_path)[0]
    bad_batch = (where // BATCH) * BATCH
    original = seg.read_bytes()[bad_batch : bad_batch + BATCH]
    flip_byte(seg, where)
    kept = [o for o in range(15) if o not in lost]
    with caplog.at_level(logging.WARNING, "nsqpy.storage"), PartitionLog(tmp_path) as log:
        assert log.quarantined == 1 and log.stats()["holes"] == 1
        assert log.high_watermark == 15 and log.stats()["truncated_bytes"] == 0
        assert [f[0] for f in log.read_frames(0, 100)] == kept
        # A reader asking for a lost offset gets the next one kept: the gap is skipped.
        assert log.read(lost[0], 1)[0].offset == lost[-1] + 1
        assert log.append_bodies([b"after"]) == 15
        log.flush()
    assert "truncating" not in caplog.text
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert f"offsets {lost[0]}..{lost[-1]} are lost" in errors[0].getMessage()
    (copy,) = tmp_path.glob("*.corrupt")
    assert copy.name == f"{seg.name}.{bad_batch}.corrupt"
    flipped = bytearray(original)
    flipped[where - bad_batch] ^= 0xFF
    assert copy.read_bytes() == bytes(flipped)
    # Reopening finds the same hole again (the segment is left as it is) and keeps the rest.
    assert offsets(tmp_path) == [*kept, 15]
    assert len(list(tmp_path.glob("*.corrupt"))) == 1


def test_two_holes_and_raw_reads_and_truncation_across_them(tmp_path: Path) -> None:
    fill(tmp_path, 6)
    seg = segments(tmp_path)[0]
    flip_byte(seg, BATCH + BATCH_SIZE + 3)  # batch 1: offsets 3..5
    flip_byte(seg, 3 * BATCH + 7)  # batch 3 header: offsets 9..11
    kept = [0, 1, 2, 6, 7, 8, 12, 13, 14, 15, 16, 17]
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
        assert [f[0] for f in log.read_frames(4, 100)] == kept[3:]
        log.truncate(10)  # inside the second hole: it goes, the first stays
        assert log.high_watermark == 9
        assert [f[0] for f in log.read_frames(0, 100)] == [0, 1, 2, 6, 7, 8]
        assert log.append_bodies([b"x"]) == 9
        log.flush()
    assert offsets(tmp_path) == [0, 1, 2, 6, 7, 8, 9]


def test_corrupt_middle_segment_is_quarantined_logged_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fill(tmp_path, 12, segment_bytes=2 * BATCH)
    segs = segments(tmp_path)
    assert len(segs) == 6
    flip_byte(segs[2], BATCH + BATCH_SIZE + 5)
    with caplog.at_level(logging.ERROR, "nsqpy.storage"), PartitionLog(tmp_path) as log:
        assert log.quarantined == 1 and log.stats()["quarantined"] == 1
        got = [f[0] for f in log.read_frames(0, 1000)]
        assert log.high_watermark == 36
    assert got == list(range(12)) + list(range(18, 36))
    assert "quarantined" in caplog.text and segs[2].name in caplog.text
    assert segs[2].with_name(segs[2].name + ".corrupt").exists()
    assert not segs[2].exists()


def test_truncated_middle_segment_is_quarantined(tmp_path: Path) -> None:
    fill(tmp_path, 8, segment_bytes=2 * BATCH)
    segs = segments(tmp_path)
    cut(segs[1], BATCH + 10)
    with PartitionLog(tmp_path) as log:
        assert log.quarantined == 1
        assert [f[0] for f in log.read_frames(0, 1000)] == list(range(6)) + list(range(12, 24))


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
def test_property_a_flip_loses_only_its_batch_and_a_cut_leaves_a_whole_batch_prefix(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    d = tmp_path_factory.mktemp("fuzz")
    fill(d, 6)
    seg = segments(d)[0]
    size = seg.stat().st_size
    if data.draw(st.booleans()):
        pos = data.draw(st.integers(0, size - 1))
        flip_byte(seg, pos)
        bad = pos // BATCH  # that batch is lost; a torn tail if it is the last one
        expected = [o for o in range(18) if o // 3 != bad]
    else:
        pos = data.draw(st.integers(0, size))
        cut(seg, pos)
        expected = list(range(3 * min(pos // BATCH, 6)))
    assert offsets(d) == expected
