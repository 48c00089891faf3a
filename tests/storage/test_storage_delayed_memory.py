"""The SQLite delayed store and the in-memory log."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nsqpy.errors import StorageError
from nsqpy.storage import DelayedEntry, DelayedStore, Entry, MemoryLog, OffsetOutOfRange
from nsqpy.testing import FakeClock


def test_delayed_store_orders_due_entries_and_survives_restart(tmp_path: Path) -> None:
    path = tmp_path / "p0" / "delayed.sqlite"
    s = DelayedStore(path)
    s.put("ch", 7, 300, 1)
    s.put("ch", 3, 100, 2)
    s.put("ch", 5, 100, 1)
    s.put("other", 1, 50, 4)
    assert s.due("ch", 99, 10) == []
    assert s.due("ch", 100, 10) == [DelayedEntry("ch", 3, 100, 2), DelayedEntry("ch", 5, 100, 1)]
    assert s.due("ch", 1000, 2) == s.due("ch", 100, 10)  # limit, and not removed
    assert s.next_due("ch") == 100 and s.next_due("none") is None
    s.put("ch", 3, 400, 3)  # upsert by (channel, offset)
    assert s.get("ch", 3) == DelayedEntry("ch", 3, 400, 3)
    assert s.count("ch") == 3 and s.channels() == ["ch", "other"]
    assert s.min_offset() == 1
    s.close()
    s = DelayedStore(path)
    assert [e.offset for e in s.due("ch", 10**18, 10)] == [5, 7, 3]
    assert s.remove("ch", 5) and not s.remove("ch", 5)
    assert s.remove_many("ch", [7, 3, 99]) == 2
    assert s.count("ch") == 0
    assert s.clear("other") == 1 and s.channels() == [] and s.min_offset() is None
    s.close()


def test_delayed_store_is_wal_and_put_many_is_one_transaction(tmp_path: Path) -> None:
    path = tmp_path / "d.sqlite"
    s = DelayedStore(path)
    s.put_many(DelayedEntry("c", i, 1000 - i, 0) for i in range(100))
    assert s.count("c") == 100
    assert [e.offset for e in s.due("c", 905, 100)] == [99, 98, 97, 96, 95]
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    with pytest.raises(StorageError):
        s.put_many([DelayedEntry("c", 1000, 1, 0), DelayedEntry("c", 1001, 1, [0])])  # type: ignore[arg-type]
    assert s.get("c", 1000) is None  # nothing of a failed batch is kept
    s.close()


def test_memory_log_reads_and_drops_the_newest_on_overflow() -> None:
    clock = FakeClock()
    log = MemoryLog(5, clock=clock)
    assert log.append_bodies([b"a", b"b", b"c"]) == 0
    assert log.flush() == 3 and not log.pending() and not log.sync_due(clock.now)
    assert log.durable_offset == log.high_watermark == log.sync() == 3
    # Room for two more: "f" and "g" are dropped and never get an offset; the oldest stay.
    assert log.append([Entry(b"d", trace_id=9), Entry(b"e"), Entry(b"f"), Entry(b"g")]) == 3
    assert (log.low_watermark, log.high_watermark, log.dropped) == (0, 5, 2)
    recs = log.read(0, 10)
    assert [r.body for r in recs] == [b"a", b"b", b"c", b"d", b"e"]
    assert recs[3].trace_id == 9 and recs[0].timestamp == clock.now
    assert len(log.read(0, 10, max_bytes=2)) == 2 and len(log.read(0, 10, max_bytes=0)) == 1
    assert log.read_frames(4, 10) == [(4, clock.now, 0, 0, b"e", b"")]
    assert log.read(5, 10) == []
    assert log.append_bodies([b"h"]) == 5 and log.dropped == 3  # still full
    # Once its readers are done with the front, there is room again.
    assert log.retain(2, 0) == 2
    with pytest.raises(OffsetOutOfRange) as info:
        log.read(1, 10)
    assert (info.value.low, info.value.high) == (2, 5)
    assert log.append_bodies([b"i", b"j", b"k"]) == 5
    assert [r.body for r in log.read(2, 10)] == [b"c", b"d", b"e", b"i", b"j"]
    assert log.dropped == 4


def test_memory_log_capacity_zero_keeps_nothing_and_none_is_unbounded() -> None:
    log = MemoryLog(0)
    assert log.append_bodies([b"a", b"b"]) == 0
    assert log.append_bodies([b"c"]) == 0
    assert (log.low_watermark, log.high_watermark, log.dropped) == (0, 0, 3)
    assert log.read(0, 10) == []
    unbounded = MemoryLog(None)
    unbounded.append_bodies([b"x"] * 20000)
    assert (unbounded.high_watermark, unbounded.dropped) == (20000, 0)


def test_memory_log_seek_truncate_retain_epochs() -> None:
    log = MemoryLog(100)
    for i in range(10):
        log.append_bodies([b"x"], timestamp=100 + i)
    assert log.offset_for_timestamp(105) == 5 and log.offset_for_timestamp(1000) == 10
    log.set_epoch(2)
    log.append_bodies([b"y"])
    assert log.epochs() == [(0, 0), (2, 10)]
    log.truncate(8)
    assert log.high_watermark == 8 and log.epochs() == [(0, 0)]
    assert log.retain(None, 0) == 0
    assert log.retain(4, 0) == 4 and log.read(4, 1)[0].offset == 4
    assert log.stats()["low_watermark"] == 4
    for _ in range(3000):  # compaction of the head keeps offsets right
        log.append_bodies([b"z"])
        log.retain(log.high_watermark - 3, 0)
    assert [r.offset for r in log.read(log.low_watermark, 10)] == list(range(3005, 3008))


def test_memory_log_read_raw_encodes_log_batches_per_epoch() -> None:
    log = MemoryLog(100, clock=FakeClock())
    log.append_bodies([b"a", b"b"], timestamp=5)
    log.set_epoch(3)
    log.append([Entry(b"c", timestamp=6, trace_id=1, partition_key=b"k", headers=b"{}")])
    raw = log.read_raw(1)
    assert (raw.offset, raw.count) == (1, 2)
    assert [(h.base, h.epoch, h.n_records) for h, _ in raw.batches()] == [(1, 0, 1), (2, 3, 1)]
    assert raw.records() == log.read(1, 10)
    assert log.read_raw(0, max_bytes=1).count == 1
    assert log.read_raw(3).count == 0
    small = MemoryLog(1)
    small.append_bodies([b"a", b"b"])  # "b" is dropped
    small.retain(1, 0)
    with pytest.raises(OffsetOutOfRange):
        small.read_raw(0)


def test_a_durable_delayed_store_fsyncs_every_commit(tmp_path: Path) -> None:
    plain = DelayedStore(tmp_path / "plain.sqlite")
    durable = DelayedStore(tmp_path / "durable.sqlite", durable=True)
    try:
        assert (plain.synchronous(), durable.synchronous()) == ("NORMAL", "FULL")
        durable.put("c", 7, 100, 1)
        assert durable.get("c", 7) == DelayedEntry("c", 7, 100, 1)
    finally:
        plain.close()
        durable.close()
