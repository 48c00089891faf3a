"""The log's memory does not grow with its size (issue 16, point 5).

A sealed segment's sparse index lives in its sidecar file and is loaded only while seeks
use it (``LOADED_INDEXES`` bounds how many are); its descriptor is open only while used
(``OPEN_FILES``). Measured with tracemalloc on a log whose index is made dense on purpose."""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.storage import PartitionLog
from nsqpy.storage.budget import LOADED_INDEXES, OPEN_FILES

SEGMENT = 64 * 1024
INTERVAL = 64  # an index entry every batch: ~1000 per segment


def write_log(directory: Path, batches: int) -> int:
    with PartitionLog(directory, segment_bytes=SEGMENT, index_interval_bytes=INTERVAL) as log:
        for i in range(batches):
            log.append_bodies([b"%08d" % i * 4])
            if i % 16 == 15:
                log.flush()
        return log.stats()["segments"]


# Only what the storage code's own lines allocated counts (the innermost Python frame):
# not other threads of the test process, and not the interpreter's shared tables that a
# call into the standard library happens to grow meanwhile (in a full run, pathlib's
# interning of segment names resized the interned-strings dict here: one 3.8 MB block).
STORAGE = [tracemalloc.Filter(True, "*/nsqpy/storage/*", all_frames=False)]


@pytest.fixture(autouse=True)
def default_budgets() -> Iterator[None]:
    """The budgets as a fresh process has them (an nsqd started in-process by an earlier
    test sizes OPEN_FILES from the descriptor limit), restored after."""
    saved = OPEN_FILES.capacity, LOADED_INDEXES.capacity
    OPEN_FILES.set_capacity(1024)
    LOADED_INDEXES.set_capacity(32)
    try:
        yield
    finally:
        OPEN_FILES.set_capacity(saved[0])
        LOADED_INDEXES.set_capacity(saved[1])


TOP: list[str] = []  # where the storage code's memory was, at the last measure
OPENED_TOP: list[str] = []  # the same, just after the last open


def storage_bytes() -> int:
    gc.collect()  # (garbage an earlier test left uncollected is not the log's)
    snapshot = tracemalloc.take_snapshot().filter_traces(STORAGE)
    TOP[:] = [
        f"{stat.size} B in {stat.count} blocks at " + " < ".join(map(str, stat.traceback))
        for stat in snapshot.statistics("traceback")[:4]
    ]
    return sum(stat.size for stat in snapshot.statistics("filename"))


def open_and_seek(directory: Path, seeks: int) -> tuple[int, int, PartitionLog]:
    """(bytes the storage code holds after opening, after random seeks over the whole
    log, the open log)."""
    tracemalloc.start(4)
    try:
        log = PartitionLog(directory, segment_bytes=SEGMENT, index_interval_bytes=INTERVAL)
        opened = storage_bytes()
        OPENED_TOP[:] = TOP
        rng = random.Random(7)
        for _ in range(seeks):
            offset = rng.randrange(log.low_watermark, log.high_watermark)
            assert log.read_frames(offset, 1)[0][0] == offset
        sought = storage_bytes()
    finally:
        tracemalloc.stop()
    return opened, sought, log


def test_index_memory_is_bounded_whatever_the_size_of_the_log(tmp_path: Path) -> None:
    small, large = tmp_path / "small", tmp_path / "large"
    assert write_log(small, 2_000) <= 5
    segments = write_log(large, 80_000)  # ~10 MB of log in ~135 segments, ~80k index entries
    assert segments > 3 * LOADED_INDEXES.capacity
    small_opened, _, small_log = open_and_seek(small, 200)
    large_opened, large_sought, large_log = open_and_seek(large, 200)
    opened_top = list(OPENED_TOP)
    try:
        # Per segment only a few hundred bytes of bookkeeping stay (never its index).
        per_segment = (large_opened - small_opened) / segments
        assert per_segment < 2_000, (per_segment, opened_top)
        # Seeks load at most LOADED_INDEXES.capacity indexes: ~24 KiB each here.
        assert large_sought - large_opened < LOADED_INDEXES.capacity * 40_000
        assert len(LOADED_INDEXES) <= LOADED_INDEXES.capacity
        assert large_log.stats()["index_entries"] < (LOADED_INDEXES.capacity + 1) * 1_200
        assert len(OPEN_FILES) <= OPEN_FILES.capacity
    finally:
        small_log.close()
        large_log.close()
