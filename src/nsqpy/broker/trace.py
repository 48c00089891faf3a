"""Message tracing: the events of traced topics and channels, written off the event loop.

Owns ``Tracer``. A traced topic records each publish; a traced channel (or every channel
of a traced topic) records deliveries, requeues, timeouts, finishes, dead letters and
expiries. Recording an event appends a tuple to a list (the loop thread); a writer thread
takes the list every ``flush_ms`` and appends it to the ``TraceStore`` in one transaction,
so SQLite never runs on the event loop and nothing happens at all while nothing is
traced (the channel's ``policy.tracer`` is None). The trace ID of an event is the one in
the message's log record (read once per message and remembered in a bounded map), so a
trace ID given at publish time and one a later reader finds in the log are the same.
Offsets are per partition: the ``topic`` an event is about is a topic's ``Partition``
(its name, number and log: ``TracedPartition``, as the channel's is in ``TracedChannel``),
and a message is known by (topic name, partition, offset). Must not import asyncio or any
server, nor the topic, partition and channel modules it traces (those Protocols are what
it reads of them).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nsqpy.broker.health import Health
from nsqpy.errors import StorageError
from nsqpy.protocol.message import encode_message_id
from nsqpy.storage import MemoryLog, OffsetOutOfRange, PartitionLog
from nsqpy.storage.tracestore import TraceEvent, TraceStore

if TYPE_CHECKING:
    from nsqpy.broker.client import Client

log = logging.getLogger("nsqpy.broker")

TRACE_FILE = "trace.sqlite"
_TRACE_ID_CACHE = 100_000
_READ_AHEAD = 256


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
        self._pending: deque[TraceEvent] = deque()
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
                self._store = TraceStore(self.path, self.max_records)
            return self._store

    def _start(self) -> None:
        if self._thread is None:
            self.store  # noqa: B018 - open (and create) the file before the thread uses it
            self._thread = threading.Thread(target=self._run, name="nsqpy-trace", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Write what is pending and stop the writer."""
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

    def _add(self, event: TraceEvent) -> None:
        if self._thread is None:
            self._start()
        self._pending.append(event)
        self._queued += 1

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
        label = client_label(source)
        part = topic.partition
        for i, offset in enumerate(range(first, first + count)):
            msg_id = encode_message_id(part, offset).decode()
            tid = trace_ids if isinstance(trace_ids, int) else trace_ids[i]
            self._remember((topic.name, part, offset), tid)
            self._add(TraceEvent(now, topic.name, "", part, offset, msg_id, tid,
                                 "published", label, 0))  # fmt: skip

    def channel_event(
        self,
        channel: TracedChannel,
        offset: int,
        event: str,
        client: Client | None,
        attempts: int,
        now: int,
        detail: str = "",
    ) -> None:
        topic = channel.topic
        part = topic.partition
        msg_id = encode_message_id(part, offset).decode()
        tid = self.trace_id_of(topic, offset)
        self._add(TraceEvent(now, topic.name, channel.name, part, offset, msg_id, tid,
                             event, client_label(client), attempts, detail))  # fmt: skip

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
        batch: list[TraceEvent] = []
        while pending:  # popleft is atomic: the loop thread may append meanwhile
            batch.append(pending.popleft())
        if not batch:
            return
        try:
            self.store.append(batch)
        except StorageError as exc:
            self.errors += 1
            if self.health is not None:  # those events are lost: nothing retries them
                self.health.failed_once("failed to write trace events", exc)
            else:
                log.error("trace: %d events were not written: %s", len(batch), exc)
        else:
            if self.health is not None and self.health.error:
                self.health.ok()
        with self._wake:
            self._written += len(batch)
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
        return self.store.by_message(topic, msg_id, limit) if self._store_exists() else []

    def by_trace_id(
        self, trace_id: int, topic: str | None = None, limit: int = 1000
    ) -> list[TraceEvent]:
        return self.store.by_trace_id(trace_id, topic, limit) if self._store_exists() else []

    def _store_exists(self) -> bool:
        return self._store is not None or self.path.exists()
