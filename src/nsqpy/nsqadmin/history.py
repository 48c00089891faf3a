"""nsqadmin's own bounded in-memory history of topic and channel stats, for graphs.

nsqadmin samples every nsqd's /stats every ``--stats-sample-interval`` (see ``sampler``)
and records here, per series, the time, message count, depth, in-flight and deferred
counts, and the message rate between consecutive samples. A series is keyed
``(topic, channel, node)``: channel ``""`` is the topic itself, node ``"*"`` the sum over
nodes, and ``("", "", "*")`` the whole cluster (sum of every channel's message count, what
the counter page counts). Memory is bounded twice: each series keeps at most ``size``
samples, and at most ``max_series`` series are kept (the least recently updated go first;
a series not updated for ``size`` samples is dropped). Pure: no I/O, no clock of its own,
the caller passes timestamps. Imports only the standard library.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

SeriesKey = tuple[str, str, str]
TOTAL: SeriesKey = ("", "", "*")

# (message_count, depth, in_flight_count, deferred_count)
Sample = tuple[int, int, int, int]


class Series:
    """One series' last ``size`` samples."""

    __slots__ = ("counts", "deferred", "depths", "in_flight", "rates", "tag", "times", "updated")

    def __init__(self, size: int) -> None:
        self.times: deque[float] = deque(maxlen=size)
        self.counts: deque[int] = deque(maxlen=size)
        self.depths: deque[int] = deque(maxlen=size)
        self.in_flight: deque[int] = deque(maxlen=size)
        self.deferred: deque[int] = deque(maxlen=size)
        self.rates: deque[float | None] = deque(maxlen=size)
        self.updated = 0
        self.tag = ""

    def append(self, ts: float, sample: Sample, generation: int, tag: str = "") -> None:
        count, depth, in_flight, deferred = sample
        rate: float | None = None
        if self.times and tag == self.tag:
            dt = ts - self.times[-1]
            delta = count - self.counts[-1]
            # A counter that went down was reset (node restarted, topic re-created): a gap.
            if dt > 0 and delta >= 0:
                rate = delta / dt
        self.tag = tag
        self.times.append(ts)
        self.counts.append(count)
        self.depths.append(depth)
        self.in_flight.append(in_flight)
        self.deferred.append(deferred)
        self.rates.append(rate)
        self.updated = generation

    def latest_rate(self) -> float | None:
        return self.rates[-1] if self.rates else None

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamps": [round(t, 3) for t in self.times],
            "message_count": list(self.counts),
            "rate": [None if r is None else round(r, 3) for r in self.rates],
            "depth": list(self.depths),
            "in_flight_count": list(self.in_flight),
            "deferred_count": list(self.deferred),
        }


EMPTY_SERIES: dict[str, Any] = {
    "timestamps": [],
    "message_count": [],
    "rate": [],
    "depth": [],
    "in_flight_count": [],
    "deferred_count": [],
}


class History:
    """Every series, bounded in length and in number."""

    def __init__(self, size: int, max_series: int = 10_000) -> None:
        if size < 2:
            raise ValueError(f"history size must be at least 2 samples, got {size}")
        self.size = size
        self.max_series = max_series
        self.generation = 0  # number of samples recorded
        self._series: OrderedDict[SeriesKey, Series] = OrderedDict()

    def __len__(self) -> int:
        return len(self._series)

    def record(
        self, ts: float, values: dict[SeriesKey, Sample], tags: dict[SeriesKey, str] | None = None
    ) -> None:
        """Add one sample of every series in ``values`` taken at ``ts`` (seconds).

        ``tags`` name what a sum is made of (the nodes that answered): when a series' tag
        changes, its rate for this sample is a gap rather than a false drop or spike.
        """
        self.generation += 1
        tags = tags or {}
        for key, sample in values.items():
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = Series(self.size)
            series.append(ts, sample, self.generation, tags.get(key, ""))
            self._series.move_to_end(key)
        stale = self.generation - self.size
        while self._series:
            key, oldest = next(iter(self._series.items()))
            if oldest.updated > stale and len(self._series) <= self.max_series:
                break
            del self._series[key]

    def get(self, key: SeriesKey) -> Series | None:
        return self._series.get(key)

    def latest_rate(self, key: SeriesKey) -> float | None:
        series = self._series.get(key)
        return series.latest_rate() if series is not None else None

    def series_json(self, key: SeriesKey) -> dict[str, Any]:
        series = self._series.get(key)
        return series.to_json() if series is not None else dict(EMPTY_SERIES)


def samples_from_stats(
    per_node_topics: list[dict[str, Any]],
) -> tuple[dict[SeriesKey, Sample], dict[SeriesKey, str]]:
    """Series values of one sample from per-node TopicStats (``stats.node_topic`` shapes),
    and each series' tag: the nodes its sum is made of."""
    out: dict[SeriesKey, list[int]] = {}
    members: dict[SeriesKey, set[str]] = {}

    def add(key: SeriesKey, values: tuple[int, int, int, int], node: str) -> None:
        acc = out.setdefault(key, [0, 0, 0, 0])
        for i, v in enumerate(values):
            acc[i] += v
        members.setdefault(key, set()).add(node)

    out[TOTAL] = [0, 0, 0, 0]
    members[TOTAL] = set()
    for t in per_node_topics:
        topic, node = t["topic_name"], t["node"]
        values = (t["message_count"], t["depth"], 0, 0)
        add((topic, "", node), values, node)
        add((topic, "", "*"), values, node)
        for c in t["channels"]:
            cvalues = (c["message_count"], c["depth"], c["in_flight_count"], c["deferred_count"])
            add((topic, c["channel_name"], node), cvalues, node)
            add((topic, c["channel_name"], "*"), cvalues, node)
            add(TOTAL, cvalues, node)
    samples = {k: (v[0], v[1], v[2], v[3]) for k, v in out.items()}
    return samples, {k: ",".join(sorted(v)) for k, v in members.items()}
