"""The total-queue checker on synthetic histories: each channel must receive every
acknowledged value and nothing unpublished; availability is measured from the
acknowledgements around each fault."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from nsqpy.jepsen.checker import check
from nsqpy.jepsen.history import HistoryWriter, read_history

from .helpers import acks, clean, fault, history, pub, recv


def test_clean_history_is_valid() -> None:
    result = check(history(clean(10)), ["a", "b"])
    assert result.valid
    assert (result.attempted, result.acknowledged, result.failed, result.indeterminate) == (
        10,
        10,
        0,
        0,
    )
    for channel in result.channels:
        assert channel.received == 10
        assert channel.lost == channel.unexpected == channel.recovered == ()
        assert channel.duplicates == channel.duplicated_values == 0


def test_value_missing_on_one_channel_is_lost_there_only() -> None:
    events = [e for e in clean(10) if not (e["op"] == "recv" and e["v"] == 7 and e["ch"] == "b")]
    result = check(history(events), ["a", "b"])
    a, b = result.channels
    assert not result.valid
    assert a.valid and a.lost == () and a.received == 10
    assert not b.valid and b.lost == (7,) and b.received == 9
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["valid"] is False
    assert doc["channels"][1]["lost"] == [7] and doc["channels"][1]["lost_count"] == 1


def test_lost_values_are_sorted() -> None:
    events = [e for e in clean(10) if not (e["op"] == "recv" and e["v"] in (8, 2, 5))]
    (a,) = check(history(events), ["a"]).channels
    assert a.lost == (2, 5, 8)


def test_received_value_never_published_is_unexpected() -> None:
    result = check(history(clean(5), [recv(999, "a", 3.0)]), ["a", "b"])
    a, b = result.channels
    assert not result.valid
    assert a.unexpected == (999,) and a.lost == () and a.recovered == ()
    assert b.unexpected == ()


def test_receives_on_unchecked_channels_are_ignored() -> None:
    result = check(history(clean(5), [recv(999, "c", 3.0)]), ["a", "b"])
    assert result.valid
    assert [c.channel for c in result.channels] == ["a", "b"]


def test_duplicates_are_counted_but_valid() -> None:
    extra = [recv(1, "a", 2.0), recv(1, "a", 2.1), recv(2, "a", 2.2)]
    result = check(history(clean(5), extra), ["a", "b"])
    a, b = result.channels
    assert result.valid
    assert (a.duplicates, a.duplicated_values, a.received) == (3, 2, 5)
    assert (b.duplicates, b.duplicated_values) == (0, 0)


def test_failed_and_indeterminate_writes_that_arrive_are_recovered() -> None:
    writes = [pub(100, 1.0, "info", "timeout"), pub(101, 1.1, "fail", "E_PUB_FAILED")]
    arrived = [recv(v, ch, 2.0) for v in (100, 101) for ch in ("a", "b")]
    result = check(history(clean(5), writes, arrived), ["a", "b"])
    assert result.valid
    assert (result.attempted, result.acknowledged, result.failed, result.indeterminate) == (
        7,
        5,
        1,
        1,
    )
    for channel in result.channels:
        assert channel.recovered == (100, 101)
        assert channel.lost == channel.unexpected == ()
        assert channel.received == 7


def test_failed_write_never_received_is_neither_lost_nor_anything() -> None:
    writes = [pub(200, 1.0, "fail", "E_PUB_FAILED"), pub(201, 1.1, "info", "closed")]
    result = check(history(clean(5), writes), ["a"])
    (a,) = result.channels
    assert result.valid
    assert a.lost == a.unexpected == a.recovered == ()
    assert (result.attempted, result.failed, result.indeterminate) == (7, 1, 1)


def test_acknowledged_wins_over_a_failed_publish_of_the_same_value() -> None:
    writes = [pub(50, 1.0, "fail", "E_PUB_FAILED"), pub(50, 1.2, "ok")]
    result = check(history(clean(5), writes, [recv(50, "b", 2.0)]), ["a", "b"])
    a, b = result.channels
    assert (result.acknowledged, result.failed, result.indeterminate) == (6, 0, 0)
    assert a.lost == (50,)
    assert b.lost == b.recovered == ()


def test_errors_are_counted_by_kind_and_result() -> None:
    writes = [
        pub([300, 301, 302], 1.0, "fail", "E_FAILED_ON_NOT_WRITABLE"),
        pub(303, 1.1, "fail", "E_FAILED_ON_NOT_WRITABLE"),
        pub(304, 1.2, "fail", "E_PUB_FAILED"),
        pub(305, 1.3, "info", "timeout"),
        pub(306, 1.4, "info", "timeout"),
        pub(307, 1.5, "info"),
    ]
    result = check(history(clean(3), writes), ["a"])
    assert result.fail_errors == {"E_FAILED_ON_NOT_WRITABLE": 2, "E_PUB_FAILED": 1}
    assert result.info_errors == {"timeout": 2, "unknown": 1}
    assert (result.failed, result.indeterminate) == (5, 3)


def test_acks_per_second_count_values_at_completion() -> None:
    result = check(history([pub([1, 2, 3], 0.5), pub(4, 2.25), pub(5, 2.5, "fail")]), [])
    assert result.availability.acked_per_second == (3, 0, 1)


def test_gap_and_recovery_around_a_fault() -> None:
    """10 values/s, none from 20 s to 24 s, 3 in second 24 (under half the baseline),
    10/s again from 25 s: the fault healed at 23.5 s recovers at 25 s."""
    rates = [10] * 20 + [0] * 4 + [3] + [10] * 35
    result = check(history(acks(rates), fault("halves", 0, 20.0, 23.5)), ["a"])
    availability = result.availability
    assert availability.acked_per_second[19:26] == (10, 0, 0, 0, 0, 3, 10)
    assert availability.baseline == 10
    (interval,) = availability.intervals
    assert (interval.kind, interval.detail, interval.start, interval.stop) == (
        "halves",
        "step 0",
        20.0,
        23.5,
    )
    assert interval.healed
    assert interval.longest_gap == pytest.approx(4 + 0.5 / 3)  # 20 s to the first ack in 24
    assert interval.recovery == pytest.approx(1.5)


def test_baseline_ignores_faults_and_the_ten_seconds_after() -> None:
    """Seconds 6..15 acknowledge 4/s: counted in the baseline they would make the
    rate look recovered at once; left out, the baseline is 10 and recovery waits for 17."""
    rates = [10] * 5 + [0] + [4] * 11 + [10] * 4
    result = check(history(acks(rates), fault("kill", 0, 5.0, 6.0)), ["a"])
    assert result.availability.baseline == 10
    (interval,) = result.availability.intervals
    assert interval.recovery == pytest.approx(11.0)


def test_baseline_falls_back_to_seconds_with_acks_and_unhealed_fault_ends_with_history() -> None:
    rates = [1, 2, 3, 4, 5, 6, 7, 8, 9, 0]
    events = history(acks(rates), fault("pause", 0, 0.0, None), [recv(9999, "z", 9.5)])
    availability = check(events, ["a"]).availability
    assert availability.baseline == 5  # the median of 1..9; the empty last second is left out
    (interval,) = availability.intervals
    assert not interval.healed
    assert interval.stop == availability.duration == 9.5
    assert interval.recovery is None


def test_no_recovery_when_writes_never_come_back() -> None:
    rates = [10] * 10
    events = history(acks(rates), fault("halves", 0, 10.0, 12.0), [recv(9999, "z", 20.0)])
    availability = check(events, ["a"]).availability
    (interval,) = availability.intervals
    assert interval.recovery is None
    assert interval.longest_gap == pytest.approx(10.0)  # from the start to the history's end
    (summary,) = availability.kinds
    assert (summary.count, summary.unrecovered, summary.median_recovery) == (1, 1, None)


def test_faults_are_summarised_by_kind() -> None:
    rates = [10] * 10 + [0, 0] + [10] * 10 + [0, 0, 0, 2] + [10] * 14
    faults = [
        fault("halves", 0, 10.0, 11.5),  # recovers in second 12: 0.5 s
        fault("halves", 1, 22.0, 24.0),  # second 25 is 2/s: recovers in second 26, 2.0 s
        fault("kill", 2, 30.0, 30.2),  # no effect: recovers in second 31, 0.8 s
    ]
    availability = check(history(acks(rates), *faults), ["a"]).availability
    assert [i.step for i in availability.intervals] == [0, 1, 2]
    assert [i.recovery for i in availability.intervals] == pytest.approx([0.5, 2.0, 0.8])
    halves, kill = availability.kinds
    assert (halves.kind, halves.count, halves.unrecovered) == ("halves", 2, 0)
    assert halves.median_recovery == pytest.approx(1.25)
    assert halves.max_recovery == pytest.approx(2.0)
    assert halves.max_longest_gap == pytest.approx(25.25 - 22.0)
    assert (kill.kind, kill.count) == ("kill", 1)
    assert kill.max_longest_gap == pytest.approx(0.1)


def test_stop_is_matched_to_its_start_by_step() -> None:
    events = history(
        acks([10] * 20),
        fault("halves", 0, 2.0, None),
        fault("kill", 1, 3.0, 4.0),
        fault("halves", 0, 9.0, 5.0)[1:],  # the stop of step 0, after step 1's
    )
    intervals = check(events, ["a"]).availability.intervals
    assert [(i.step, i.kind, i.start, i.stop) for i in intervals] == [
        (0, "halves", 2.0, 5.0),
        (1, "kill", 3.0, 4.0),
    ]


def test_read_history_merges_files_and_skips_a_torn_last_line(tmp_path: Path) -> None:
    origin = time.monotonic()
    writer = HistoryWriter(tmp_path / "w1.jsonl", "w1", origin)
    reader = HistoryWriter(tmp_path / "r1.jsonl", "r1", origin)
    for v in range(5):
        writer.write("pub", v=[v], t0=v + 0.1, r="ok", t=v + 0.2)
        reader.write("recv", v=v, ch="a", t=v + 0.3)
    writer.write("pub", v=[5], t0=5.1, r="ok", t=5.2)
    writer.close()
    reader.close()
    with open(tmp_path / "r1.jsonl", "a") as f:
        f.write('{"p":"r1","op":"recv","v":5,"ch":"a","t":5.')  # killed mid-line
    events = read_history([tmp_path / "w1.jsonl", tmp_path / "r1.jsonl"])
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)
    assert len(events) == 11
    result = check(events, ["a"])
    assert result.acknowledged == 6
    assert result.channels[0].lost == (5,)


def test_a_value_unreadable_for_a_while_is_late_but_not_lost() -> None:
    """Acknowledged at 1.0 s, delivered on channel a only at 8.5 s (after a failover, say):
    valid, with its wait and the count of late values on that channel."""
    events = history(clean(5), [pub(77, 1.0)], [recv(77, "a", 8.5), recv(77, "b", 1.2)])
    result = check(events, ["a", "b"])
    a, b = result.channels
    assert result.valid
    assert (a.max_delay, a.max_delay_value, a.late) == (pytest.approx(7.5), 77, 1)
    assert b.late == 0 and b.max_delay < 1.0
    assert json.loads(json.dumps(result.to_json()))["channels"][0]["late"] == 1
