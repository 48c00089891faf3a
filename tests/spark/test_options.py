"""The pure parts of nsqpy.spark: options, offset planning, the publisher. No Spark, no network."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqpy.errors import ConfigError
from nsqpy.spark.cli import summarize
from nsqpy.spark.options import (
    EARLIEST,
    OffsetSpec,
    from_offset_dict,
    sink_options,
    source_options,
    split_limit,
    to_offset_dict,
)
from nsqpy.spark.pipelines import progress_line
from nsqpy.spark.plan import DataLoss, OffsetRange, PartitionInfo, StreamPlanner, split_ranges
from nsqpy.spark.publish import BadRow, Publisher

BASE = {"nsqd": "127.0.0.1:4151", "topic": "events"}


def test_source_defaults_follow_the_kafka_source() -> None:
    batch = source_options(BASE, streaming=False)
    assert batch.topics == ("events",) and batch.nsqd == ("127.0.0.1:4151",)
    assert batch.starting == OffsetSpec("earliest") and batch.ending == OffsetSpec("latest")
    assert batch.fail_on_data_loss and batch.max_offsets_per_trigger is None
    stream = source_options(
        {
            "NSQD": "a:1, b:2",
            "Topics": "x,y",
            "MAXOFFSETSPERTRIGGER": "7",
            "failondataloss": "False",
        },
        streaming=True,
    )
    assert stream.starting == OffsetSpec("latest") and stream.nsqd == ("a:1", "b:2")
    assert stream.topics == ("x", "y") and stream.max_offsets_per_trigger == 7
    assert not stream.fail_on_data_loss
    spec = source_options(
        {**BASE, "startingOffsets": '{"events": {"0": 5, "1": -2, "h:1/0": 9}}'}, streaming=False
    )
    assert spec.starting.offsets == {
        ("events", "", 0): 5,
        ("events", "", 1): EARLIEST,
        ("events", "h:1", 0): 9,
    }
    assert spec.starting.lookup(("events", "h:1", 0)) == 9  # this node's partition 0
    assert spec.starting.lookup(("events", "h:2", 0)) == 5  # "0": partition 0 of any node
    assert spec.starting.lookup(("events", "h:2", 2)) is None


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"topic": "t"}, False, "exactly one of the options nsqd"),
        ({**BASE, "lookupd": "l:4161"}, False, "exactly one of the options nsqd"),
        ({"nsqd": "a:1"}, False, "option topic is required"),
        ({"nsqd": "a:1", "topic": "a b"}, False, "not a valid topic name"),
        (
            {"nsqd": "a:1", "topic": "a", "topics": "b"},
            False,
            "either option topic or option topics",
        ),
        ({"nsqd": "a:1", "topic": "a,a"}, False, "topic given twice"),
        ({**BASE, "endingOffsets": "latest"}, True, "for batch reads only"),
        ({**BASE, "endingOffsets": "earliest"}, False, "cannot be earliest"),
        ({**BASE, "startingOffsets": "[1]"}, False, "must be an object"),
        ({**BASE, "startingOffsets": '{"events": 3}'}, False, "must be an object"),
        ({**BASE, "startingOffsets": '{"events": {"x": 3}}'}, False, "is not a partition"),
        ({**BASE, "startingOffsets": '{"events": {"1024": 3}}'}, False, "is not a partition"),
        ({**BASE, "startingOffsets": '{"events": {"/0": 3}}'}, False, "is not a partition"),
        ({**BASE, "startingOffsets": '{"events": {"h:1/x": 3}}'}, False, "is not a partition"),
        ({**BASE, "startingOffsets": '{"events": {"0": -3}}'}, False, "must be an integer >= 0"),
        ({**BASE, "startingOffsets": '{"events": {"0": true}}'}, False, "must be an integer >= 0"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "must be >= 1"),
        ({**BASE, "maxOffsetsPerTrigger": "lots"}, True, "is not an integer"),
        ({**BASE, "failOnDataLoss": "maybe"}, False, "is not a boolean"),
    ],
)
def test_bad_source_options(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        source_options(options, streaming=streaming)


def test_sink_options() -> None:
    opts = sink_options({"lookupd": "l:4161", "mpubMaxBytes": "1024"})
    assert opts.topic is None and opts.lookupd == ("l:4161",) and opts.mpub_max_bytes == 1024
    with pytest.raises(ConfigError, match="one default topic"):
        sink_options({"nsqd": "a:1", "topic": "a,b"})


LAGS = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["n:1", "n:2"]), st.integers(0, 20)),
    st.integers(0, 10_000),
    max_size=12,
)


@given(lags=LAGS, limit=st.integers(1, 50_000))
def test_split_limit_shares_in_proportion(
    lags: dict[tuple[str, str, int], int], limit: int
) -> None:
    shares = split_limit(lags, limit)
    total = sum(lags.values())
    assert set(shares) == set(lags)
    assert sum(shares.values()) == min(limit, total)
    for key, lag in lags.items():
        assert 0 <= shares[key] <= lag
        if total > limit:
            assert shares[key] >= lag * limit // total


@given(
    offsets=st.dictionaries(
        st.tuples(
            st.sampled_from(["t", "u"]),
            st.sampled_from(["127.0.0.1:4151", "h:2", "[::1]:4151"]),
            st.integers(0, 1023),
        ),
        st.integers(0, 2**53),
    )
)
def test_offset_dicts_round_trip(offsets: dict[tuple[str, str, int], int]) -> None:
    doc = to_offset_dict(offsets)
    assert from_offset_dict(json.loads(json.dumps(doc))) == offsets
    for parts in doc.values():
        assert all(name.rpartition("/")[0] for name in parts), parts  # keyed by node
    with pytest.raises(ConfigError, match="bad offset"):
        from_offset_dict({"t": {"0": 1}})  # a checkpoint always names the node


def test_split_ranges_covers_the_same_offsets() -> None:
    ranges = [
        OffsetRange("t", 0, "n:1", 10, 110),
        OffsetRange("t", 1, "n:1", 5, 8),
        OffsetRange("t", 2, "n:1", 4, 4),
    ]
    parts = split_ranges(ranges, 5)
    assert len(parts) == 5
    covered = sorted((r.partition, o) for r in parts for o in range(r.start, r.end))
    assert covered == sorted([(0, o) for o in range(10, 110)] + [(1, o) for o in range(5, 8)])
    assert split_ranges([OffsetRange("t", 0, "n:1", EARLIEST, 50)], 4) == [
        OffsetRange("t", 0, "n:1", EARLIEST, 50)
    ]


def planner(infos: dict[tuple[str, str, int], PartitionInfo], **options: str) -> StreamPlanner:
    plan = StreamPlanner(source_options({**BASE, **options}, streaming=True))
    plan.infos = dict(infos)

    def refresh() -> dict[tuple[str, str, int], PartitionInfo]:
        plan.infos = dict(infos)
        return plan.infos

    plan.refresh = refresh  # type: ignore[method-assign]
    return plan


def info(partition: int, low: int, high: int, node: str = "n:1") -> PartitionInfo:
    return PartitionInfo("events", node, partition, node, low, high)


def test_stream_planner_bounds_batches_and_finds_new_partitions() -> None:
    infos = {("events", "n:1", 0): info(0, 0, 100), ("events", "n:1", 1): info(1, 20, 60)}
    plan = planner(infos)
    start = {"events": {"n:1/0": 10}}
    # a new partition is read from its earliest offset
    assert plan.latest(start, None) == {"events": {"n:1/0": 100, "n:1/1": 60}}
    assert plan.latest(start, 26) == {"events": {"n:1/0": 28, "n:1/1": 28}}  # 90 + 40 lag, shared
    assert plan.ranges(start, {"events": {"n:1/0": 28, "n:1/1": 28}}) == [
        OffsetRange("events", 0, "n:1", 10, 28, "n:1"),
        OffsetRange("events", 1, "n:1", EARLIEST, 28, "n:1"),
    ]
    plan.prepare_available_now()
    infos[("events", "n:1", 0)] = info(0, 0, 500)  # published after the AvailableNow start
    after = {"events": {"n:1/0": 100, "n:1/1": 60}}
    assert plan.latest(after, None) == after
    assert plan.latest_reported() == {"events": {"n:1/0": 500, "n:1/1": 60}}


def test_stream_planner_keys_partitions_by_node() -> None:
    infos = {
        ("events", "a:1", 0): info(0, 0, 10, "a:1"),
        ("events", "b:2", 0): info(0, 0, 4, "b:2"),
    }
    plan = planner(infos)
    start = {"events": {"a:1/0": 3, "b:2/0": 0}}
    end = plan.latest(start, None)
    assert end == {"events": {"a:1/0": 10, "b:2/0": 4}}
    assert plan.ranges(start, end) == [
        OffsetRange("events", 0, "a:1", 3, 10, "a:1"),
        OffsetRange("events", 0, "b:2", 0, 4, "b:2"),
    ]
    del infos[("events", "b:2", 0)]  # that nsqd went away: its offset stays, nothing to read
    assert plan.latest(end, None) == end
    assert plan.ranges(end, end) == []


def test_stream_planner_when_the_log_went_back() -> None:
    infos = {("events", "n:1", 0): info(0, 0, 5)}
    with pytest.raises(DataLoss, match="deleted and created again"):
        planner(infos).latest({"events": {"n:1/0": 40}}, None)
    plan = planner(infos, failOnDataLoss="false")
    end = plan.latest({"events": {"n:1/0": 40}}, None)
    assert end == {"events": {"n:1/0": 5}}
    assert plan.ranges({"events": {"n:1/0": 40}}, end) == [
        OffsetRange("events", 0, "n:1", EARLIEST, 5, "n:1")
    ]


class FakeConn:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def mpub(self, topic: str, bodies: Sequence[bytes], partition_key: bytes = b"") -> None:
        self.calls.append(("mpub", topic, partition_key, list(bodies)))

    def pub(self, topic: str, body: bytes, defer_ms: int = 0) -> None:
        self.calls.append(("pub", topic, defer_ms, body))


def test_publisher_groups_rows_into_bounded_mpubs() -> None:
    conn = FakeConn()
    publisher = Publisher(conn, "main", max_bytes=4 + 3 * (4 + 2))  # room for three 2-byte bodies
    batch = pa.RecordBatch.from_pydict(
        {
            "body": ["m1", "m2", "o1", "m3", "m4", "d1", "k1"],
            "topic": [None, None, "other", None, None, None, None],
            "partition_key": [None, None, None, None, None, None, "key"],
            "defer_ms": [0, None, None, 0, None, 1500, None],
            "ignored": [1, 2, 3, 4, 5, 6, 7],
        }
    )
    publisher.add(batch)
    counts = publisher.flush()
    assert conn.calls == [
        ("mpub", "main", b"", [b"m1", b"m2", b"m3"]),  # full: sent when m4 arrives
        ("pub", "main", 1500, b"d1"),  # deferred rows go at once, one by one
        ("mpub", "other", b"", [b"o1"]),
        ("mpub", "main", b"", [b"m4"]),
        ("mpub", "main", b"key", [b"k1"]),
    ]
    assert (counts.messages, counts.deferred, counts.calls) == (6, 1, 5)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"body": [b""]}, "empty or null body"),
        ({"body": [None]}, "empty or null body"),
        ({"body": [b"x"], "topic": ["bad topic"]}, "no valid topic"),
        ({"body": [b"x"], "defer_ms": [-1]}, "negative defer_ms"),
    ],
)
def test_publisher_refuses_bad_rows(columns: dict[str, list[Any]], message: str) -> None:
    with pytest.raises(BadRow, match=message):
        Publisher(FakeConn(), "main", 1 << 20).add(pa.RecordBatch.from_pydict(columns))


def test_error_summaries_and_progress_lines() -> None:
    trace = "Traceback ...\n  File x\nnsqpy.spark.plan.DataLoss: t/0 on a:1: offsets 0..4 were removed\n SQLSTATE"
    assert (
        summarize("[STREAM_FAILED] boom\n" + trace)
        == "nsqpy.spark.plan.DataLoss: t/0 on a:1: offsets 0..4 were removed"
    )
    assert summarize("one\n\ntwo\nthree", lines=2) == "one\ntwo"
    line = progress_line(
        {
            "batchId": 3,
            "numInputRows": 10,
            "processedRowsPerSecond": 2.5,
            "sources": [{"endOffset": '{"t": {"0": 9}}'}],
        }
    )
    assert line == 'batch 3: 10 rows, 2 rows/s, offsets {"t":{"0":9}}'


def test_archive_progress_lines_count_messages_not_files() -> None:
    """The archive's source rows are files; its observed metrics hold the messages."""
    progress = {
        "batchId": 4,
        "numInputRows": 2,
        "durationMs": {"triggerExecution": 500},
        "observedMetrics": {"archive": {"messages": 1000, "files": 2}},
        "sources": [{"endOffset": {"t": {"n/0": 1000}}}],
    }
    assert progress_line(progress) == 'batch 4: 1000 rows, 2000 rows/s, offsets {"t":{"n/0":1000}}'
