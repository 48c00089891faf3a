"""Recovery: torn and corrupt tails are cut whole-batch; corrupt middles are quarantined."""

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
    ("where", "survivors"),
    [
        (4 * BATCH + 2, 12),  # header magic of the last batch
        (4 * BATCH + 12, 12),  # base offset of the last batch (header CRC catches it)
        (4 * BATCH + BATCH_SIZE + 10, 12),  # first record's offset field
        (5 * BATCH - 1, 12),  # last byte of the last record body
        (2 * BATCH + BATCH_SIZE + REC + 20, 6),  # a record in the middle of the segment
        (3, 0),  # the very first batch header
    ],
)
def test_flipped_byte_in_the_tail_segment_cuts_from_its_batch(
    tmp_path: Path, where: int, survivors: int, caplog: pytest.LogCaptureFixture
) -> None:
    fill(tmp_path, 5)
    flip_byte(segments(tmp_path)[0], where)
    with caplog.at_level(logging.WARNING, "nsqpy.storage"):
        assert offsets(tmp_path) == list(range(survivors))
    assert "truncating the tail" in caplog.text


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
def test_property_any_flip_or_cut_leaves_a_whole_batch_prefix(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    d = tmp_path_factory.mktemp("fuzz")
    fill(d, 6)
    seg = segments(d)[0]
    size = seg.stat().st_size
    if data.draw(st.booleans()):
        pos = data.draw(st.integers(0, size - 1))
        flip_byte(seg, pos)
    else:
        pos = data.draw(st.integers(0, size))
        cut(seg, pos)
    whole = min(pos // BATCH, 6)
    assert offsets(d) == list(range(3 * whole))
