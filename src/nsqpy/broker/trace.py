"""Message tracing: the events of traced topics and channels, written off the event loop.

Owns ``Tracer``. A traced topic records each publish; a traced channel (or every channel
of a traced topic) records deliveries, requeues, timeouts, finishes, dead letters and
expiries. Recording an event (the loop thread) appends its offset and attempt to the open
burst, a ``_Burst`` of the same event of one channel part, client, time and detail (a pump
delivering to one client, a run of FINs); another event starts the next. A writer thread
takes the bursts closed so far every ``flush_ms`` (and the open one, which it writes a
moment later, once the loop thread cannot be half-way through adding to it) and appends
them to the ``TraceStore`` in one transaction, one row per burst: so SQLite never runs on
the event loop, tracing costs the loop a few list appends per event, and nothing happens
at all while nothing is traced (the channel's ``policy.tracer`` is None). The trace ID of
an event is the one in the message's log record: from the record's stored extension
when the caller has it at hand (a delivery, an in-flight message), else read from the log
once per message and remembered in a bounded map; so a trace ID given at publish time and
one a later reader finds in the log are the same.
Offsets are per partition: the ``topic`` an event is about is a topic's ``Partition``
(its name, number and log: ``TracedPartition``, as the channel's is in ``TracedChannel``),
and a message is known by (topic name, partition, offset). Must not import asyncio or any
server, nor the topic, partition and channel modules it traces (those Protocols are what
it reads of them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nsqpy.broker.health import Health
from nsqpy.errors import StorageError
from nsqpy.protocol.message import encode_message_id, try_decode_message_id
from nsqpy.storage import MemoryLog, OffsetOutOfRange, PartitionLog
from nsqpy.storage.records import EXT
from nsqpy.storage.tracestore import TraceBatch, TraceEvent, TraceStore

if TYPE_CHECKING:
    from nsqpy.broker.client import Client

log = logging.getLogger("nsqpy.broker")

TRACE_FILE = "trace.sqlite"
_TRACE_ID_CACHE = 100_000
_READ_AHEAD = 256
_BURST_MAX = 4096  # events in one row at most
_SETTLE_S = 0.005  # how long the writer leaves a burst it took open before reading it
_trace_id_in = EXT.unpack_from  # (trace id, key length) of a stored extension


class TracedPartition(Protocol):
    """A topic partition as the tracer reads it (``broker.partition.Partition``)."""

    @property
    def name(self) -> str: ...  # the topic's
    @property
    def partition(self) -> int: ...
    @property
    def ephemeral(self) -> bool: ...
    @property
    def log(self) -> PartitionLog | MemoryLog: ...
    def extras(self, offset: int) -> tuple[int, bytes, bytes]: ...


class TracedChannel(Protocol):
    """A channel's part over one partition (``broker.channel_partition.ChannelPartition``)."""

    @property
    def name(self) -> str: ...
    @property
    def topic(self) -> TracedPartition: ...  # the partition it reads


def client_label(client: Client | str | None) -> str:
    """How an event names its client: ``client_id@remote_address`` (or the given text)."""
    if client is None or isinstance(client, str):
        return client or ""
    return f"{client.client_id}@{client.remote_address}"


class _Burst:
    """Events of one kind, channel part (or topic partition), client, time and detail."""

    __slots__ = ("attempts", "channel", "client", "detail", "event", "offsets", "part", "tids",
                 "ts")  # fmt: skip

    def __init__(
        self, part: TracedPartition, channel: str, event: str, client: Client | str | None,
        ts: int, detail: str,
    ) -> None:  # fmt: skip
        self.part = part
        self.channel = channel
        self.event = event
        self.client = client
        self.ts = ts
        self.detail = detail
        self.offsets: list[int] = []
        self.attempts: list[int] = []
        self.tids: dict[int, int] = {}

    def size(self) -> int:
        """Events complete in it (the loop thread adds the offset, then the attempt)."""
        return min(len(self.offsets), len(self.attempts))

    def batch(self, start: int, end: int) -> TraceBatch:
        """Its events ``start`` to ``end`` as a store batch (copies: the loop thread may
        still be adding to a burst the writer took open)."""
        offsets = self.offsets[start:end]
        tids = dict(self.tids)
        if len(tids) > 0 and (start or end < len(self.offsets)):
            kept = set(offsets)
            tids = {o: t for o, t in tids.items() if o in kept}
        return TraceBatch(self.ts, self.part.name, self.channel, self.part.partition, self.event,
                          client_label(self.client), self.detail, offsets,
                          self.attempts[start:end], tids)  # fmt: skip


class Tracer:
    """Buffers trace events and writes them to the store from a thread of its own."""

    def __init__(
        self,
        data_path: Path,
        max_records: int,
        flush_ms: int = 100,
        *,
        health: Health | None = None,
    ) -> None:
        self.path = data_path / TRACE_FILE
        self.health = health  # where a failed write is reported (logged once per change)
        self.max_records = max_records
        self.flush_s = flush_ms / 1000
        self._store: TraceStore | None = None
        self._opening = threading.Lock()
        self._pending: deque[_Burst] = deque()  # closed bursts
        self._open: _Burst | None = None  # the burst events are added to
        self._taking = threading.Lock()  # closing the open burst: the loop or the writer
        self._taken: list[tuple[_Burst, int]] = []  # the burst the writer took open, written so far
        self._open_key: tuple[object, ...] = ()
        self._trace_ids: dict[tuple[str, int, int], int] = {}
        self._wake = threading.Condition()
        self._written = 0  # events handed to the store
        self._queued = 0  # events recorded
        self._closing = False
        self._thread: threading.Thread | None = None
        self.errors = 0

    # -- lifecycle -------------------------------------------------------------------

    @property
    def store(self) -> TraceStore:
        with self._opening:  # the loop thread and a query thread may both open it
            if self._store is None:
                self._store = TraceStore(self.path, self.max_records, _message_id)
            return self._store

    def _start(self) -> None:
        if self._thread is None:
            self.store  # noqa: B018 - open (and create) the file before the thread uses it
            self._thread = threading.Thread(target=self._run, name="nsqpy-trace", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Write what is pending and stop the writer (the loop thread)."""
        self._close_burst()
        thread = self._thread
        if thread is not None:
            with self._wake:
                self._closing = True
                self._wake.notify()
            thread.join(10.0)
            self._thread = None
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- recording (loop thread) -----------------------------------------------------

    def _burst(
        self, part: TracedPartition, channel: object, name: str, event: str,
        client: Client | str | None, now: int, detail: str,
    ) -> _Burst:  # fmt: skip
        """The open burst if this event belongs to it, else a new one (the open one closed)."""
        key = (channel, event, client, now, detail)
        burst = self._open
        if burst is None or self._open_key != key or len(burst.offsets) >= _BURST_MAX:
            if self._thread is None:
                self._start()
            self._close_burst()
            burst = self._open = _Burst(part, name, event, client, now, detail)
            self._open_key = key
        return burst

    def _close_burst(self) -> None:
        with self._taking:  # (the writer may be taking it: one of the two does)
            burst, self._open = self._open, None
        if burst is not None:
            self._pending.append(burst)

    def trace_id_of(self, topic: TracedPartition, offset: int) -> int:
        """The trace ID in the record at ``offset`` (0 when none or unreadable)."""
        key = (topic.name, topic.partition, offset)
        tid = self._trace_ids.get(key)
        if tid is not None:
            return tid
        try:  # read ahead: the next events are mostly about the next offsets
            records = topic.log.read(offset, _READ_AHEAD, 1 << 18)
        except (OffsetOutOfRange, StorageError, OSError):
            records = []
        tid = 0
        for record in records:
            self._remember((topic.name, topic.partition, record.offset), record.trace_id)
            if record.offset == offset:
                tid = record.trace_id
        if not tid and topic.ephemeral:  # its log lets go of what the channels took
            tid = topic.extras(offset)[0]
        self._remember(key, tid)
        return tid

    def _remember(self, key: tuple[str, int, int], tid: int) -> None:
        if len(self._trace_ids) >= _TRACE_ID_CACHE:
            self._trace_ids.clear()
        self._trace_ids[key] = tid

    def forget_topic(self, name: str) -> None:
        """A deleted topic's offsets will be used again: drop its remembered trace IDs."""
        self._trace_ids = {k: v for k, v in self._trace_ids.items() if k[0] != name}

    def published(
        self,
        topic: TracedPartition,
        first: int,
        count: int,
        source: Client | str | None,
        trace_ids: Sequence[int] | int,
        now: int,
    ) -> None:
        """``count`` messages from ``first`` were appended (not yet flushed) with these IDs."""
        burst = self._burst(topic, topic, "", "published", source, now, "")
        part = topic.partition
        burst.offsets.extend(range(first, first + count))
        burst.attempts.extend([0] * count)
        if isinstance(trace_ids, int):
            trace_ids = [trace_ids] * count if trace_ids else ()
        for offset, tid in zip(range(first, first + count), trace_ids, strict=False):
            if tid:
                self._remember((topic.name, part, offset), tid)
                burst.tids[offset] = tid
        self._queued += count

    def channel_event(
        self,
        channel: TracedChannel,
        offset: int,
        event: str,
        client: Client | None,
        attempts: int,
        now: int,
        detail: str = "",
        ext: bytes | None = None,
    ) -> None:
        """One event of a channel; ``ext``: the record's stored extension when at hand (b"":
        it has none), else its trace ID is read from the log."""
        topic = channel.topic
        tid = self.trace_id_of(topic, offset) if ext is None else _trace_id_in(ext)[0] if ext else 0
        burst = self._open
        if (burst is None or self._open_key[0] is not channel or self._open_key[1] != event
                or self._open_key[2] is not client or self._open_key[3] != now
                or self._open_key[4] != detail or len(burst.offsets) >= _BURST_MAX):  # fmt: skip
            burst = self._burst(topic, channel, channel.name, event, client, now, detail)
        burst.offsets.append(offset)
        burst.attempts.append(attempts)
        if tid:
            burst.tids[offset] = tid
        self._queued += 1

    def channel_events(
        self,
        channel: TracedChannel,
        event: str,
        client: Client,
        now: int,
        offsets: list[int],
        attempts: list[int] | int,
        exts: list[bytes],
    ) -> None:
        """``channel_event`` for many messages at once, of one client and time (a pump's
        deliveries to it, a run of its FINs): ``attempts`` per message or one for all,
        ``exts`` their records' stored extensions (at hand, as for delivery and FIN)."""
        burst = self._open
        key = self._open_key
        if (burst is None or key[0] is not channel or key[1] != event or key[2] is not client
                or key[3] != now or key[4] != "" or len(burst.offsets) >= _BURST_MAX):  # fmt: skip
            burst = self._burst(channel.topic, channel, channel.name, event, client, now, "")
        burst.offsets.extend(offsets)
        burst.attempts.extend([attempts] * len(offsets) if isinstance(attempts, int) else attempts)
        if any(exts):  # (the usual message carries no extension: no trace id to look for)
            tids = burst.tids
            for offset, ext in zip(offsets, exts, strict=True):
                if ext:
                    tid = _trace_id_in(ext)[0]
                    if tid:
                        tids[offset] = tid
        self._queued += len(offsets)

    # -- writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._closing:
                    self._wake.wait(self.flush_s)
                closing = self._closing
            self._write()
            if closing:
                self._write()
                return

    def _write(self) -> None:
        pending = self._pending
        bursts: list[_Burst] = []
        while pending:  # popleft is atomic: the loop thread may append meanwhile
            bursts.append(pending.popleft())
        with self._taking:  # the open burst: closed here; the loop thread starts another
            taken, self._open = self._open, None
        if taken is not None:
            time.sleep(_SETTLE_S)  # (an event being added to it when taken lands first)
            bursts.append(taken)
        batches = []
        for burst, done in self._taken:  # an event added later still to a burst taken open
            if burst.size() > done:
                batches.append(burst.batch(done, burst.size()))
        self._taken = [(taken, taken.size())] if taken is not None else []
        batches += [b.batch(0, b.size()) for b in bursts]
        count = sum(len(b.offsets) for b in batches)
        if not count:
            return
        try:
            self.store.append_batches(batches)
        except StorageError as exc:
            self.errors += 1
            if self.health is not None:  # those events are lost: nothing retries them
                self.health.failed_once("failed to write trace events", exc)
            else:
                log.error("trace: %d events were not written: %s", count, exc)
        else:
            if self.health is not None and self.health.error:
                self.health.ok()
        with self._wake:
            self._written += count
            self._wake.notify_all()

    def sync(self, timeout: float = 5.0) -> bool:
        """Wait (from any thread but the writer) until what was recorded so far is written."""
        if self._thread is None:
            return True
        target = self._queued
        with self._wake:
            self._wake.notify_all()
            return self._wake.wait_for(lambda: self._written >= target, timeout)

    # -- queries (any thread) --------------------------------------------------------

    def by_message(self, topic: str, msg_id: str, limit: int = 1000) -> list[TraceEvent]:
        where = try_decode_message_id(msg_id.encode())
        if where is None or not self._store_exists():
            return []
        return self.store.by_message(topic, where[0], where[1], limit)

    def by_trace_id(
        self, trace_id: int, topic: str | None = None, limit: int = 1000
    ) -> list[TraceEvent]:
        return self.store.by_trace_id(trace_id, topic, limit) if self._store_exists() else []

    def _store_exists(self) -> bool:
        return self._store is not None or self.path.exists()


def _message_id(partition: int, offset: int) -> str:
    return encode_message_id(partition, offset).decode()
