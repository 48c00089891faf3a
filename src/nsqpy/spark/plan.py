"""Planning reads on the driver: which partitions exist where, and which offsets to read.

Owns discovery (the nsqd given, or those nsqlookupd names for each topic, asked for
their ``/log/watermarks``; a topic on several nsqd has separate logs on each, so a
partition is keyed by topic, node and number), the resolution of starting and ending
offsets (earliest, latest, JSON, or a timestamp through ``/log/offset_for_time``), the
split of offset ranges into Spark partitions (``minPartitions``) and the streaming
planner that keeps the offsets of a micro-batch within ``maxOffsetsPerTrigger`` and
within the Trigger.AvailableNow target. Imports the standard library, ``nsqpy.errors`` and the
other ``nsqpy.spark`` pure modules; never pyspark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from nsqpy.errors import ConfigError, NsqError
from nsqpy.spark.nsqhttp import CLUSTER_NODE, NsqdHttp, NsqHttpError, lookup_nsqd
from nsqpy.spark.options import (
    EARLIEST,
    LATEST,
    OffsetDict,
    PartitionKey,
    SourceOptions,
    from_offset_dict,
    split_limit,
    to_offset_dict,
)

log = logging.getLogger("nsqpy.spark")

REPEAT_S = 60.0  # an nsqd a stream cannot reach is named again at most this often


class TopicNotFound(NsqError):
    """A batch read names a topic that no nsqd has."""


class DataLoss(NsqError):
    """Offsets to be read are gone (retention, a quarantined segment, a recreated topic)."""


@dataclass(frozen=True)
class PartitionInfo:
    """A partition, the nsqd that serves it (its name and the address to ask) and its
    watermarks when asked."""

    topic: str
    node: str
    partition: int
    address: str
    low: int
    high: int


@dataclass(frozen=True)
class OffsetRange:
    """One Spark partition's work: offsets [start, end) of a topic partition on an nsqd.

    ``start`` is -2 for a partition first seen after the query started: read it from
    whatever its low watermark is when the task runs, without reporting data loss.
    """

    topic: str
    partition: int
    address: str
    start: int
    end: int
    node: str = ""

    @property
    def size(self) -> int:
        return max(0, self.end - max(self.start, 0))


class DownNodes:
    """The nsqd a stream could not reach: each is logged when it first fails, again at
    most every ``REPEAT_S`` while it stays down (for how long, after how many looks), and
    once when it answers again. A stream looks at its nodes at every trigger: without
    this, a line per trigger for each node down, for as long as it is down. A node no
    longer asked (lookupd lists another leader) is forgotten."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._down: dict[str, tuple[float, float, int]] = {}  # since, last logged, looks

    def look(self, outcome: Mapping[str, Exception | None]) -> None:
        """One look at the nodes: each address asked, and what failed (None: answered for
        every topic asked of it)."""
        now = self.clock()
        for address in [a for a in self._down if a not in outcome]:
            del self._down[address]
        for address, exc in outcome.items():
            seen = self._down.get(address)
            if exc is None:
                if seen is not None:
                    del self._down[address]
                    log.info("nsq source: %s answers again after %.0f s", address, now - seen[0])
            elif seen is None:
                self._down[address] = (now, now, 1)
                log.warning("nsq source: %s did not answer (%s); its partitions wait",
                            address, exc)  # fmt: skip
            elif now - seen[1] < REPEAT_S:
                self._down[address] = (seen[0], seen[1], seen[2] + 1)
            else:
                self._down[address] = (seen[0], now, seen[2] + 1)
                log.warning("nsq source: %s still does not answer after %.0f s and %d looks "
                            "(%s); its partitions wait", address, now - seen[0], seen[2] + 1,
                            exc)  # fmt: skip


def discover(
    opts: SourceOptions, *, batch: bool, down: DownNodes | None = None
) -> dict[PartitionKey, PartitionInfo]:
    """Every partition of the topics read, on every nsqd that has them, with watermarks.

    A batch read fails with TopicNotFound for a topic no nsqd has; a stream waits for it,
    and goes on without a node that does not answer (``down`` logs it).
    Two addresses answering as the same node (one nsqd given twice) is a configuration
    error: its partitions would be read twice. In an nsqpy cluster every partition is
    read from its leader (lookupd lists the leaders), keyed by the cluster, not the node.
    """
    out: dict[PartitionKey, PartitionInfo] = {}
    outcome: dict[str, Exception | None] = {}
    for topic in opts.topics:
        addresses = list(opts.nsqd) or lookup_nsqd(opts.lookupd, topic, opts.timeout)
        found = False
        for address in addresses:
            try:
                with NsqdHttp(address, opts.timeout, opts.tls) as conn:
                    marks = conn.watermarks(topic)
            except NsqHttpError as exc:
                if batch or exc.status:
                    raise
                # a stream goes on without it: its partitions keep their offsets until a
                # node answers for them again (in a cluster, a new leader within seconds)
                outcome[address] = exc
                continue
            outcome.setdefault(address, None)
            if marks is None:
                continue
            found = True
            for m in marks:
                key = (topic, m.node, m.partition)
                if not m.leader:  # (a cluster replica led elsewhere: its leader is asked)
                    continue
                if key in out:
                    raise ConfigError(
                        f"{address} and {out[key].address} are the same nsqd ({m.node}): "
                        "give each nsqd once"
                    )
                out[key] = PartitionInfo(topic, m.node, m.partition, address, m.low, m.high)
        if batch and not found:
            where = ",".join(addresses) or f"any nsqd known to {','.join(opts.lookupd)}"
            raise TopicNotFound(f"topic {topic} not found on {where}")
    (down or DownNodes()).look(outcome)
    return out


def _resolve(value: int, info: PartitionInfo) -> int:
    if value == EARLIEST:
        return info.low
    if value == LATEST:
        return info.high
    return value


def starting_offsets(
    opts: SourceOptions, infos: Mapping[PartitionKey, PartitionInfo], default: int
) -> dict[PartitionKey, int]:
    """Where each partition starts: startingTimestamp, else startingOffsets, else ``default``."""
    _check_named(opts, infos)
    out: dict[PartitionKey, int] = {}
    for key, info in sorted(infos.items()):
        if opts.starting_timestamp_ms is not None:
            with NsqdHttp(info.address, opts.timeout, opts.tls) as conn:
                out[key] = conn.offset_for_time(
                    info.topic, info.partition, opts.starting_timestamp_ms
                )
            continue
        value = opts.starting.lookup(key)
        out[key] = _resolve(default if value is None else value, info)
    return out


def _check_named(opts: SourceOptions, infos: Mapping[PartitionKey, PartitionInfo]) -> None:
    anywhere = {(topic, part) for topic, _, part in infos}
    for spec, name in ((opts.starting, "startingOffsets"), (opts.ending, "endingOffsets")):
        for topic, node, part in spec.offsets:
            known = (topic, part) in anywhere if not node else (topic, node, part) in infos
            if not known:
                where = f"{node}/{part}" if node else str(part)
                raise ConfigError(
                    f"option {name} names {topic} partition {where}, which does not exist"
                )


def _range(info: PartitionInfo, start: int, end: int) -> OffsetRange:
    return OffsetRange(info.topic, info.partition, info.address, start, end, info.node)


def split_ranges(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """Split the largest ranges in two until there are ``min_partitions`` (when possible)."""
    out = [r for r in ranges if r.size > 0]
    while len(out) < min_partitions:
        known = [r for r in out if r.start >= 0]  # an earliest (-2) start is not known yet
        biggest = max(known, key=lambda r: r.size, default=None)
        if biggest is None or biggest.size < 2:
            break
        middle = biggest.start + biggest.size // 2
        i = out.index(biggest)
        out[i : i + 1] = [replace(biggest, end=middle), replace(biggest, start=middle)]
    return out


def plan_batch(opts: SourceOptions) -> list[OffsetRange]:
    """The offset ranges of a batch read, from startingOffsets to endingOffsets."""
    infos = discover(opts, batch=True)
    starts = starting_offsets(opts, infos, EARLIEST)
    ranges = []
    for key, info in sorted(infos.items()):
        value = opts.ending.lookup(key)
        end = min(_resolve(LATEST if value is None else value, info), info.high)
        ranges.append(_range(info, starts[key], end))
    return split_ranges(ranges, opts.min_partitions)


class StreamPlanner:
    """The driver-side state of a stream: the last watermarks and the AvailableNow target."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.infos: dict[PartitionKey, PartitionInfo] = {}
        self.target: dict[PartitionKey, int] | None = None
        self.down = DownNodes()

    def refresh(self) -> dict[PartitionKey, PartitionInfo]:
        self.infos = discover(self.opts, batch=False, down=self.down)
        return self.infos

    def initial(self) -> OffsetDict:
        return to_offset_dict(starting_offsets(self.opts, self.refresh(), LATEST))

    def prepare_available_now(self) -> None:
        """Fix the target: what exists now, and nothing published later."""
        self.target = {key: info.high for key, info in self.refresh().items()}

    def latest_reported(self) -> OffsetDict | None:
        if not self.infos:
            return None
        return to_offset_dict({key: info.high for key, info in self.infos.items()})

    def latest(
        self, start_doc: Mapping[str, Mapping[str, int]], max_rows: int | None
    ) -> OffsetDict:
        """The end of the next micro-batch from ``start`` (``start`` itself when nothing new)."""
        start = from_offset_dict(start_doc)
        infos = self.refresh()
        end = dict(start)
        lags: dict[PartitionKey, int] = {}
        begin: dict[PartitionKey, int] = {}
        for key, info in infos.items():
            s = start.get(key)
            if s is None:  # a partition that appeared: Kafka reads new partitions from earliest
                s = info.low
                end[key] = s
            elif s > info.high and info.node.startswith(CLUSTER_NODE):
                # a new leader that has not learnt the last committed offset yet (a
                # failover): its committed offset only grows, wait for it
                continue
            elif s > info.high:
                self._went_back(key, s, info)
                s = end[key] = info.low
            top = info.high if self.target is None else min(info.high, self.target.get(key, s))
            begin[key] = max(s, info.low)
            lags[key] = max(0, top - begin[key])
        shares = lags if max_rows is None else split_limit(lags, max_rows)
        for key, take in shares.items():
            if take > 0:
                end[key] = begin[key] + take
        return to_offset_dict(end)

    def _went_back(self, key: PartitionKey, offset: int, info: PartitionInfo) -> None:
        message = (
            f"{info.topic}/{info.partition} on {info.node} ends at offset {info.high}, before the "
            f"checkpointed offset {offset}: the topic was deleted and created again"
        )
        if self.opts.fail_on_data_loss:
            raise DataLoss(message + "; set failOnDataLoss=false to read it again from earliest")
        log.warning("%s; reading it again from offset %d", message, info.low)

    def ranges(
        self, start_doc: Mapping[str, Mapping[str, int]], end_doc: Mapping[str, Mapping[str, int]]
    ) -> list[OffsetRange]:
        start, end = from_offset_dict(start_doc), from_offset_dict(end_doc)
        if any(key not in self.infos for key in end):
            self.refresh()
        out = []
        for key, stop in sorted(end.items()):
            begin = start.get(key, EARLIEST)
            if begin == stop:  # nothing to read (e.g. a node that is down keeps its offset)
                continue
            if begin > stop:  # the partition went back (see _went_back): read it again
                begin = EARLIEST
            info = self.infos.get(key)
            if info is None:
                raise ConfigError(f"{key[0]} {key[1]}/{key[2]} is in the checkpoint but on no nsqd")
            out.append(_range(info, begin, stop))
        return split_ranges(out, self.opts.min_partitions)
