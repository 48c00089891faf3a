"""A channel as NSQ and its users know it, over all partitions of its topic: ``Channel``.

A topic with N partitions has, for each of its channels, N ``ChannelPartition``s (one per
partition log, ``nsqpy.broker.channel_partition``), in ``parts`` in partition order; in
cluster mode a node holds only some partitions, so a part is found by its partition number
(``part``), never by its place in the list, and parts come and go with the partitions
(``add_part``/``remove_part``). The channel is what
clients subscribe to and what /stats, the HTTP actions and the metadata see: it fans
consumers out to the partitions, routes FIN/REQ/TOUCH by the partition in the message ID,
pumps the partitions in turn (starting one further each time so that no partition starves
the others of RDY) and sums their counters. A consumer that subscribed to one partition
(youzan's ``SUB <topic> <channel> <partition>``) is a consumer of that partition only. An
ordered channel delivers through ``OrderedDelivery`` (``nsqpy.broker.ordered``): per
partition one message in flight, one owner. A single-partition topic's channel has one
part, and behaves exactly as NSQ's channel. The features beyond NSQ are the channel's too:
one ``ChannelPolicy`` (dead letters, TTL, tracing) and one e2e ``LatencyWindow`` are shared
by every part, the TTL sweep and replay (``reset``) run over the parts, their counts are
summed. Must not import asyncio or any server, nor the topic that holds it (``TopicView``
is what it knows of it).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Protocol

from nsqpy.broker.channel_partition import ChannelPartition
from nsqpy.broker.client import Client
from nsqpy.broker.deferred import Deferred
from nsqpy.broker.e2e import LatencyWindow
from nsqpy.broker.inflight import FROM_LOG, InFlight
from nsqpy.broker.ordered import OrderedDelivery
from nsqpy.broker.policy import ChannelPolicy
from nsqpy.errors import FinFailed, ReqFailed, TouchFailed
from nsqpy.protocol.message import MAX_OFFSET, NO_EXT_VERSION, OFFSET_BITS
from nsqpy.protocol.state import CLOSING
from nsqpy.storage import CursorState


class TopicView(Protocol):
    """The topic a channel belongs to (``broker.topic.Topic``), as the channel knows it."""

    @property
    def name(self) -> str: ...
    @property
    def ephemeral(self) -> bool: ...


class Channel:
    """One channel of a topic: a ``ChannelPartition`` per partition, consumers shared."""

    def __init__(
        self, topic: TopicView, name: str, parts: list[ChannelPartition], *, ordered: bool = False
    ) -> None:
        self.topic = topic
        self.name = name
        self.parts = parts  # in partition order
        self._by_number = {part.number: part for part in parts}
        self.ephemeral = name.endswith("#ephemeral")
        self.deleted = False
        self.consumers: list[Client] = []
        self.pinned: dict[int, int] = {}  # client id -> the one partition it consumes
        self.delivery: OrderedDelivery | None = None
        self._start = 0
        for part in parts[1:]:
            part.policy = parts[0].policy  # one policy for the channel (Features sets it)
        if ordered:
            self.set_ordered(True)

    # -- parts (cluster mode: the partitions this node holds) ------------------------

    def part(self, number: int) -> ChannelPartition | None:
        """The part over partition ``number``; None when this node does not hold it."""
        return self._by_number.get(number)

    def add_part(self, part: ChannelPartition) -> None:
        """A partition newly held: its part shares the channel's policy, e2e window and
        pause, and serves the channel's consumers."""
        part.policy = self.policy
        part.e2e = self.e2e
        part.paused = self.paused
        self.parts.insert(bisect_left([p.number for p in self.parts], part.number), part)
        self._by_number[part.number] = part
        if self.delivery is not None:
            self.delivery.assign()
        else:
            part.consumers = [c for c in self.consumers if self.consumes(c, part.number)]

    def remove_part(self, number: int) -> ChannelPartition | None:
        """A partition released: its part leaves (what it had in flight with it: a late FIN
        is "not in flight"); consumers subscribed to that partition only are closed."""
        part = self._by_number.pop(number, None)
        if part is None:
            return None
        self.parts.remove(part)
        part.clear_window()
        for client in self.consumers:
            if self.pinned.get(client.id) == number:
                client.state = CLOSING
                client.sink.close_by_server()
        if self.delivery is not None:
            self.delivery.holds.pop(number, None)
            self.delivery.assign()
        return part

    def roles_changed(self) -> None:
        """A partition's role changed: ordered delivery gives owners to led ones only."""
        if self.delivery is not None:
            self.delivery.assign()

    # -- consumers -------------------------------------------------------------------

    def consumes(self, client: Client, partition: int) -> bool:
        """Whether ``client`` takes messages of ``partition`` (all, or the one it pinned)."""
        return self.pinned.get(client.id, partition) == partition

    def add_consumer(self, client: Client, partition: int = -1) -> None:
        """Subscribe ``client`` to every partition, or to ``partition`` only when >= 0."""
        self.consumers.append(client)
        client.channel = self
        if partition >= 0:
            self.pinned[client.id] = partition
        if self.delivery is not None:
            self.delivery.assign()
            return
        for part in self.parts:
            if self.consumes(client, part.number):
                part.consumers.append(client)

    def remove_consumer(self, client: Client, now: int) -> None:
        """Forget a client; what it had in flight is requeued at once (in order)."""
        if client in self.consumers:
            self.consumers.remove(client)
        for part in self.parts:
            part.remove_consumer(client, now)
        self.pinned.pop(client.id, None)
        if self.delivery is not None:
            self.delivery.assign()

    def close_consumers(self) -> None:
        for client in list(self.consumers):
            client.state = CLOSING
            client.sink.close_by_server()
        self.consumers.clear()
        for part in self.parts:
            part.consumers = []

    # -- ordered delivery ------------------------------------------------------------

    @property
    def ordered(self) -> bool:
        return self.delivery is not None

    def set_ordered(self, ordered: bool) -> None:
        """Switch ordered delivery on or off (SUB_ORDERED, /channel/setorder, topic flag)."""
        if ordered == self.ordered:
            return
        if ordered:
            self.delivery = OrderedDelivery(self)
            self.delivery.assign()
            return
        self.delivery = None
        for part in self.parts:
            part.consumers = [c for c in self.consumers if self.consumes(c, part.number)]

    # -- delivery --------------------------------------------------------------------

    def pump(self, now: int) -> int:
        """Deliver what the consumers' RDY windows admit; returns how many were sent."""
        if self.delivery is not None:
            return self.delivery.pump(now)
        parts = self.parts
        count = len(parts)
        if count == 1:
            return parts[0].pump(now)
        self._start = (self._start + 1) % count
        sent = 0
        for i in range(count):
            if not self._room():
                break  # the rest counts what arrived in ``arrive``, after each flush
            sent += parts[(self._start + i) % count].pump(now)
        return sent

    def pump_ordered(self, number: int, now: int) -> int:
        """An ordered channel's partition ``number`` may deliver its next message (its
        followers took the cursor that finished the last one); 0 on a plain channel, which
        never waits for them."""
        part = self._by_number.get(number)
        if self.delivery is None or part is None:
            return 0
        return self.delivery.release(part, now)

    def _room(self) -> bool:
        """Whether any consumer's RDY window has room (else pumping can send nothing)."""
        return any(client.capacity > 0 for client in self.consumers)

    def arrive(self) -> None:
        """Count what reached every partition's readable end (NSQ's message_count); also
        bounds ephemeral backlogs. The broker calls it after each flush."""
        for part in self.parts:
            part._arrive()  # what ChannelPartition.pump does first; ``pump`` may skip one

    def scan(self, now: int) -> int:
        """In-flight timeouts and due deferred messages of every partition; work done."""
        if self.delivery is not None:
            return self.delivery.scan(now)
        return sum(part.scan(now) for part in self.parts)

    def maybe_save_cursor(self, force: bool = False) -> None:
        for part in self.parts:
            part.maybe_save_cursor(force)

    def expire_head(self, now: int) -> int:
        """The TTL sweep of every partition (``PolicyPaths.expire_head``)."""
        return sum(part.policy_paths.expire_head(now) for part in self.parts)

    def reset(self, targets: list[tuple[ChannelPartition, int]]) -> None:
        """Replay: move each given part's cursor to its offset (``ChannelPartition.reset_to``);
        an ordered channel forgets those partitions' requeue holds."""
        for part, offset in targets:
            part.reset_to(offset)
            if self.delivery is not None:
                self.delivery.holds.pop(part.number, None)

    def next_deadline(self) -> int | None:
        found = [d for d in (part.next_deadline() for part in self.parts) if d is not None]
        return min(found) if found else None

    def stored_extension(self, partition: int, offset: int) -> bytes | None:
        """The extension, as stored, of a message just delivered (kept with its in-flight
        entry); None when it is not known there (read it with ``extension``)."""
        part = self._by_number.get(partition)
        if part is None:
            return b""
        item = part.in_flight.get(offset)
        if item is None or (not item.ext and item.source != FROM_LOG):
            return None  # (a deferred message of an ephemeral channel keeps only its body)
        return item.ext

    def extension(self, partition: int, offset: int) -> tuple[int, bytes]:
        """The extension delivered with a message (``broker.extensions``); none for an ID
        outside the partitions held here."""
        part = self._by_number.get(partition)
        if part is None:
            return NO_EXT_VERSION, b""
        return part.topic.extension(offset)

    # -- FIN / REQ / TOUCH -----------------------------------------------------------

    def _part(
        self,
        partition: int,
        msg_id: bytes,
        verb: str,
        error: type[FinFailed | ReqFailed | TouchFailed],
    ) -> ChannelPartition:
        part = self._by_number.get(partition)
        if part is not None:
            return part
        raise error(f"{verb} {msg_id.decode(errors='replace')} failed ID not in flight")

    def finish(self, client: Client, partition: int, offset: int, msg_id: bytes, now: int) -> None:
        self._part(partition, msg_id, "FIN", FinFailed).finish(client, offset, msg_id, now)

    def finish_ids(self, client: Client, ids: list[bytes], now: int) -> list[FinFailed]:
        """FIN a burst of IDs (16 lowercase hex characters each) in order; the refusals,
        each to be answered as ``finish`` would have answered it."""
        return self.finish_values(client, [int(msg_id, 16) for msg_id in ids], now)

    def finish_values(self, client: Client, values: list[int], now: int) -> list[FinFailed]:
        """``finish_ids`` with the IDs as integers (``b"%016x" % value`` is the ID)."""
        parts = self._by_number
        if len(parts) == 1 and values:  # (one partition held: the burst in one go)
            ((number, only),) = parts.items()
            if min(values) >> OFFSET_BITS == number == max(values) >> OFFSET_BITS:
                base = number << OFFSET_BITS  # (the IDs of one partition: its offsets + base)
                offsets = values if not base else [v - base for v in values]
                return only.finish_many(client, offsets, values, now)
        errors: list[FinFailed] = []
        for value in values:
            part = parts.get(value >> OFFSET_BITS)
            msg_id = b"%016x" % value
            try:
                if part is None:
                    raise FinFailed(f"FIN {msg_id.decode()} failed ID not in flight")
                part.finish(client, value & MAX_OFFSET, msg_id, now)
            except FinFailed as err:  # kept without its traceback: no cycle through this frame
                errors.append(err.with_traceback(None))
        return errors

    def requeue(
        self,
        client: Client,
        partition: int,
        offset: int,
        msg_id: bytes,
        delay_ms: int,
        now: int,
    ) -> None:
        part = self._part(partition, msg_id, "REQ", ReqFailed)
        if self.delivery is not None and delay_ms > 0:
            # Ordered: the message stays first in its partition; nothing passes it (unless
            # that was its last attempt and it went to the dead-letter topic).
            paths = part.policy_paths
            dead = paths.dead_letter_count
            part.requeue(client, offset, msg_id, 0, now)
            if paths.dead_letter_count == dead:
                self.delivery.hold(partition, now + delay_ms * 1_000_000)
            return
        part.requeue(client, offset, msg_id, delay_ms, now)

    def touch(
        self,
        client: Client,
        partition: int,
        offset: int,
        msg_id: bytes,
        now: int,
        max_msg_timeout_ns: int,
    ) -> None:
        part = self._part(partition, msg_id, "TOUCH", TouchFailed)
        part.touch(client, offset, msg_id, now, max_msg_timeout_ns)

    # -- actions ---------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return self.parts[0].paused

    @paused.setter
    def paused(self, value: bool) -> None:
        for part in self.parts:
            part.paused = value

    def empty(self, now: int) -> None:
        """NSQ's /channel/empty on every partition."""
        for part in self.parts:
            part.empty(now)
        if self.delivery is not None:
            self.delivery.holds.clear()

    # -- counters (sums over the partitions) -----------------------------------------

    @property
    def depth(self) -> int:
        return sum(part.depth for part in self.parts)

    @property
    def in_flight_count(self) -> int:
        return sum(len(part.in_flight) for part in self.parts)

    @property
    def deferred_count(self) -> int:
        return sum(part.deferred_count for part in self.parts)

    @property
    def message_count(self) -> int:
        return sum(part.message_count for part in self.parts)

    @property
    def requeue_count(self) -> int:
        return sum(part.requeue_count for part in self.parts)

    @property
    def timeout_count(self) -> int:
        return sum(part.timeout_count for part in self.parts)

    @property
    def finish_count(self) -> int:
        return sum(part.finish_count for part in self.parts)

    @property
    def dropped_count(self) -> int:
        return sum(part.dropped_count for part in self.parts)

    @property
    def dead_letter_count(self) -> int:
        return sum(part.policy_paths.dead_letter_count for part in self.parts)

    @property
    def expired_count(self) -> int:
        return sum(part.policy_paths.expired_count for part in self.parts)

    @property
    def depth_dropped_count(self) -> int:
        return sum(part.policy_paths.depth_dropped_count for part in self.parts)

    @property
    def policy(self) -> ChannelPolicy:
        """The policy every partition's cursor shares."""
        return self.parts[0].policy

    @property
    def e2e(self) -> LatencyWindow | None:
        """The e2e latency window every partition's cursor records into (None: off)."""
        return self.parts[0].e2e

    @e2e.setter
    def e2e(self, window: LatencyWindow | None) -> None:
        for part in self.parts:
            part.e2e = window

    @property
    def in_flight(self) -> dict[int, InFlight]:
        """Every partition's in-flight messages, keyed by message ID value."""
        if len(self.parts) == 1:
            return self.parts[0].in_flight
        return {
            (part.number << OFFSET_BITS) | offset: item
            for part in self.parts
            for offset, item in part.in_flight.items()
        }

    @property
    def cursor(self) -> CursorState:
        """The first part's cursor (the whole cursor of a single-partition topic)."""
        return self.parts[0].cursor

    @property
    def deferred(self) -> Deferred:
        """The first part's deferred set (all of it in a single-partition topic)."""
        return self.parts[0].deferred
