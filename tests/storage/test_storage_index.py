"""The sparse index is what seeks use: a random read or a timestamp seek deep in a large
segment reads a few kilobytes near its target, never the segment from its start."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.storage import PartitionLog
from nsqpy.storage.segment import Segment

BATCHES = 1000  # of 10 records of 200 bytes: one ~2.4 MB segment
PER_BATCH = 10
INTERVAL = 16 * 1024


class Spy:
    """Every ``os.pread`` (position, bytes) and every index lookup while the spy is on."""

    def __init__(self) -> None:
        self.preads: list[tuple[int, int]] = []
        self.lookups: list[tuple[int, int]] = []  # (offset or ts asked, position returned)

    @property
    def bytes_read(self) -> int:
        return sum(n for _, n in self.preads)


@pytest.fixture
def big_log(tmp_path: Path) -> Iterator[Path]:
    with PartitionLog(tmp_path, index_interval_bytes=INTERVAL) as log:
        for b in range(BATCHES):
            first = b * PER_BATCH
            log.append_bodies([b"%08d" % (first + k) * 25 for k in range(PER_BATCH)], 1000 + b)
            log.flush()
        stats = log.stats()
    assert stats["segments"] == 1 and stats["index_entries"] >= 100
    yield tmp_path


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    seen = Spy()
    real_pread, real_locate, real_locate_time = os.pread, Segment.locate, Segment.locate_time

    def pread(fd: int, n: int, pos: int) -> bytes:
        data = real_pread(fd, n, pos)
        seen.preads.append((pos, len(data)))
        return data

    def locate(seg: Segment, offset: int) -> tuple[int, int]:
        found = real_locate(seg, offset)
        seen.lookups.append((offset, found[1]))
        return found

    def locate_time(seg: Segment, ts: int) -> tuple[int, int]:
        found = real_locate_time(seg, ts)
        seen.lookups.append((ts, found[1]))
        return found

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(Segment, "locate", locate)
    monkeypatch.setattr(Segment, "locate_time", locate_time)
    return seen


def batch_size(directory: Path) -> int:
    (segment,) = directory.glob("*.log")
    return segment.stat().st_size // BATCHES


def test_a_random_read_deep_in_a_segment_starts_at_the_indexed_batch(
    big_log: Path, spy: Spy
) -> None:
    target = 9_000 + 3  # in batch 900, ~2.1 MB into the segment
    with PartitionLog(big_log, index_interval_bytes=INTERVAL, verify_on_open=False) as log:
        spy.preads.clear()
        (record,) = log.read(target, 1)
    assert record.offset == target and record.body == b"%08d" % target * 25
    assert spy.lookups[-1][0] == target
    batch_pos = 900 * batch_size(big_log)
    found = spy.lookups[-1][1]
    assert batch_pos - INTERVAL - batch_size(big_log) <= found <= batch_pos
    assert spy.preads, "the read came from the file"
    assert min(pos for pos, _ in spy.preads) == found, "reading began at the indexed position"
    assert spy.bytes_read <= 256 * 1024 + INTERVAL, f"read {spy.bytes_read} bytes for one record"


def test_a_sequential_reader_looks_the_index_up_once(big_log: Path, spy: Spy) -> None:
    with PartitionLog(big_log, index_interval_bytes=INTERVAL, verify_on_open=False) as log:
        spy.lookups.clear()
        offset, got = 5_000, 0
        while got < 2_000:
            frames = log.read_frames(offset, 100)
            got += len(frames)
            offset = frames[-1][0] + 1
    assert len(spy.lookups) == 1, "each later read went on from the cached position"


def test_a_timestamp_seek_deep_in_a_segment_starts_at_the_indexed_batch(
    big_log: Path, spy: Spy
) -> None:
    with PartitionLog(big_log, index_interval_bytes=INTERVAL, verify_on_open=False) as log:
        spy.preads.clear()
        assert log.offset_for_timestamp(1000 + 800) == 8_000
    batch_pos = 800 * batch_size(big_log)
    found = spy.lookups[-1][1]
    assert batch_pos - INTERVAL - batch_size(big_log) <= found <= batch_pos
    assert min(pos for pos, _ in spy.preads) == found
    assert spy.bytes_read <= 256 * 1024 + INTERVAL, f"read {spy.bytes_read} bytes for one seek"


def test_a_raw_read_deep_in_a_segment_starts_at_the_indexed_batch(big_log: Path, spy: Spy) -> None:
    """read_raw (replication, the HTTP log-read API) seeks through the same index."""
    target = 7_000 + 5
    with PartitionLog(big_log, index_interval_bytes=INTERVAL, verify_on_open=False) as log:
        spy.preads.clear()
        raw = log.read_raw(target, 4096)
    assert raw.offset == target and raw.count >= 1
    batch_pos = 700 * batch_size(big_log)
    assert min(pos for pos, _ in spy.preads) >= batch_pos - INTERVAL - batch_size(big_log)
    # The header lookup's read-ahead, then the batches up to the next indexed position.
    limit = 256 * 1024 + 2 * INTERVAL + batch_size(big_log)
    assert spy.bytes_read <= limit, f"read {spy.bytes_read} bytes for one batch"
