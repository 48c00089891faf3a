"""The total-queue checker: did every acknowledged value reach every channel, and how
long did the queue stay unavailable after each fault?

Reads a merged history (``nsqpy.jepsen.history``) and knows nothing of the broker. Each
channel is checked on its own, since each must receive every value: a value is *lost* on a
channel if a publish of it was acknowledged (``ok``) and the channel never received it;
*unexpected* if the channel received it and no publish ever carried it; *recovered* if
only failed or indeterminate publishes carried it and it arrived anyway (a write that
happened although the client could not know). Deliveries beyond the first are
*duplicates*, allowed by an at-least-once queue, so counted but never invalid. A value
acknowledged by one publish wins over any failed publish of the same value. How long an
acknowledged value waited for its first delivery on the channel is its *delay*; values
delayed more than ``LATE_AFTER`` are counted as *late* (acknowledged, but unreadable for a
while: after a failover, say), never invalid.

Availability is measured on acknowledged values per whole second of the run. The
*baseline* rate is the median over the quiet seconds: whole seconds while clients were
publishing that overlap no fault and none of the ``QUIET_AFTER`` seconds after one (or,
without any, the median of the seconds with acknowledgements). After a fault is healed,
its *recovery* is the time from the heal to the first whole second at or after it whose
rate is back to ``RECOVERED_FRACTION`` of the baseline; its *longest gap* is the longest
time without an acknowledgement from the fault's start until the write that closes the
recovery window.

Standard library only: the report (``nsqpy.jepsen.report``) is where plotting lives.
The work is one pass over the events and set operations, linear in the history's size.
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_left
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

QUIET_AFTER = 10.0  # seconds after a fault's heal that are not used for the baseline
RECOVERED_FRACTION = 0.5  # share of the baseline rate that counts as recovered
UNKNOWN_ERROR = "unknown"  # the error kind of a fail or info publish without ``e``
LATE_AFTER = 5.0  # seconds from acknowledgement to first delivery that count as late


@dataclass(frozen=True)
class ChannelResult:
    """What one channel received, against what was published. Value lists are sorted."""

    channel: str
    received: int  # distinct values received
    lost: tuple[int, ...]
    unexpected: tuple[int, ...]
    duplicates: int  # deliveries beyond the first of each value
    duplicated_values: int  # distinct values delivered more than once
    recovered: tuple[int, ...]
    max_delay: float = 0.0  # the longest wait of an acknowledged value for its delivery
    max_delay_value: int | None = None  # the value that waited that long
    late: int = 0  # acknowledged values first delivered more than LATE_AFTER later

    @property
    def valid(self) -> bool:
        return not self.lost and not self.unexpected

    def to_json(self) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "valid": self.valid,
            "received": self.received,
            "lost_count": len(self.lost),
            "lost": list(self.lost),
            "unexpected_count": len(self.unexpected),
            "unexpected": list(self.unexpected),
            "duplicates": self.duplicates,
            "duplicated_values": self.duplicated_values,
            "recovered_count": len(self.recovered),
            "recovered": list(self.recovered),
            "max_delay": self.max_delay,
            "max_delay_value": self.max_delay_value,
            "late": self.late,
        }


@dataclass(frozen=True)
class NemesisInterval:
    """One fault, from its ``start`` to its ``stop`` (seconds since the run's start).
    ``healed`` is false when the history has no stop for it: it then ends at the last
    event. ``recovery`` is None when the rate never came back before the history ended."""

    step: Hashable
    kind: str
    detail: str
    start: float
    stop: float
    healed: bool
    longest_gap: float
    recovery: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class KindSummary:
    """The faults of one kind together; recoveries are over those that recovered."""

    kind: str
    count: int
    unrecovered: int
    median_recovery: float | None
    max_recovery: float | None
    max_longest_gap: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Availability:
    """``acked_per_second[i]``: values acknowledged in second ``i`` (at completion)."""

    duration: float  # time of the last event
    acked_per_second: tuple[int, ...]
    baseline: float
    intervals: tuple[NemesisInterval, ...]
    kinds: tuple[KindSummary, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "duration": self.duration,
            "baseline": self.baseline,
            "acked_per_second": list(self.acked_per_second),
            "intervals": [i.to_json() for i in self.intervals],
            "kinds": [k.to_json() for k in self.kinds],
        }


@dataclass(frozen=True)
class CheckResult:
    """The verdict on a history. Value counts are of distinct values; error counts are
    of publish events, by their ``e`` code."""

    valid: bool
    attempted: int
    acknowledged: int
    failed: int  # carried only by fail publishes
    indeterminate: int  # carried by an info publish, never acknowledged
    fail_errors: Mapping[str, int]
    info_errors: Mapping[str, int]
    channels: tuple[ChannelResult, ...]
    availability: Availability

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "attempted": self.attempted,
            "acknowledged": self.acknowledged,
            "failed": self.failed,
            "indeterminate": self.indeterminate,
            "fail_errors": dict(self.fail_errors),
            "info_errors": dict(self.info_errors),
            "channels": [c.to_json() for c in self.channels],
            "availability": self.availability.to_json(),
        }


class _Fault(NamedTuple):
    """A fault as paired from its nemesis events, before it is measured."""

    step: Hashable
    kind: str
    detail: str
    start: float
    stop: float
    healed: bool


@dataclass
class _Tally:
    """Everything the checker needs from the events, gathered in one pass."""

    channels: Sequence[str]
    acked: set[int] = field(default_factory=set)
    acked_at: dict[int, float] = field(default_factory=dict)  # first acknowledgement
    info: set[int] = field(default_factory=set)
    failed: set[int] = field(default_factory=set)
    fail_errors: Counter[str] = field(default_factory=Counter)
    info_errors: Counter[str] = field(default_factory=Counter)
    ok_times: list[float] = field(default_factory=list)
    acked_per_second: list[int] = field(default_factory=list)
    received: dict[str, dict[int, float]] = field(default_factory=dict)  # first delivery
    duplicated: dict[str, Counter[int]] = field(default_factory=dict)
    nemesis: list[Mapping[str, Any]] = field(default_factory=list)
    end: float = 0.0
    first_pub: float = math.inf
    last_pub: float = -math.inf

    def __post_init__(self) -> None:
        self.received = {ch: {} for ch in self.channels}
        self.duplicated = {ch: Counter() for ch in self.channels}

    def feed(self, events: Iterable[Mapping[str, Any]]) -> None:
        for event in events:
            op = event.get("op")
            t = float(event["t"])
            if t > self.end:
                self.end = t
            if op == "recv":
                seen = self.received.get(event.get("ch", ""))
                if seen is not None:
                    value = event["v"]
                    if value in seen:
                        self.duplicated[event["ch"]][value] += 1
                    else:
                        seen[value] = t
            elif op == "pub":
                self._pub(event, t)
            elif op == "nemesis":
                self.nemesis.append(event)

    def _pub(self, event: Mapping[str, Any], t: float) -> None:
        values = event["v"]
        if isinstance(values, int):
            values = (values,)
        if t < self.first_pub:
            self.first_pub = t
        if t > self.last_pub:
            self.last_pub = t
        result = event.get("r")
        if result == "ok":
            self.acked.update(values)
            for value in values:
                self.acked_at.setdefault(value, t)
            self.ok_times.append(t)
            second = int(t)
            if second >= len(self.acked_per_second):
                self.acked_per_second.extend([0] * (second + 1 - len(self.acked_per_second)))
            self.acked_per_second[second] += len(values)
        elif result == "fail":
            self.failed.update(values)
            self.fail_errors[event.get("e") or UNKNOWN_ERROR] += 1
        else:  # info, or anything else: no answer, so maybe written
            self.info.update(values)
            self.info_errors[event.get("e") or UNKNOWN_ERROR] += 1


def check(events: Sequence[Mapping[str, Any]], channels: Sequence[str]) -> CheckResult:
    """Checks ``events`` (a merged history) for every one of ``channels``; receives on
    other channels are ignored."""
    tally = _Tally(channels)
    tally.feed(events)
    indeterminate = tally.info - tally.acked
    attempted = tally.acked | tally.info | tally.failed
    results = tuple(_channel_result(tally, ch, attempted) for ch in channels)
    return CheckResult(
        valid=all(r.valid for r in results),
        attempted=len(attempted),
        acknowledged=len(tally.acked),
        failed=len(tally.failed - tally.acked - tally.info),
        indeterminate=len(indeterminate),
        fail_errors=dict(tally.fail_errors),
        info_errors=dict(tally.info_errors),
        channels=results,
        availability=_availability(tally),
    )


def _channel_result(tally: _Tally, channel: str, attempted: set[int]) -> ChannelResult:
    first = tally.received[channel]
    received = first.keys()
    duplicated = tally.duplicated[channel]
    delays = [(first[v] - t, v) for v, t in tally.acked_at.items() if v in first]
    longest = max(delays, default=(0.0, None))
    return ChannelResult(
        channel=channel,
        received=len(received),
        lost=tuple(sorted(tally.acked - received)),
        unexpected=tuple(sorted(received - attempted)),
        duplicates=sum(duplicated.values()),
        duplicated_values=len(duplicated),
        recovered=tuple(sorted((received & attempted) - tally.acked)),
        max_delay=round(max(longest[0], 0.0), 6),
        max_delay_value=longest[1],
        late=sum(1 for d, _ in delays if d > LATE_AFTER),
    )


def _availability(tally: _Tally) -> Availability:
    acks = tally.acked_per_second
    acks.extend([0] * (int(tally.end) + 1 - len(acks)))
    faults = _faults(tally.nemesis, tally.end)
    baseline = _baseline(acks, faults, tally.first_pub, tally.last_pub)
    ok_times = sorted(tally.ok_times)
    intervals = []
    for f in faults:
        recovery = _recovery(acks, f.stop, baseline)
        window_end = tally.end if recovery is None else f.stop + recovery
        gap = _longest_gap(ok_times, f.start, window_end, tally.end)
        intervals.append(NemesisInterval(*f, longest_gap=gap, recovery=recovery))
    return Availability(
        duration=tally.end,
        acked_per_second=tuple(acks),
        baseline=baseline,
        intervals=tuple(intervals),
        kinds=_kind_summaries(intervals),
    )


def _faults(nemesis: Sequence[Mapping[str, Any]], end: float) -> list[_Fault]:
    """Start and stop events paired by ``step`` (a stop heals the latest open start of its
    step; a stop with none is ignored; a start never healed ends at ``end``)."""
    open_starts: dict[Hashable, list[Mapping[str, Any]]] = {}
    faults: list[_Fault] = []

    def fault(start: Mapping[str, Any], stop: float, healed: bool) -> _Fault:
        kind, detail = str(start.get("kind", "")), str(start.get("detail", ""))
        return _Fault(start.get("step"), kind, detail, float(start["t"]), stop, healed)

    for event in nemesis:
        step = event.get("step")
        if event.get("phase") == "start":
            open_starts.setdefault(step, []).append(event)
        elif event.get("phase") == "stop" and open_starts.get(step):
            faults.append(fault(open_starts[step].pop(), float(event["t"]), True))
    faults.extend(fault(s, end, False) for starts in open_starts.values() for s in starts)
    return sorted(faults, key=lambda f: f.start)


def _baseline(acks: Sequence[int], faults: Sequence[_Fault], first: float, last: float) -> float:
    """Median acknowledged values per second over the quiet seconds: whole seconds inside
    the publishing span [``first``, ``last``] that overlap no fault nor ``QUIET_AFTER``
    seconds after it. Without any, the median over the seconds with acknowledgements."""
    quiet = set(range(math.ceil(first), math.floor(last))) if first <= last else set()
    for f in faults:
        quiet.difference_update(range(math.floor(f.start), math.ceil(f.stop + QUIET_AFTER)))
    rates = [acks[s] for s in quiet if s < len(acks)] or [n for n in acks if n]
    return float(statistics.median(rates)) if rates else 0.0


def _recovery(acks: Sequence[int], stop: float, baseline: float) -> float | None:
    """Seconds from ``stop`` to the first whole second at or after it acknowledging at
    least ``RECOVERED_FRACTION`` of ``baseline`` (and at least one value)."""
    threshold = max(RECOVERED_FRACTION * baseline, 1)
    for second in range(math.ceil(stop), len(acks)):
        if acks[second] >= threshold:
            return second - stop
    return None


def _longest_gap(ok_times: Sequence[float], start: float, until: float, end: float) -> float:
    """The longest time without an acknowledgement from ``start`` to the first one at or
    after ``until`` (or to ``end``, the history's end, when none came)."""
    first = bisect_left(ok_times, start)
    last = bisect_left(ok_times, until)  # the acknowledgement that closes the window
    previous, longest = start, 0.0
    for i in range(first, min(last + 1, len(ok_times))):
        longest = max(longest, ok_times[i] - previous)
        previous = ok_times[i]
    if last >= len(ok_times):
        longest = max(longest, end - previous)
    return longest


def _kind_summaries(intervals: Sequence[NemesisInterval]) -> tuple[KindSummary, ...]:
    by_kind: dict[str, list[NemesisInterval]] = {}
    for interval in intervals:
        by_kind.setdefault(interval.kind, []).append(interval)
    summaries = []
    for kind, group in sorted(by_kind.items()):
        recoveries = [i.recovery for i in group if i.recovery is not None]
        summaries.append(
            KindSummary(
                kind=kind,
                count=len(group),
                unrecovered=len(group) - len(recoveries),
                median_recovery=float(statistics.median(recoveries)) if recoveries else None,
                max_recovery=max(recoveries) if recoveries else None,
                max_longest_gap=max(i.longest_gap for i in group),
            )
        )
    return tuple(summaries)
