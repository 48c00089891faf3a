"""A channel's part over one partition's log: ``ChannelPartition``.

A channel (``broker.channel.Channel``) has one per partition of its topic. It copies
nothing: it reads the partition's log from ``cursor.next_read`` up to ``readable_end`` (a
paused topic holds what came after the pause), hands each message to one of its consumers
(round robin among those whose RDY window has room) and keeps it in flight (``InFlight``,
one heap of deadlines) until FIN, REQ or the timeout. FIN confirms the offset in the
cursor (out of order: as ranges); REQ without delay puts it in a small in-memory requeue
list; REQ with a delay, and DPUB, move it to the deferred set, delivered from here when
due. What reaches the readable end is counted as put into the channel (``message_count``);
an ephemeral channel, and every channel of an ephemeral topic, keeps at most
``mem_queue_size`` of it and drops the newest rest, as NSQ's full memory queue does; a
channel of an ephemeral topic copies what it keeps into its own ``MemoryQueue``. It owns
two helpers, each given what it needs: ``deferral`` (``broker.channel_deferral``: DPUBs
deferred on arrival, delayed messages the read meets, leases, the cursor file, what the
stores refuse) and ``policy_paths`` (``broker.channel_policy``: dead letters, TTL expiry,
the depth bound's drops, as the shared ``ChannelPolicy`` says). ``reset_to`` is replay.
The part of a partition this node follows (cluster mode) delivers nothing, from its log or
its deferred set, whatever its log holds.
Time is given, never read. Must not import asyncio, sockets or any server, nor the
partition or channel that hold it (``PartitionView`` is what it reads of its partition).
"""

from __future__ import annotations

import heapq
import random
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence

from nsqpy.broker.channel_deferral import ChannelDeferral, PartitionView
from nsqpy.broker.channel_policy import PolicyPaths
from nsqpy.broker.client import Client
from nsqpy.broker.deferred import Deferred, Entry, MemoryDeferred
from nsqpy.broker.e2e import LatencyWindow
from nsqpy.broker.inflight import FROM_DEFERRED, FROM_LOG, InFlight, push_timeout, stored_ext
from nsqpy.broker.memqueue import MemoryQueue
from nsqpy.broker.policy import ChannelPolicy
from nsqpy.errors import FinFailed, ReqFailed, StorageError, TouchFailed
from nsqpy.protocol.extend import dispatch_tag
from nsqpy.protocol.message import OFFSET_BITS, message_frame
from nsqpy.protocol.state import CLOSING, SUBSCRIBED
from nsqpy.storage import CursorFile, CursorSnapshot, CursorState, OffsetOutOfRange
from nsqpy.storage.records import parse_extension

__all__ = ["READ_BATCH", "ChannelPartition"]

# How many records one pump pass reads from the log at most.
READ_BATCH = 512


class ChannelPartition:
    """A channel's part over one partition's log (``Channel`` holds one per partition)."""

    def __init__(
        self,
        topic: PartitionView,
        name: str,
        cursor: CursorState,
        cursor_file: CursorFile | None,
        deferred: Deferred | None = None,
        *,
        counted_from: int | None = None,
    ) -> None:
        self.topic = topic  # the topic partition it reads (its log, DPUB notes, health)
        self.name = name
        self.number = topic.number  # the partition's (the channel finds its parts by it)
        self._id_base = topic.partition << OFFSET_BITS  # message ID = base | offset
        self.ephemeral = name.endswith("#ephemeral")
        # NSQ's per-channel memory queue: an ephemeral channel, or any channel of an
        # ephemeral topic, holds at most mem_queue_size; the latter in its own queue.
        self.bounded = self.ephemeral or topic.ephemeral
        self.queue = MemoryQueue() if topic.ephemeral else None
        self.cursor = cursor
        self.cursor_file = cursor_file
        self.deferred: Deferred = deferred if deferred is not None else MemoryDeferred()
        self.paused = False
        self.deleted = False
        self.consumers: list[Client] = []
        # In flight, in insertion order. While every entry went in with a deadline no
        # earlier than those before it (one msg_timeout for every client: the usual case),
        # that is deadline order and the timeout scan reads it from the front; the first
        # entry out of order switches to a heap of deadlines until nothing is in flight.
        self.in_flight: dict[int, InFlight] = {}
        self._timeouts: list[tuple[int, int]] | None = None  # the heap, when out of order
        self._last_deadline = 0
        self._requeued: deque[tuple[int, int, int, bytes, bytes]] = deque()
        self._rr = 0
        self._unsaved = 0
        self._adopted: tuple[Entry, ...] | None = None  # the deferred entries last adopted
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.finish_count = 0
        self.dropped_count = 0
        # DPUBs deferred on arrival, delayed messages the read meets, leases, the cursor
        # file and the failures of both (broker.channel_deferral)
        self.deferral = ChannelDeferral(
            topic, name, cursor, cursor_file, self.deferred, self.queue,
            confirm=self._confirm, pick_client=self._pick_client,
            tagged=lambda: self._tags() is not None, deliver=self._deliver,
        )  # fmt: skip
        # Beyond NSQ (broker.policy): dead letters, TTL expiry, the topic's depth bound.
        self.policy = ChannelPolicy()  # (one object shared by the channel's partitions)
        self.policy_paths = PolicyPaths(self, cursor, self.in_flight, self.deferral, self._confirm)
        # Set by the broker when --e2e-processing-latency-percentile is given.
        self.e2e: LatencyWindow | None = None
        # Offsets below this have been counted as put into the channel (or dropped).
        self._arrived = cursor.next_read if counted_from is None else counted_from

    # -- consumers -------------------------------------------------------------------

    def add_consumer(self, client: Client) -> None:
        self.consumers.append(client)
        client.channel = self

    def remove_consumer(self, client: Client, now: int) -> None:
        """Forget a client; what it had in flight is requeued at once."""
        if client in self.consumers:
            self.consumers.remove(client)
        for offset, item in list(self.in_flight.items()):
            if item.client is client and not self._exhausted(offset, item, "disconnected", now):
                self._back_to_queue(offset, item, now)
        client.in_flight_count = 0

    # -- delivery --------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Messages waiting to be delivered (not in flight, not deferred, not dropped)."""
        waiting = self._backlog(self.topic.readable_end) - self.deferral.ahead_count()
        return max(0, waiting) + len(self._requeued)

    def _backlog(self, end: int) -> int:
        """Unread offsets below ``end`` that are still to be delivered."""
        start = self.cursor.next_read
        if self.queue is None:  # (an ephemeral topic forgets what its channels have taken)
            start = max(start, self.topic.log.low_watermark)
        backlog = end - start
        if backlog <= 0:
            return 0
        ranges = self.cursor.ranges
        if ranges:
            i = max(0, bisect_right(ranges, (start, 1 << 64)) - 1)
            for lo, hi in ranges[i:]:
                if lo >= end:
                    break
                if hi > start:
                    backlog -= min(hi, end) - max(lo, start)
        return backlog

    def _arrive(self) -> None:
        """Count what reached the readable end since the last call; bound ephemeral backlogs;
        defer the DPUBs among it (``ChannelDeferral.defer_arrived``)."""
        end = self.topic.readable_end
        start = self._arrived
        if end <= start:
            if self.deferral.undeferred:  # the store refused them: try again
                self.deferral.defer_arrived(start, start)
            return
        self._arrived = end
        self.message_count += end - start
        if self.bounded:
            held = self._backlog(start) - self.deferral.ahead_count() + len(self._requeued)
            room = max(0, self.topic.mem_queue_size - held)
            keep = min(room, end - start)
            if self.queue is not None:
                self.queue.take(self.topic.log, start, start + keep)
            if keep < end - start:
                self.dropped_count += self.skip(start + keep, end)
        if self.topic.dpubs or self.deferral.undeferred:
            self.deferral.defer_arrived(start, end)

    @property
    def arrived(self) -> int:
        """Offsets below this have reached the channel (counted, and taken or dropped)."""
        return self._arrived

    def skip(self, start: int, end: int) -> int:
        """Drop the unread offsets in [start, end): confirmed, never delivered. Returns how many."""
        done = self.cursor.confirm_range(max(start, self.cursor.next_read), end)
        self._unsaved += done
        if self._arrived < end:
            self._arrived = end
        return done

    def pump(self, now: int) -> int:
        """Deliver what the consumers' RDY windows admit; returns how many were sent."""
        self._arrive()
        if self.paused or not self.consumers or not self.topic.leading:
            return 0  # (a follower's part delivers nothing: cluster mode)
        ready = [c for c in self.consumers if c.capacity > 0 and c.state == SUBSCRIBED]
        if not ready:
            return 0
        sent = 0
        if self._requeued:
            sent += self._pump_requeued(ready, now)
        if ready:
            sent += self._pump_log(ready, now)
        return sent

    def _next_client(self, ready: list[Client]) -> Client:
        self._rr = (self._rr + 1) % len(ready)
        return ready[self._rr]

    def _pick_client(self, ready: list[Client], ext: bytes) -> Client | None:
        """The consumer of ``ready`` a message with extension ``ext`` goes to: the next in
        turn, or by youzan's dispatch tags when a consumer wants one (None: none fits)."""
        tags = self._tags()
        if tags is None:
            return self._next_client(ready)
        return self._tagged_client(ready, ext, tags)

    def _tags(self) -> frozenset[str] | None:
        """The dispatch tags this partition's consumers want (youzan's IDENTIFY
        ``desired_tag``); None when none wants one: any message to any consumer."""
        wanted = {c.desired_tag for c in self.consumers if c.desired_tag}
        return frozenset(wanted) if wanted else None

    def _tagged_client(
        self, ready: list[Client], ext: bytes, tags: frozenset[str]
    ) -> Client | None:
        """youzan's dispatch by tag: a message whose ``##client_dispatch_tag`` header is T
        goes to a consumer wanting T while one is subscribed, else (and a message of no tag
        always) to a consumer wanting none. None when no such consumer is ready: the
        message waits for one (as in youzan's nsqd)."""
        tag = dispatch_tag(parse_extension(ext)[2]) if ext else ""
        want = tag if tag in tags else ""
        fits = [c for c in ready if c.desired_tag == want]
        if not fits:
            return None
        return fits[0] if len(fits) == 1 else self._next_client(fits)

    def _pump_requeued(self, ready: list[Client], now: int) -> int:
        sent = 0
        tags = self._tags()
        while self._requeued and ready:
            offset, attempts, timestamp, body, ext = self._requeued[0]
            if tags is None:
                client = self._next_client(ready)
            elif (found := self._tagged_client(ready, ext, tags)) is not None:
                client = found
            else:
                break  # (its consumers are not ready: what follows waits behind it)
            self._requeued.popleft()
            self._deliver(client, offset, attempts + 1, timestamp, body, FROM_LOG, now, ext)
            sent += 1
            if client.capacity <= 0:
                ready.remove(client)
        return sent

    def _pump_log(self, ready: list[Client], now: int) -> int:
        traced: list[int] = []  # delivered, for the tracer at the end: offsets, clients, exts
        traced_to: list[Client] = []
        traced_exts: list[bytes] = []
        try:
            return self._pump_log_loop(ready, now, traced, traced_to, traced_exts)
        finally:
            if traced:
                self._trace_deliveries(now, traced, traced_to, traced_exts)

    def _trace_deliveries(
        self, now: int, offsets: list[int], clients: list[Client], exts: list[bytes]
    ) -> None:
        """The tracer's "delivered" events of one pump, a call per run of one client."""
        tracer = self.policy.tracer
        assert tracer is not None
        first = clients[0]
        if clients.count(first) == len(clients):
            tracer.channel_events(self, "delivered", first, now, offsets, 1, exts)
            return
        start = 0
        for i in range(1, len(clients) + 1):
            if i == len(clients) or clients[i] is not clients[start]:
                tracer.channel_events(self, "delivered", clients[start], now, offsets[start:i], 1,
                                      exts[start:i])  # fmt: skip
                start = i

    def _pump_log_loop(
        self, ready: list[Client], now: int, traced: list[int], traced_to: list[Client],
        traced_exts: list[bytes],
    ) -> int:  # fmt: skip
        """``_pump_log``'s loop; with tracing on, the deliveries are added to ``traced``,
        ``traced_to`` and ``traced_exts``."""
        read_frames = self.topic.log.read_frames if self.queue is None else self.queue.read_frames
        cursor = self.cursor
        end = self.topic.readable_end
        ttl = self.policy.ttl_ns
        cutoff = now - ttl if ttl else 0
        sent = 0
        deferral = self.deferral
        deferral.stalled = False
        tracer = self.policy.tracer
        in_flight, id_base = self.in_flight, self._id_base
        tags = self._tags()
        while ready and cursor.next_read < end:
            if cursor.ranges:
                deferral.skip_confirmed()
                if cursor.next_read >= end:
                    break
            want = min(READ_BATCH, sum(c.capacity for c in ready), end - cursor.next_read)
            try:
                frames = read_frames(cursor.next_read, want)
            except (OffsetOutOfRange, StorageError) as exc:
                deferral.read_failed(exc)
                continue
            if not frames:
                break
            skip_at = deferral.next_ahead()  # a DPUB deferred on arrival: skipped, confirmed
            for offset, timestamp, deliver_at, _flags, body, ext in frames:
                if offset != cursor.next_read:  # offsets the log lost (quarantined): skipped
                    self._unsaved += cursor.confirm_range(cursor.next_read, offset)
                cursor.next_read = offset + 1
                if offset >= skip_at:
                    hit = deferral.take_ahead(offset)
                    skip_at = deferral.next_ahead()
                    if hit:
                        continue
                ranges = cursor.ranges  # (the last range ends highest: a cheap test first)
                if offset < cursor.confirmed or (
                    ranges and ranges[-1][1] > offset and cursor.is_confirmed(offset)
                ):
                    continue  # (confirmed since the batch was read: a range was absorbed)
                if deliver_at > now:
                    if not deferral.defer_read(offset, deliver_at, timestamp, body):
                        return sent  # read again at the next pump (``scan`` pumps)
                    continue
                if cutoff and (deliver_at or timestamp) < cutoff:
                    self.policy_paths.expire(offset, now)
                    continue
                if tags is None:
                    client = ready[0] if len(ready) == 1 else self._next_client(ready)
                elif (found := self._tagged_client(ready, ext, tags)) is not None:
                    client = found
                else:  # no consumer of its tag is ready: it waits, and what follows it
                    cursor.next_read = offset
                    return sent
                if client.sample_rate and random.randint(0, 99) > client.sample_rate:
                    self._confirm(offset)  # NSQ discards what sampling skips
                    continue
                # ``_deliver`` for a message from the log, inline on purpose: the call was a
                # tenth of a delivery's cost (bench/vs_go.py: SUB 0.97x -> 1.06x of Go)
                deadline = now + client.msg_timeout_ns
                in_flight[offset] = InFlight(client, 1, deadline, now, timestamp, body,
                                             FROM_LOG, ext)  # fmt: skip
                if self._timeouts is None and deadline >= self._last_deadline:
                    self._last_deadline = deadline
                else:
                    self._track(offset, deadline)
                client.in_flight_count += 1
                client.message_count += 1
                extended = client.extended
                if extended is None:
                    client.sink.send_message(message_frame(timestamp, 1, id_base | offset, body))
                else:
                    extended.send_extended(timestamp, 1, id_base | offset, body, ext)
                if tracer is not None:
                    traced.append(offset)
                    traced_to.append(client)
                    traced_exts.append(ext)
                sent += 1
                if client.write_paused or client.in_flight_count >= client.ready_count:
                    # (Client.capacity <= 0, without the call)
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
        ext: bytes = b"",
    ) -> None:
        deadline = now + client.msg_timeout_ns
        self.in_flight[offset] = InFlight(
            client, attempts, deadline, now, timestamp, body, source, ext
        )
        if self._timeouts is None and deadline >= self._last_deadline:
            self._last_deadline = deadline
        else:
            self._track(offset, deadline)
        client.in_flight_count += 1
        client.message_count += 1
        extended = client.extended
        if extended is None:  # (the message ID: encode_message_id(partition, offset))
            client.sink.send_message(
                message_frame(timestamp, attempts, self._id_base | offset, body)
            )
        else:  # (a deferred message of an ephemeral channel keeps only its body: None)
            stored = ext if ext or source == FROM_LOG else None
            extended.send_extended(timestamp, attempts, self._id_base | offset, body, stored)
        tracer = self.policy.tracer
        if tracer is not None:
            known = ext if ext or source == FROM_LOG else None
            tracer.channel_event(self, offset, "delivered", client, attempts, now, ext=known)

    def _confirm(self, offset: int) -> bool:
        if self.cursor.confirm(offset):
            self._unsaved += 1
            return True
        return False

    # -- FIN / REQ / TOUCH -----------------------------------------------------------

    def _owned(
        self,
        client: Client,
        offset: int,
        error: type[FinFailed | ReqFailed | TouchFailed],
        verb: str,
        msg_id: bytes,
    ) -> InFlight:
        item = self.in_flight.get(offset)
        if item is None:
            raise error(f"{verb} {msg_id.decode(errors='replace')} failed ID not in flight")
        if item.client is not client:
            raise error(
                f"{verb} {msg_id.decode(errors='replace')} failed client does not own message"
            )
        return item

    def finish(self, client: Client, offset: int, msg_id: bytes, now: int) -> None:
        item = self._owned(client, offset, FinFailed, "FIN", msg_id)
        if item.source == FROM_DEFERRED:
            try:
                self.deferred.remove(offset)
            except StorageError as exc:  # still in flight: delivered again at its timeout
                self.deferral.storage_failed("failed to finish a deferred message", exc)
                raise FinFailed(f"FIN {msg_id.decode(errors='replace')} failed {exc}") from exc
            self.deferral.leased -= 1
        del self.in_flight[offset]
        client.in_flight_count -= 1
        client.finish_count += 1
        self.finish_count += 1
        if item.source != FROM_DEFERRED:
            self._confirm(offset)
        if self.e2e is not None:
            self.e2e.insert(now - item.timestamp, now)
        if self.policy.tracer is not None:
            self.policy.tracer.channel_event(
                self, offset, "finished", client, item.attempts, now, ext=stored_ext(item)
            )

    def finish_many(
        self, client: Client, offsets: list[int], ids: list[int], now: int
    ) -> list[FinFailed]:
        """``finish`` each offset in order (``ids``: their message IDs as integers, for the
        refusals); the refusals. Messages from the log FINed by their owner, with no
        latency window to tell, take a short path with the same effect."""
        errors: list[FinFailed] = []
        in_flight, confirm = self.in_flight, self.cursor.confirm
        slow_only = self.e2e is not None
        tracer = self.policy.tracer
        traced: list[int] = []  # the short path's FINs, for the tracer at once
        traced_attempts: list[int] = []
        traced_exts: list[bytes] = []
        done = unsaved = 0
        for offset, value in zip(offsets, ids, strict=True):
            item = in_flight.get(offset)
            if slow_only or item is None or item.client is not client or item.source != FROM_LOG:
                if traced:  # (the tracer's events stay in order)
                    tracer.channel_events(self, "finished", client, now, traced,  # type: ignore[union-attr]
                                          traced_attempts, traced_exts)  # fmt: skip
                    traced, traced_attempts, traced_exts = [], [], []
                try:
                    self.finish(client, offset, b"%016x" % value, now)
                except FinFailed as err:  # kept without its traceback: no cycle via this frame
                    errors.append(err.with_traceback(None))
                continue
            del in_flight[offset]
            done += 1
            if confirm(offset):
                unsaved += 1
            if tracer is not None:
                traced.append(offset)
                traced_attempts.append(item.attempts)
                traced_exts.append(item.ext)
        if traced:
            tracer.channel_events(self, "finished", client, now, traced,  # type: ignore[union-attr]
                                  traced_attempts, traced_exts)  # fmt: skip
        client.in_flight_count -= done
        client.finish_count += done
        self.finish_count += done
        self._unsaved += unsaved
        return errors

    def requeue(self, client: Client, offset: int, msg_id: bytes, delay_ms: int, now: int) -> None:
        item = self._owned(client, offset, ReqFailed, "REQ", msg_id)
        del self.in_flight[offset]
        client.in_flight_count -= 1
        client.requeue_count += 1
        self.requeue_count += 1
        if self.policy.tracer is not None:
            self.policy.tracer.channel_event(self, offset, "requeued", client, item.attempts,
                                             now, f"delay_ms={delay_ms}", stored_ext(item))  # fmt: skip
        if self._exhausted(offset, item, "requeued", now):
            return
        if delay_ms <= 0:
            self._back_to_queue(offset, item, now, in_flight_removed=True)
            return
        deliver_at = now + delay_ms * 1_000_000
        try:
            if item.source == FROM_DEFERRED:
                self.deferred.put(offset, deliver_at, item.attempts, item.timestamp, item.body)
                self.deferral.leased -= 1
            else:
                self.deferral.defer(offset, deliver_at, item.attempts, item.timestamp, item.body)
        except StorageError as exc:  # it stays in flight: delivered again at its timeout
            self.deferral.storage_failed("failed to defer a requeued message", exc)
            self.in_flight[offset] = item
            self._track(offset, item.deadline)
            client.in_flight_count += 1
            client.requeue_count -= 1
            self.requeue_count -= 1
            raise ReqFailed(f"REQ {msg_id.decode(errors='replace')} failed {exc}") from exc

    def touch(
        self, client: Client, offset: int, msg_id: bytes, now: int, max_msg_timeout_ns: int
    ) -> None:
        item = self._owned(client, offset, TouchFailed, "TOUCH", msg_id)
        deadline = min(now + client.msg_timeout_ns, item.delivered + max_msg_timeout_ns)
        if item.source == FROM_DEFERRED:  # its lease in the store must not end before it
            try:
                self.deferred.put(offset, deadline, item.attempts, item.timestamp, item.body)
            except StorageError as exc:
                self.deferral.storage_failed("failed to touch a deferred message", exc)
                raise TouchFailed(f"TOUCH {msg_id.decode(errors='replace')} failed {exc}") from exc
        item.deadline = deadline
        del self.in_flight[offset]  # (to the end: in deadline order when it is the latest)
        self.in_flight[offset] = item
        self._track(offset, deadline)

    def _track(self, offset: int, deadline: int) -> None:
        """``offset`` went into the in-flight table last, due at ``deadline``."""
        heap = self._timeouts
        if heap is None:
            if deadline >= self._last_deadline:
                self._last_deadline = deadline
                return
            heap = [(item.deadline, off) for off, item in self.in_flight.items()]
            heapq.heapify(heap)
            self._timeouts = heap
            return
        push_timeout(heap, self.in_flight, deadline, offset)

    def _back_to_queue(
        self, offset: int, item: InFlight, now: int, in_flight_removed: bool = False
    ) -> None:
        """Make an in-flight message deliverable again at once (timeout, REQ 0, client gone)."""
        if not in_flight_removed:
            self.in_flight.pop(offset, None)
        if item.source == FROM_DEFERRED:
            self.deferral.leased -= 1
            try:
                self.deferred.put(offset, now, item.attempts, item.timestamp, item.body)
            except StorageError as exc:  # its lease stays: due again when the lease ends
                self.deferral.storage_failed("failed to requeue a deferred message", exc)
        else:
            self._requeued.append((offset, item.attempts, item.timestamp, item.body, item.ext))

    def _exhausted(self, offset: int, item: InFlight, reason: str, now: int) -> bool:
        """After a failed attempt: True when the message used its last attempt and went to
        the dead-letter topic (``PolicyPaths.dead_letter``); else it is to be delivered again."""
        max_attempts = self.policy.max_attempts
        if not max_attempts or item.attempts < max_attempts:
            return False
        return self.policy_paths.dead_letter(offset, item, reason, now)

    # -- timers ----------------------------------------------------------------------

    def scan(self, now: int) -> int:
        """Time out expired in-flight messages and pull due deferred ones; returns work done."""
        work = 0
        for offset, item in self._expired(now):
            item.client.in_flight_count -= 1
            self.timeout_count += 1
            if self.policy.tracer is not None:
                self.policy.tracer.channel_event(self, offset, "timed_out", item.client,
                                                 item.attempts, now, ext=stored_ext(item))  # fmt: skip
            if not self._exhausted(offset, item, "timeout", now):
                self._back_to_queue(offset, item, now, in_flight_removed=True)
            work += 1
        work += self._pull_due(now)
        deferral = self.deferral
        if deferral.undeferred:
            deferral.defer_arrived(self._arrived, self._arrived)  # the store refused them: again
        if deferral.stalled:
            if not any(c.capacity > 0 for c in self.consumers):
                deferral.retry_stalled(now)  # no read will come to it
            work += 1  # a delayed message the store refused: the pump tries it again
        return work

    def _expired(self, now: int) -> list[tuple[int, InFlight]]:
        """The in-flight messages due by ``now``, taken out of the table."""
        in_flight, out = self.in_flight, []
        heap = self._timeouts
        if heap is None:  # (deadline order: from the front, in one pass)
            for offset, item in in_flight.items():
                if item.deadline > now:
                    break
                out.append((offset, item))
            for offset, _ in out:
                del in_flight[offset]
            return out
        while heap and heap[0][0] <= now:
            deadline, offset = heapq.heappop(heap)
            found = in_flight.get(offset)
            if found is not None and found.deadline == deadline:
                del in_flight[offset]
                out.append((offset, found))
        if not in_flight:  # (nothing in flight: in order again)
            self._timeouts, self._last_deadline = None, 0
        return out

    def _pull_due(self, now: int) -> int:
        """Deliver the due deferred messages the consumers' RDY windows admit."""
        if self.paused or not self.topic.leading:
            ready = []
        else:
            ready = [c for c in self.consumers if c.capacity > 0 and c.state == SUBSCRIBED]
        return self.deferral.pull_due(ready, now, self.policy.ttl_ns, self.policy_paths.expire)

    def next_deadline(self) -> int | None:
        candidates = []
        if self._timeouts:
            candidates.append(self._timeouts[0][0])
        elif self._timeouts is None and self.in_flight:
            candidates.append(next(iter(self.in_flight.values())).deadline)
        nd = self.deferred.next_due()
        if nd is not None:
            candidates.append(nd)
        return min(candidates) if candidates else None

    # -- empty, replay, stats --------------------------------------------------------

    def empty(self, now: int) -> None:
        """Drop everything: backlog, requeued, deferred and in flight (NSQ's /channel/empty).

        What a paused topic holds is the topic's, not the channel's: it stays.
        """
        del now
        self._arrive()
        self.deferred.clear()  # first: a StorageError here leaves everything as it was
        self.clear_window()
        if self.queue is not None:
            self.queue.clear()
        self.cursor.reset(self.topic.readable_end)
        self._unsaved += 1
        self.maybe_save_cursor(force=True)

    def reset_to(self, offset: int) -> None:
        """Replay (or skip): everything below ``offset`` is done, delivery resumes there.

        In-flight messages leave the window: their clients' counts go down, and a late
        FIN/REQ/TOUCH for one answers "ID not in flight" as NSQ does for an unknown ID
        (unless the replay has meanwhile delivered that offset again to the same client).
        Deferred entries at or above ``offset`` are removed (the replay reads them from the
        log again); those below stay deferred, a leased one due again at its old deadline.
        """
        self.deferred.remove_from(offset)  # first: a StorageError here changes nothing
        self.clear_window()  # the store kept those below ``offset``: the reset confirms them
        self.cursor.reset(offset)
        self._arrived = max(self._arrived, offset)
        self._unsaved += 1
        self.maybe_save_cursor(force=True)

    def adopt_cursor(
        self, confirmed: int, ranges: Sequence[tuple[int, int]], deferred: Sequence[Entry] = ()
    ) -> bool:
        """(A follower's part, cluster mode) The leader's cursor of this channel over this
        partition: every offset below ``confirmed`` and in ``ranges`` is done, and its
        delayed store holds ``deferred`` (offset, deliver_at, attempts), which replaces what
        this one held (from a leadership of its own). A follower delivers nothing, so
        nothing is in flight; a deferred offset the cursor does not confirm (a DPUB the
        leader's read has not reached) is held ahead of the read, as after a restart, so
        that once this node leads it is delivered from the delayed store at its time and
        never again by the read. The cursor file is saved with the periodic saves. True
        when anything changed."""
        cursor = self.cursor
        entries = tuple(deferred)
        same_store = entries == self._adopted
        if same_store and cursor.confirmed == confirmed and cursor.ranges == list(ranges):
            return False
        if not same_store:  # (a write of the store only when it changed)
            self.deferred.replace(entries)  # first: a StorageError here changes nothing
        self.clear_window()
        self._adopted = entries
        cursor.reset(confirmed)
        for start, end in ranges:
            cursor.confirm_range(start, end)
        ahead = sorted(offset for offset, _, _ in entries if not cursor.is_confirmed(offset))
        if ahead:
            self.deferral.hold_ahead(ahead)
        self._arrived = max(self._arrived, confirmed)
        self._unsaved += 1
        return True

    def clear_window(self) -> None:
        """Nothing in flight, requeued, ahead of the read or leased any more (its clients'
        in-flight counts go down); the cursor is reset next."""
        for item in self.in_flight.values():
            item.client.in_flight_count = max(0, item.client.in_flight_count - 1)
        self._adopted = None  # (a leader that steps down: its delayed store is its own)
        self.in_flight.clear()
        self._timeouts, self._last_deadline = None, 0
        self._requeued.clear()
        self.deferral.clear()

    @property
    def in_flight_count(self) -> int:
        return len(self.in_flight)

    @property
    def deferred_count(self) -> int:
        return self.deferral.count()

    def cursor_snapshot(self) -> CursorSnapshot | None:
        """The cursor's bytes when its periodic save is due (the server writes them off-loop)."""
        n, self._unsaved = self._unsaved, 0
        return self.deferral.cursor_snapshot(n)

    def maybe_save_cursor(self, force: bool = False) -> None:
        """Save the cursor now if due (or ``force``; ``ChannelDeferral.save_cursor``)."""
        n, self._unsaved = self._unsaved, 0
        self.deferral.save_cursor(n, force)

    def close_consumers(self) -> None:
        for client in list(self.consumers):
            client.state = CLOSING
            client.sink.close_by_server()
        self.consumers.clear()
