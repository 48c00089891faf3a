"""read_raw: whole batches as stored, resealed first batches, bounds, corruption."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqpy.errors import CorruptRecord
from nsqpy.storage import Entry, OffsetOutOfRange, PartitionLog, RawBatch
from nsqpy.storage.records import BATCH_SIZE, RECORD_SIZE, parse_batch_header

from .helpers import flip_byte, segments


def body(i: int, size: int = 20) -> bytes:
    return (b"%08d" % i * (size // 8 + 1))[:size]


def fill(log: PartitionLog, sizes: list[int], body_size: int = 20) -> None:
    n = 0
    for s in sizes:
        log.append_bodies([body(n + k, body_size) for k in range(s)])
        log.flush()
        n += s


def read_all_raw(log: PartitionLog, offset: int, max_bytes: int) -> list[RawBatch]:
    out = []
    while (got := log.read_raw(offset, max_bytes)).count:
        assert got.offset == offset
        out.append(got)
        offset = got.next_offset
    return out


def test_raw_batches_are_the_stored_bytes_and_parse_back_to_the_records(tmp_path: Path) -> None:
    with PartitionLog(tmp_path) as log:
        fill(log, [3, 1, 4])
        log.append([Entry(b"rich", trace_id=7, partition_key=b"k", headers=b'{"a":1}')])
        log.flush()
        raw = log.read_raw(0, 1 << 20)
        stored = segments(tmp_path)[0].read_bytes()
        assert (raw.offset, raw.count, raw.data) == (0, 9, stored)
        assert raw.records() == log.read(0, 100)
        assert [h.n_records for h, _ in raw.batches()] == [3, 1, 4, 1]
        assert log.read_raw(9, 1 << 20) == RawBatch(9, 0, b"")


def test_max_bytes_gives_whole_batches_and_at_least_one(tmp_path: Path) -> None:
    with PartitionLog(tmp_path, index_interval_bytes=1) as log:
        fill(log, [5, 5, 5, 5])
        batch = BATCH_SIZE + 5 * (RECORD_SIZE + 20)
        assert [r.count for r in read_all_raw(log, 0, 1)] == [5, 5, 5, 5]
        assert [r.count for r in read_all_raw(log, 0, 2 * batch)] == [10, 10]
        assert [r.count for r in read_all_raw(log, 0, 3 * batch - 1)] == [10, 10]
        assert len(log.read_raw(0, 2 * batch).data) == 2 * batch


def test_a_sparse_index_still_cuts_at_batch_boundaries(tmp_path: Path) -> None:
    with PartitionLog(tmp_path, index_interval_bytes=10_000) as log:
        fill(log, [2] * 30)
        batch = BATCH_SIZE + 2 * (RECORD_SIZE + 20)
        got = read_all_raw(log, 0, 3 * batch)
        assert all(0 < len(r.data) <= 3 * batch for r in got)
        assert [rec.offset for r in got for rec in r.records()] == list(range(60))


def test_an_offset_inside_a_batch_reseals_that_batch(tmp_path: Path) -> None:
    with PartitionLog(tmp_path) as log:
        log.set_epoch(4)
        log.append_bodies([body(i) for i in range(10)], timestamp=50)
        log.append([Entry(body(10), timestamp=90), Entry(body(11), timestamp=60)])
        log.flush()
        raw = log.read_raw(3, 1 << 20)
        assert (raw.offset, raw.count) == (3, 9)
        head = parse_batch_header(raw.data, 0)
        assert head is not None and (head.base, head.n_records, head.epoch) == (3, 7, 4)
        assert raw.records() == log.read(3, 100)
        tail = log.read_raw(11, 1 << 20)
        last = parse_batch_header(tail.data, 0)
        assert last is not None and last.max_ts == 60  # max of what is left
        assert [r.body for r in tail.records()] == [body(11)]


def test_raw_reads_stay_in_one_segment_and_go_on_to_the_next(tmp_path: Path) -> None:
    with PartitionLog(tmp_path, segment_bytes=700) as log:
        fill(log, [4] * 12)
        bases = [int(p.stem) for p in segments(tmp_path)]
        got = read_all_raw(log, 0, 1 << 20)
        assert [r.offset for r in got] == bases
        assert sum(r.count for r in got) == 48


def test_below_the_low_watermark_is_out_of_range(tmp_path: Path) -> None:
    with PartitionLog(tmp_path, segment_bytes=500) as log:
        fill(log, [2] * 20, 60)
        low = log.retain(30, 0)
        with pytest.raises(OffsetOutOfRange):
            log.read_raw(low - 1)
        assert log.read_raw(low).offset == low


def test_records_missing_between_segments_are_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with PartitionLog(tmp_path, segment_bytes=600) as log:
        fill(log, [3] * 10)
    segs = segments(tmp_path)
    segs[1].with_name(segs[1].name + ".gone").write_bytes(b"")
    segs[1].unlink()
    first_missing = int(segs[1].stem)
    with caplog.at_level(logging.INFO, "nsqpy.storage"), PartitionLog(tmp_path) as log:
        raw = log.read_raw(first_missing)
        assert log.gaps() == [(first_missing, int(segs[2].stem))]
    assert raw.offset == int(segs[2].stem)
    assert f"offsets {first_missing}..{int(segs[2].stem) - 1} are absent" in caplog.text


def test_verify_catches_a_flipped_body_byte_and_the_receiver_does_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with PartitionLog(tmp_path, segment_bytes=1000) as log:
        fill(log, [3] * 6)
    seg = segments(tmp_path)[0]
    flip_byte(seg, BATCH_SIZE + RECORD_SIZE + 3)  # body of record 0, a sealed segment
    with PartitionLog(tmp_path, verify_on_open=False) as log:
        raw = log.read_raw(0, verify=False)  # headers are fine: handed out as stored
        with pytest.raises(CorruptRecord):
            raw.records()
        assert raw.records(check=False)[0].body != body(0)
        with caplog.at_level(logging.ERROR, "nsqpy.storage"), pytest.raises(CorruptRecord):
            log.read_raw(0, verify=True)
        assert "CRC32C" in caplog.text


def test_a_bad_header_in_a_sealed_segment_is_an_error_not_a_short_read(tmp_path: Path) -> None:
    with PartitionLog(tmp_path, segment_bytes=1000) as log:
        fill(log, [3] * 6)
    batch = BATCH_SIZE + 3 * (RECORD_SIZE + 20)
    flip_byte(segments(tmp_path)[0], batch + 12)  # second batch's base offset
    with PartitionLog(tmp_path, verify_on_open=False) as log:
        assert log.read_raw(0, 1).count == 3
        with pytest.raises(CorruptRecord):
            log.read_raw(0, 1 << 20)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=12),
    seg=st.sampled_from([400, 3000, 1 << 20]),
    start=st.integers(0, 200),
    max_bytes=st.integers(1, 5000),
    data=st.data(),
)
def test_property_raw_reads_from_anywhere_equal_read(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    seg: int,
    start: int,
    max_bytes: int,
    data: st.DataObject,
) -> None:
    d = tmp_path_factory.mktemp("raw")
    with PartitionLog(d, segment_bytes=seg, index_interval_bytes=256) as log:
        fill(log, sizes, data.draw(st.sampled_from([0, 7, 40])))
        start = min(start, log.high_watermark)
        got = [rec for raw in read_all_raw(log, start, max_bytes) for rec in raw.records()]
        assert got == log.read(start, 10**6, 1 << 40)
        assert log.read_raw(log.high_watermark).count == 0


def test_a_leaders_last_flush_is_read_back_without_the_disk_and_never_after_a_cut(
    tmp_path: Path, preads: list[int]
) -> None:
    """With ``keep_tail`` (a replicated partition's leader), what the last flush wrote is
    handed to ``read_raw`` from memory: the same bytes as on disk, the same object for a
    second follower, no ``pread``. Anything else (an older offset, a bound below its
    size, ``verify``, a log cut since) reads the disk."""
    log = PartitionLog(tmp_path / "p")
    log.begin_epoch(1)
    log.keep_tail = True
    fill(log, [5, 7])
    reads = preads
    reads.clear()
    first = log.read_raw(5)
    again = log.read_raw(5)
    assert (first.offset, first.count, reads) == (5, 7, [])
    assert again.data is first.data
    assert log.read_raw(0).count == 12 and reads  # (not where the last flush began)
    reads.clear()
    assert log.read_raw(5, verify=True).data == first.data and reads
    reads.clear()
    assert log.read_raw(5, max_bytes=10).count == 7 and reads  # (one batch, from the disk)
    reads.clear()
    assert log.read_raw(5).data is first.data and not reads
    log.release_tail(11)  # (a follower is still below its end: kept)
    assert log.read_raw(5).data is first.data and not reads
    log.release_tail(12)  # (every follower read it: let go)
    assert log.read_raw(5).data == first.data and reads
    reads.clear()
    log.keep_tail = False  # (a follower's log: read from the disk, the same bytes)
    assert log.read_raw(5).data == first.data and reads
    log.keep_tail = True
    # cut, then appended again: the offsets hold other records; the old tail is gone
    log.truncate(5)
    reads.clear()
    assert log.read_raw(5).count == 0
    log.append_bodies([b"new"] * 3)
    log.flush()
    again = log.read_raw(5)
    assert (again.count, [r.body for r in again.records()]) == (3, [b"new"] * 3)
    log.close()
    reopened = PartitionLog(tmp_path / "p")  # (the disk's own bytes: what was handed out)
    assert reopened.read_raw(5).data == again.data
    reopened.close()
