"""PartitionLog: append, group commit, read, seek, epochs, truncate, retention, fsync."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqpy.errors import ConfigError, StorageError
from nsqpy.storage import Entry, OffsetOutOfRange, PartitionLog, Record, SyncPolicy
from nsqpy.storage.records import BATCH_SIZE, RECORD_SIZE, extension_bytes
from nsqpy.testing import FakeClock

from .helpers import segments


def body(i: int, size: int = 20) -> bytes:
    return (b"%08d" % i * (size // 8 + 1))[:size]


def test_append_returns_first_offsets_and_nothing_is_readable_before_flush(tmp_path: Path) -> None:
    with PartitionLog(tmp_path) as log:
        assert log.append_bodies([b"a", b"b"]) == 0
        assert log.append([Entry(b"c")]) == 2
        assert log.high_watermark == 3 and log.flushed_offset == 0 and log.pending()
        assert log.read(0, 10) == []
        assert log.flush() == 3
        assert not log.pending()
        assert [r.body for r in log.read(0, 10)] == [b"a", b"b", b"c"]
        assert [r.offset for r in log.read(1, 10)] == [1, 2]
        assert log.read(3, 10) == []


def test_record_fields_round_trip(tmp_path: Path, clock: FakeClock) -> None:
    with PartitionLog(tmp_path, clock=clock) as log:
        log.set_epoch(3)
        log.append([
            Entry(b"x", timestamp=5, deliver_at=9, flags=7, trace_id=2**64 - 1,
                  partition_key=b"user-1", headers=b'{"k":"v"}'),
            Entry(b"", trace_id=1),
            Entry(b"plain"),
        ])  # fmt: skip
        log.flush()
        recs = log.read(0, 10)
    assert recs[0] == Record(0, 5, 9, 7, b"x", 2**64 - 1, b"user-1", b'{"k":"v"}', 3)
    assert recs[1] == Record(1, clock.now, 0, 0, b"", 1, b"", b"", 3)
    assert recs[2] == Record(2, clock.now, 0, 0, b"plain", epoch=3)


def test_flush_is_one_write_syscall_for_everything_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_pwrite, real_pwritev, real_write = os.pwrite, os.pwritev, os.write

    def count(name: str, fn):
        def wrapper(*a):
            calls.append(name)
            return fn(*a)

        return wrapper

    with PartitionLog(tmp_path) as log:
        log.append_bodies([b"first"])
        log.flush()  # (the first flush also makes the offset reservation durable)
        monkeypatch.setattr(os, "pwrite", count("pwrite", real_pwrite))
        monkeypatch.setattr(os, "pwritev", count("pwritev", real_pwritev))
        monkeypatch.setattr(os, "write", count("write", real_write))
        for i in range(50):
            log.append_bodies([body(i)])
        log.append([Entry(b"e", trace_id=1)])
        assert calls == []  # append is no syscall
        log.flush()
        assert calls == ["pwritev"]
        calls.clear()
        log.append_bodies([b"one"])
        log.flush()
        assert calls == ["pwrite"]  # one batch, one buffer
        calls.clear()
        log.append_bodies([b"a", b"bb", b"ccc", b"dddd", b"eeeee"])  # mixed sizes
        log.flush()
        assert calls in (["pwrite"], ["pwritev"])  # one buffer (C encoder) or two (Python)
        monkeypatch.undo()
        assert len(log.read(0, 100)) == 58


def test_segment_roll_names_files_by_first_offset(tmp_path: Path) -> None:
    with PartitionLog(tmp_path, segment_bytes=1000) as log:
        for i in range(40):
            log.append_bodies([body(i, 100)])
            log.flush()
        names = [p.name for p in segments(tmp_path)]
        assert names == sorted(names) and len(names) > 3
        assert names[0] == "00000000000000000000.log"
        bases = [int(n[:-4]) for n in names]
        got = log.read_frames(0, 100, 1 << 30)
    assert [f[0] for f in got] == list(range(40))
    assert [f[4] for f in got] == [body(i, 100) for i in range(40)]
    # every segment starts with the record its name says
    with PartitionLog(tmp_path) as log:
        for b in bases:
            assert log.read(b, 1)[0].offset == b


def test_a_segment_roll_inside_one_flush_writes_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PartitionLog(tmp_path, segment_bytes=2000) as log:
        log.append_bodies([b"x" * 100] * 10)
        log.flush()
        calls: list[str] = []
        real, real1 = os.pwritev, os.pwrite

        def pwritev(fd: int, bufs: list[bytes], at: int) -> int:
            calls.append("v")
            return real(fd, bufs, at)

        def pwrite(fd: int, buf: bytes, at: int) -> int:
            calls.append("1")
            return real1(fd, buf, at)

        monkeypatch.setattr(os, "pwritev", pwritev)
        monkeypatch.setattr(os, "pwrite", pwrite)
        for _ in range(4):
            log.append_bodies([b"y" * 100] * 3)
        log.flush()
        assert calls == ["1", "v"]  # one batch fills the old segment, three go to the new one
        monkeypatch.undo()
        assert len(segments(tmp_path)) == 2
        assert [f[0] for f in log.read_frames(0, 100)] == list(range(22))


def test_read_bounds_by_count_and_bytes_but_returns_at_least_one(tmp_path: Path) -> None:
    with PartitionLog(tmp_path) as log:
        log.append_bodies([b"a" * 1000] * 10)
        log.flush()
        assert len(log.read(0, 3)) == 3
        assert len(log.read(0, 100, max_bytes=1)) == 1
        per = 1000 + RECORD_SIZE - 4
        assert len(log.read(0, 100, max_bytes=per * 4)) == 4
        assert len(log.read_frames(2, 100, max_bytes=per * 4 + 10)) == 4
        assert log.read(0, 0) == []


def test_read_below_low_watermark_raises_with_bounds(tmp_path: Path) -> None:
    with PartitionLog(tmp_path, segment_bytes=500) as log:
        for i in range(30):
            log.append_bodies([body(i, 100)])
            log.flush()
        low = log.retain(20, 0)
        assert low > 0
        with pytest.raises(OffsetOutOfRange) as info:
            log.read(0, 1)
        assert info.value.low == low and info.value.high == 30
        assert log.read(low, 1)[0].offset == low


def test_random_access_and_sequential_reads_agree(tmp_path: Path) -> None:
    with PartitionLog(tmp_path, segment_bytes=20_000, index_interval_bytes=512) as log:
        n = 0
        for size in [1, 7, 200, 3, 1, 50, 9, 120]:
            log.append_bodies([body(n + k, 30) for k in range(size)])
            n += size
            log.flush()
        seq = []
        off = 0
        while off < n:
            got = log.read_frames(off, 13)
            seq += got
            off = got[-1][0] + 1
        assert [f[0] for f in seq] == list(range(n))
        for off in [n - 1, 0, 5, 250, 17, 333, 100]:
            assert log.read(off, 1)[0].body == body(off, 30)


def test_offset_for_timestamp_finds_first_at_or_after(tmp_path: Path) -> None:
    with PartitionLog(tmp_path, segment_bytes=3000, index_interval_bytes=200) as log:
        for i in range(100):
            log.append_bodies([body(i)], timestamp=1000 + 10 * i)
            log.flush()
        assert log.offset_for_timestamp(0) == 0
        assert log.offset_for_timestamp(1000) == 0
        assert log.offset_for_timestamp(1001) == 1
        assert log.offset_for_timestamp(1500) == 50
        assert log.offset_for_timestamp(1995) == 100
        assert log.offset_for_timestamp(10**19) == log.flushed_offset


def test_index_sidecar_is_written_and_rebuilt_when_missing_or_stale(tmp_path: Path) -> None:
    with PartitionLog(tmp_path, segment_bytes=2000, index_interval_bytes=300) as log:
        for i in range(60):
            log.append_bodies([body(i, 60)])
            log.flush()
        entries = log.stats()["index_entries"]
    indexes = sorted(tmp_path.glob("*.index"))
    assert len(indexes) == len(segments(tmp_path))
    indexes[0].unlink()
    indexes[1].write_bytes(b"junk")
    with PartitionLog(tmp_path, index_interval_bytes=300, verify_on_open=False) as log:
        assert log.stats()["index_entries"] == entries
        assert [f[0] for f in log.read_frames(0, 100)] == list(range(60))
    assert len(sorted(tmp_path.glob("*.index"))) == len(segments(tmp_path))


def test_reopen_keeps_everything_and_continues_offsets(tmp_path: Path) -> None:
    with PartitionLog(tmp_path, segment_bytes=1000) as log:
        for i in range(25):
            log.append_bodies([body(i, 50)])
            log.flush()
    with PartitionLog(tmp_path, segment_bytes=1000) as log:
        assert (log.low_watermark, log.high_watermark, log.durable_offset) == (0, 25, 25)
        assert log.append_bodies([b"next"]) == 25
        log.flush()
        assert log.read(25, 1)[0].body == b"next"


def test_epochs_are_recorded_and_survive_reopen(tmp_path: Path) -> None:
    with PartitionLog(tmp_path, segment_bytes=600) as log:
        log.append_bodies([b"a"] * 3)
        log.set_epoch(2)
        log.append_bodies([b"b"] * 3)
        log.set_epoch(2)
        log.append_bodies([b"c"])
        log.set_epoch(5)
        log.flush()
        assert log.epochs() == [(0, 0), (2, 3)]  # epoch 5 has no record yet
        log.append_bodies([b"d"] * 2)
        log.flush()
        assert log.epochs() == [(0, 0), (2, 3), (5, 7)]
        assert [r.epoch for r in log.read(0, 10)] == [0, 0, 0, 2, 2, 2, 2, 5, 5]
        with pytest.raises(StorageError):
            log.set_epoch(4)
    with PartitionLog(tmp_path) as log:
        assert log.epochs() == [(0, 0), (2, 3), (5, 7)]
        assert log.epoch == 5
    (tmp_path / "epochs").unlink()
    with PartitionLog(tmp_path) as log:  # rebuilt from the batches of the tail segment
        assert log.epochs() == [(0, 0), (2, 3), (5, 7)]


@pytest.mark.parametrize("cut_at", [0, 1, 3, 4, 5, 9, 12])
def test_truncate_drops_the_tail_even_inside_a_batch(tmp_path: Path, cut_at: int) -> None:
    with PartitionLog(tmp_path, segment_bytes=400) as log:
        log.append_bodies([body(i) for i in range(4)])
        log.set_epoch(1)
        log.append_bodies([body(i) for i in range(4, 10)])
        log.flush()
        log.set_epoch(2)
        log.append_bodies([body(i) for i in range(10, 13)])  # pending, not flushed
        log.truncate(cut_at)
        assert log.high_watermark == log.flushed_offset == cut_at
        assert log.durable_offset <= cut_at
        assert all(first < cut_at for _, first in log.epochs())
        assert [r.body for r in log.read(0, 100)] == [body(i) for i in range(cut_at)]
        log.append_bodies([b"new"])
        log.flush()
    with PartitionLog(tmp_path, segment_bytes=400) as log:
        recs = log.read(0, 100)
        assert [r.offset for r in recs] == list(range(cut_at + 1))
        assert recs[-1].body == b"new" and recs[-1].epoch == 2


def test_retention_waits_for_cursors_and_policy(tmp_path: Path, clock: FakeClock) -> None:
    with PartitionLog(tmp_path, segment_bytes=500, clock=clock) as log:
        for i in range(40):
            log.append_bodies([body(i, 100)])
            log.flush()
        n = len(segments(tmp_path))
        assert log.retain(None, clock.now) == 0 and len(segments(tmp_path)) == n
        low = log.retain(10, clock.now)
        assert 0 < low <= 10
        assert log.read(low, 1)[0].offset == low
        assert log.retain(10**9, clock.now) == log.stats()["low_watermark"]
        assert len(segments(tmp_path)) == 1  # the active segment stays
        assert len(list(tmp_path.glob("*.index"))) <= 1


def test_retention_by_age_and_bytes_keeps_confirmed_data_until_allowed(
    tmp_path: Path, clock: FakeClock
) -> None:
    with PartitionLog(tmp_path / "age", segment_bytes=500, retention_ms=1000, clock=clock) as log:
        for i in range(20):
            log.append_bodies([body(i, 100)])
            log.flush()
        assert log.retain(20, clock.now) == 0  # confirmed, but young
        clock.advance_ms(1001)
        assert log.retain(20, clock.now) > 0
    with PartitionLog(tmp_path / "size", segment_bytes=500, retention_bytes=1500) as log:
        for i in range(20):
            log.append_bodies([body(i, 100)])
            log.flush()
        assert log.retain(0, 0) == 0  # not confirmed: kept whatever the size
        log.retain(20, 0)
        assert 1500 - 500 <= log.stats()["bytes"] <= 1500 + 500


def test_retention_set_later_applies_from_then_on(tmp_path: Path, clock: FakeClock) -> None:
    with PartitionLog(tmp_path / "later", segment_bytes=500, clock=clock) as log:
        log.set_retention(60_000)  # a cluster topic's retention days, learned from etcd
        for i in range(20):
            log.append_bodies([body(i, 100)])
            log.flush()
        clock.advance_ms(1001)
        assert log.retain(20, clock.now) == 0  # confirmed, but kept for a minute now
        log.set_retention(0)  # back to the node's default: confirmed data goes
        assert log.retain(20, clock.now) > 0


def test_sync_due_per_policy(tmp_path: Path, clock: FakeClock) -> None:
    every = PartitionLog(tmp_path / "n", sync=SyncPolicy(3, 0), clock=clock)
    every.append_bodies([b"a", b"b"])
    every.flush()
    assert not every.sync_due(clock.now)
    every.append_bodies([b"c"])
    assert not every.sync_due(clock.now)  # pending data does not count
    every.flush()
    assert every.sync_due(clock.now)
    assert every.sync() == 3 and not every.sync_due(clock.now)
    timed = PartitionLog(tmp_path / "t", sync=SyncPolicy(0, 100), clock=clock)
    timed.append_bodies([b"a"])
    timed.flush()
    assert not timed.sync_due(clock.now + 99_000_000)
    assert timed.sync_due(clock.now + 100_000_000)
    always = PartitionLog(tmp_path / "a", sync=SyncPolicy.parse("always"), clock=clock)
    assert not always.sync_due(clock.now)
    always.append_bodies([b"a"])
    always.flush()
    assert always.sync_due(clock.now) and always.durable_offset == 0
    assert always.sync() == 1 and always.durable_offset == 1
    for log in (every, timed, always):
        log.close()


def test_sync_from_a_thread_while_the_loop_appends_and_reads(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, segment_bytes=4000, sync=SyncPolicy.parse("always"))
    stop = threading.Event()
    errors: list[BaseException] = []
    durable_seen: list[int] = []

    def syncer() -> None:
        try:
            while not stop.is_set():
                durable_seen.append(log.sync())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=syncer)
    t.start()
    try:
        for i in range(300):
            log.append_bodies([body(i, 50)] * 3)
            log.flush()
            if i % 7 == 0:
                log.read_frames(max(0, log.flushed_offset - 50), 50)
            if i % 50 == 0:
                log.retain(log.flushed_offset // 2, 0)
    finally:
        stop.set()
        t.join()
    assert not errors
    assert durable_seen == sorted(durable_seen)
    assert log.sync() == 900 == log.durable_offset
    low = log.low_watermark
    assert [f[0] for f in log.read_frames(low, 10_000)] == list(range(low, 900))
    log.close()


def test_closed_log_refuses_work(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path)
    log.close()
    log.close()
    with pytest.raises(StorageError):
        log.append_bodies([b"x"])
    with pytest.raises(StorageError):
        log.read(0, 1)


@pytest.mark.parametrize(
    ("text", "policy"),
    [
        ("always", SyncPolicy(0, 0, True)),
        ("every:2500", SyncPolicy(2500, 0)),
        ("interval:2000ms", SyncPolicy(0, 2000)),
        ("interval:2s", SyncPolicy(0, 2000)),
        ("every:2500,interval:2s", SyncPolicy(2500, 2000)),
        ("none", SyncPolicy(0, 0)),
    ],
)
def test_sync_policy_parse(text: str, policy: SyncPolicy) -> None:
    assert SyncPolicy.parse(text) == policy
    assert SyncPolicy.parse(str(policy)) == policy


@pytest.mark.parametrize(
    "junk", ["", "sometimes", "every:", "every:-1", "every:0", "interval:2h", "interval:x"]
)
def test_sync_policy_rejects_junk(junk: str) -> None:
    with pytest.raises(ConfigError):
        SyncPolicy.parse(junk)


# -- properties ------------------------------------------------------------------------

batches = st.lists(
    st.lists(st.binary(max_size=300), min_size=1, max_size=20), min_size=1, max_size=15
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=batches, flush_every=st.integers(1, 4), seg=st.sampled_from([300, 2000, 1 << 20]))
def test_property_append_read_recover(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[bytes]], flush_every: int, seg: int
) -> None:
    d = tmp_path_factory.mktemp("prop")
    expect: list[bytes] = []
    with PartitionLog(d, segment_bytes=seg, index_interval_bytes=100) as log:
        for i, batch in enumerate(batches):
            assert log.append_bodies(batch, timestamp=1 + i) == len(expect)
            expect += batch
            if i % flush_every == 0:
                log.flush()
    with PartitionLog(d, segment_bytes=seg, index_interval_bytes=100) as log:
        assert log.high_watermark == len(expect)
        assert [f[4] for f in log.read_frames(0, 10**6, 1 << 40)] == expect
        for off in range(0, len(expect), 7):
            assert log.read(off, 1)[0].body == expect[off]
        firsts: list[int] = []
        n = 0
        for batch in batches:
            firsts.append(n)
            n += len(batch)
        for i, first in enumerate(firsts):
            assert log.offset_for_timestamp(1 + i) == first


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sizes=st.lists(st.integers(1, 30), min_size=1, max_size=12), data=st.data())
def test_property_truncate_then_append(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], data: st.DataObject
) -> None:
    d = tmp_path_factory.mktemp("trunc")
    total = sum(sizes)
    cut_at = data.draw(st.integers(0, total))
    with PartitionLog(d, segment_bytes=700) as log:
        n = 0
        for s in sizes:
            log.append_bodies([body(n + k) for k in range(s)])
            n += s
            log.flush()
        log.truncate(cut_at)
        log.append_bodies([b"after"])
    with PartitionLog(d, segment_bytes=700) as log:
        got = log.read_frames(0, 10**6, 1 << 40)
        assert [f[4] for f in got] == [body(i) for i in range(cut_at)] + [b"after"]


def test_batch_header_size_is_documented() -> None:
    assert BATCH_SIZE == 40 and RECORD_SIZE == 38


@pytest.mark.parametrize(
    "entries",
    [
        [Entry(b"%02d" % i * 4) for i in range(9)],  # same size, plain: parsed in bulk
        # same record length, but some carry an extension in place of body bytes
        [Entry(b"x" * 18, trace_id=i) if i % 3 == 0 else Entry(b"y" * 28) for i in range(9)],
        # the batch length is what 9 same-size records would give, but the sizes differ
        [Entry(b"z" * (20 + (i % 3) - 1)) for i in range(9)],
    ],
)
def test_whole_batch_reads_agree_with_record_by_record_reads(
    tmp_path: Path, entries: list[Entry]
) -> None:
    with PartitionLog(tmp_path) as log:
        log.append(entries)
        log.append(entries)
        log.flush()
        whole = log.read(0, 100)
        frames = log.read_frames(0, 100)
        one_by_one = [log.read(i, 1)[0] for i in range(18)]
    assert whole == one_by_one
    assert frames == [
        (
            r.offset,
            r.timestamp,
            r.deliver_at,
            r.flags,
            r.body,
            extension_bytes(r.trace_id, r.partition_key, r.headers),
        )
        for r in whole
    ]
    assert [r.body for r in whole] == [e.body for e in entries] * 2
    assert [r.trace_id for r in whole] == [e.trace_id for e in entries] * 2
