"""A channel: a cursor over its topic's log, the in-flight table and the deferred set.

A channel copies nothing. It reads the topic log from ``cursor.next_read``, hands each
message to one of its consumers (round robin among those whose RDY window has room),
and remembers it in flight (offset -> owner, attempts, deadline) until FIN, REQ or the
timeout. FIN confirms the offset in the cursor; out-of-order confirmations are kept as
ranges. REQ without delay puts the message in a small in-memory requeue list; REQ with
a delay and DPUB'd messages go to the deferred set (durable for durable topics), which
takes them out of the cursor's window. Time is given, never read: every method that
needs "now" takes it. Must not import asyncio, sockets or any server.
"""

from __future__ import annotations

import heapq
import logging
import random
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nsqpy.broker.client import Client
from nsqpy.broker.deferred import Deferred, MemoryDeferred
from nsqpy.errors import FinFailed, ReqFailed, StorageError, TouchFailed
from nsqpy.protocol.message import encode_message_frame, encode_message_id
from nsqpy.protocol.state import CLOSING, SUBSCRIBED
from nsqpy.storage import CursorFile, CursorState, OffsetOutOfRange

if TYPE_CHECKING:
    from nsqpy.broker.topic import Topic

log = logging.getLogger("nsqpy.broker")

# How many records one pump pass reads from the log at most.
READ_BATCH = 512
FROM_LOG, FROM_DEFERRED = 0, 1


@dataclass(slots=True)
class InFlight:
    client: Client
    attempts: int
    deadline: int
    delivered: int
    timestamp: int
    body: bytes
    source: int


class Channel:
    """One channel of a topic partition (partition 0 on a single node)."""

    def __init__(
        self,
        topic: Topic,
        name: str,
        cursor: CursorState,
        cursor_file: CursorFile | None,
        deferred: Deferred | None = None,
    ) -> None:
        self.topic = topic
        self.name = name
        self.ephemeral = name.endswith("#ephemeral")
        self.cursor = cursor
        self.cursor_file = cursor_file
        self.deferred: Deferred = deferred if deferred is not None else MemoryDeferred()
        self.paused = False
        self.deleted = False
        self.consumers: list[Client] = []
        self.in_flight: dict[int, InFlight] = {}
        self._timeouts: list[tuple[int, int]] = []
        self._requeued: deque[tuple[int, int, int, bytes]] = deque()
        self._leased = 0  # deferred entries currently in flight
        self._rr = 0
        self._unsaved = 0
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.finish_count = 0
        self.e2e_latencies: list[int] = []

    # -- consumers -------------------------------------------------------------------

    def add_consumer(self, client: Client) -> None:
        self.consumers.append(client)
        client.channel = self

    def remove_consumer(self, client: Client, now: int) -> None:
        """Forget a client; what it had in flight is requeued at once."""
        if client in self.consumers:
            self.consumers.remove(client)
        for offset, item in list(self.in_flight.items()):
            if item.client is client:
                self._back_to_queue(offset, item, now)
        client.in_flight_count = 0

    # -- delivery --------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Messages waiting to be delivered (not in flight, not deferred)."""
        backlog = self.topic.log.flushed_offset - self.cursor.next_read
        return max(0, backlog) + len(self._requeued)

    def pump(self, now: int) -> int:
        """Deliver what the consumers' RDY windows admit; returns how many were sent."""
        if self.paused or not self.consumers:
            return 0
        ready = [c for c in self.consumers if c.capacity > 0 and c.state == SUBSCRIBED]
        if not ready:
            return 0
        sent = 0
        if self._requeued:
            sent += self._pump_requeued(ready, now)
        if ready and not self.topic.paused:
            sent += self._pump_log(ready, now)
        return sent

    def _next_client(self, ready: list[Client]) -> Client:
        self._rr = (self._rr + 1) % len(ready)
        return ready[self._rr]

    def _pump_requeued(self, ready: list[Client], now: int) -> int:
        sent = 0
        while self._requeued and ready:
            offset, attempts, timestamp, body = self._requeued.popleft()
            client = self._next_client(ready)
            self._deliver(client, offset, attempts + 1, timestamp, body, FROM_LOG, now)
            sent += 1
            if client.capacity <= 0:
                ready.remove(client)
        return sent

    def _pump_log(self, ready: list[Client], now: int) -> int:
        log_ = self.topic.log
        cursor = self.cursor
        sent = 0
        while ready and cursor.next_read < log_.flushed_offset:
            want = min(READ_BATCH, sum(c.capacity for c in ready))
            try:
                records = log_.read(cursor.next_read, want)
            except OffsetOutOfRange as exc:
                log.warning(
                    "channel %s/%s: offsets %d..%d were removed; skipping to %d",
                    self.topic.name, self.name, cursor.next_read, exc.low - 1, exc.low,
                )
                cursor.next_read = exc.low
                if cursor.confirmed < exc.low:
                    cursor.reset(exc.low)
                continue
            if not records:
                break
            for rec in records:
                offset = rec.offset
                cursor.next_read = offset + 1
                if cursor.ranges and cursor.is_confirmed(offset):
                    continue
                if rec.deliver_at > now:
                    self.message_count += 1
                    self._defer(offset, rec.deliver_at, 0, rec.timestamp, rec.body)
                    continue
                self.message_count += 1
                client = self._next_client(ready)
                if client.sample_rate and random.randint(0, 99) > client.sample_rate:
                    self._confirm(offset)
                    continue
                self._deliver(client, offset, 1, rec.timestamp, rec.body, FROM_LOG, now)
                sent += 1
                if client.capacity <= 0:
                    ready.remove(client)
                    if not ready:
                        break
        return sent

    def _deliver(
        self,
        client: Client,
        offset: int,
        attempts: int,
        timestamp: int,
        body: bytes,
        source: int,
        now: int,
    ) -> None:
        deadline = now + client.msg_timeout_ns
        self.in_flight[offset] = InFlight(client, attempts, deadline, now, timestamp, body, source)
        heapq.heappush(self._timeouts, (deadline, offset))
        client.in_flight_count += 1
        client.message_count += 1
        msg_id = encode_message_id(self.topic.partition, offset)
        client.sink.send_message(encode_message_frame(timestamp, attempts, msg_id, body))

    def _defer(self, offset: int, deliver_at: int, attempts: int, timestamp: int, body: bytes) -> None:
        """Move a message out of the cursor's window into the deferred set."""
        self.deferred.put(offset, deliver_at, attempts, timestamp, body)
        self._confirm(offset)

    def _confirm(self, offset: int) -> None:
        if self.cursor.confirm(offset):
            self._unsaved += 1

    # -- FIN / REQ / TOUCH -----------------------------------------------------------

    def _owned(self, client: Client, offset: int, error: type[FinFailed | ReqFailed | TouchFailed], verb: str, msg_id: bytes) -> InFlight:
        item = self.in_flight.get(offset)
        if item is None:
            raise error(f"{verb} {msg_id.decode(errors='replace')} failed ID not in flight")
        if item.client is not client:
            raise error(f"{verb} {msg_id.decode(errors='replace')} failed client does not own message")
        return item

    def finish(self, client: Client, offset: int, msg_id: bytes, now: int) -> None:
        item = self._owned(client, offset, FinFailed, "FIN", msg_id)
        del self.in_flight[offset]
        client.in_flight_count -= 1
        client.finish_count += 1
        self.finish_count += 1
        if item.source == FROM_DEFERRED:
            self.deferred.remove(offset)
            self._leased -= 1
        else:
            self._confirm(offset)
        if len(self.e2e_latencies) < 100_000:
            self.e2e_latencies.append(now - item.timestamp)

    def requeue(self, client: Client, offset: int, msg_id: bytes, delay_ms: int, now: int) -> None:
        item = self._owned(client, offset, ReqFailed, "REQ", msg_id)
        del self.in_flight[offset]
        client.in_flight_count -= 1
        client.requeue_count += 1
        self.requeue_count += 1
        if delay_ms <= 0:
            self._back_to_queue(offset, item, now, in_flight_removed=True)
            return
        deliver_at = now + delay_ms * 1_000_000
        if item.source == FROM_DEFERRED:
            self._leased -= 1
            self.deferred.put(offset, deliver_at, item.attempts, item.timestamp, item.body)
        else:
            self._defer(offset, deliver_at, item.attempts, item.timestamp, item.body)

    def touch(self, client: Client, offset: int, msg_id: bytes, now: int, max_msg_timeout_ns: int) -> None:
        item = self._owned(client, offset, TouchFailed, "TOUCH", msg_id)
        deadline = min(now + client.msg_timeout_ns, item.delivered + max_msg_timeout_ns)
        item.deadline = deadline
        heapq.heappush(self._timeouts, (deadline, offset))
        if item.source == FROM_DEFERRED:
            self.deferred.put(offset, deadline, item.attempts, item.timestamp, item.body)

    def _back_to_queue(self, offset: int, item: InFlight, now: int, in_flight_removed: bool = False) -> None:
        """Make an in-flight message deliverable again at once (timeout, REQ 0, client gone)."""
        if not in_flight_removed:
            self.in_flight.pop(offset, None)
        if item.source == FROM_DEFERRED:
            self._leased -= 1
            self.deferred.put(offset, now, item.attempts, item.timestamp, item.body)
        else:
            self._requeued.append((offset, item.attempts, item.timestamp, item.body))

    # -- timers ----------------------------------------------------------------------

    def scan(self, now: int) -> int:
        """Time out expired in-flight messages and pull due deferred ones; returns work done."""
        work = 0
        heap = self._timeouts
        while heap and heap[0][0] <= now:
            deadline, offset = heapq.heappop(heap)
            item = self.in_flight.get(offset)
            if item is None or item.deadline != deadline:
                continue
            item.client.in_flight_count -= 1
            self.timeout_count += 1
            self._back_to_queue(offset, item, now)
            work += 1
        work += self._pull_due(now)
        return work

    def _pull_due(self, now: int) -> int:
        if self.paused:
            return 0
        ready = [c for c in self.consumers if c.capacity > 0 and c.state == SUBSCRIBED]
        room = sum(c.capacity for c in ready)
        if room <= 0:
            return 0
        sent = 0
        for due in self.deferred.due(now, room):
            body, timestamp = due.body, due.timestamp
            if body is None:
                try:
                    recs = self.topic.log.read(due.offset, 1)
                except (OffsetOutOfRange, StorageError):
                    recs = []
                if not recs or recs[0].offset != due.offset:
                    self.deferred.remove(due.offset)
                    continue
                body, timestamp = recs[0].body, recs[0].timestamp
            if not ready:
                self.deferred.put(due.offset, now, due.attempts, timestamp, body)
                continue
            client = self._next_client(ready)
            self._deliver(client, due.offset, due.attempts + 1, timestamp, body, FROM_DEFERRED, now)
            self.deferred.put(
                due.offset, self.in_flight[due.offset].deadline, due.attempts + 1, timestamp, body
            )
            self._leased += 1
            sent += 1
            if client.capacity <= 0:
                ready.remove(client)
        return sent

    def next_deadline(self) -> int | None:
        candidates = []
        if self._timeouts:
            candidates.append(self._timeouts[0][0])
        nd = self.deferred.next_due()
        if nd is not None:
            candidates.append(nd)
        return min(candidates) if candidates else None

    # -- cursor persistence, empty, stats --------------------------------------------

    def maybe_save_cursor(self, force: bool = False) -> None:
        if self.cursor_file is None:
            return
        n, self._unsaved = self._unsaved, 0
        if self.cursor_file.note(n) or (force and n) or force:
            self.cursor_file.save(self.cursor)

    def empty(self, now: int) -> None:
        """Drop everything: backlog, requeued, deferred and in flight (NSQ's /channel/empty)."""
        del now
        for item in self.in_flight.values():
            item.client.in_flight_count = max(0, item.client.in_flight_count - 1)
        self.in_flight.clear()
        self._timeouts.clear()
        self._requeued.clear()
        self.deferred.clear()
        self._leased = 0
        self.cursor.reset(self.topic.log.flushed_offset)
        self._unsaved += 1
        self.maybe_save_cursor(force=True)

    def reset_to(self, offset: int) -> None:
        """Replay: move the cursor to ``offset``; in-flight messages are forgotten safely."""
        for item in self.in_flight.values():
            item.client.in_flight_count = max(0, item.client.in_flight_count - 1)
        self.in_flight.clear()
        self._timeouts.clear()
        self._requeued.clear()
        self.cursor.reset(offset)
        self._unsaved += 1
        self.maybe_save_cursor(force=True)

    @property
    def deferred_count(self) -> int:
        return max(0, self.deferred.count() - self._leased)

    @property
    def in_flight_count(self) -> int:
        return len(self.in_flight)

    def close_consumers(self) -> None:
        for client in list(self.consumers):
            client.state = CLOSING
            client.sink.close_by_server()
        self.consumers.clear()
