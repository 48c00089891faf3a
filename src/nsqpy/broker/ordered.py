"""Ordered delivery of a channel: per partition one message in flight, one owning consumer.

A producer that needs order hashes its key to a partition; an ordered channel then hands
out each partition's messages strictly one at a time, the next only after the previous is
finished. Each partition is owned by one of the channel's consumers at a time (balanced:
no consumer owns more than one partition above the least loaded one that may take it;
a consumer subscribed to one partition can own only that one). When the owner leaves,
its in-flight message goes back to the head of the partition and the partition passes to
another consumer, which gets that message first. A requeue keeps the order too: the
message is the next one delivered, and a requeue with a delay holds the whole partition
until the delay is over. Messages published with a delay (DPUB) leave the order, as they
leave the cursor's window. In a cluster the next message also waits until every in-sync
follower has the cursor that finished the previous one (``Partition.cursor_bound``), so
that a new leader never delivers again what was finished. Delivery reuses ``ChannelPartition.pump``/``ChannelPartition.scan``
with the owner's RDY window narrowed to one message for the call. Partitions are known by
number (a cluster node holds some of them); one this node follows has no owner. Must not
import asyncio or any server, nor the channel it serves (``OrderedChannel`` is what it
needs of it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from nsqpy.broker.channel_partition import ChannelPartition
from nsqpy.broker.client import Client


class OrderedChannel(Protocol):
    """The channel ordered delivery serves (``broker.channel.Channel``)."""

    @property
    def parts(self) -> list[ChannelPartition]: ...
    @property
    def consumers(self) -> list[Client]: ...
    def consumes(self, client: Client, partition: int) -> bool: ...


class OrderedDelivery:
    """The owners and requeue holds of an ordered ``Channel``."""

    def __init__(self, channel: OrderedChannel) -> None:
        self.channel = channel
        self.owners: dict[int, Client | None] = {}  # partition number -> its owner
        self.holds: dict[int, int] = {}  # partition -> no delivery before this time (ns)

    def owner_of(self, partition: int) -> Client | None:
        return self.owners.get(partition)

    def hold(self, partition: int, until: int) -> None:
        """A requeue with a delay: the partition delivers nothing before ``until``."""
        self.holds[partition] = until

    def assign(self) -> None:
        """Give every partition an owner among the eligible consumers, balanced and sticky."""
        channel = self.channel
        led = [part.number for part in channel.parts if part.topic.leading]
        owners = self.owners = {number: self.owners.get(number) for number in led}
        load = {c.id: 0 for c in channel.consumers}
        for number, owner in owners.items():
            if owner is None:
                continue
            if owner.id not in load or not channel.consumes(owner, number):
                owners[number] = None
            else:
                load[owner.id] += 1
        for number in led:
            eligible = [c for c in channel.consumers if channel.consumes(c, number)]
            if not eligible:
                continue
            least = min(eligible, key=lambda c: load[c.id])  # the earliest among equals
            owner = owners[number]
            if owner is None or load[owner.id] > load[least.id] + 1:
                if owner is not None:
                    load[owner.id] -= 1
                owners[number] = least
                load[least.id] += 1
        for part in channel.parts:
            owner = owners.get(part.number)
            part.consumers = [owner] if owner is not None else []

    def _free(self, number: int, part: ChannelPartition, now: int) -> bool:
        until = self.holds.get(number)
        if until is not None:
            if until > now:
                return False
            del self.holds[number]
        if part.in_flight:
            return False
        bound = part.topic.cursor_bound  # (cluster: the followers have the cursor first)
        return bound is None or bound(part.name) >= part.cursor.confirmed

    @staticmethod
    def _one_slot(owner: Client | None, free: bool, step: Callable[[int], int], now: int) -> int:
        """Run ``step`` (the partition's pump or scan) with the owner able to take one more
        message when ``free``, none otherwise (what arrived is still counted)."""
        if owner is None:
            return step(now)
        saved = owner.ready_count
        room = 1 if free and owner.capacity > 0 else 0
        owner.ready_count = owner.in_flight_count + room
        try:
            return step(now)
        finally:
            owner.ready_count = saved

    def pump(self, now: int) -> int:
        return sum(self.pump_part(part, now) for part in self.channel.parts)

    def pump_part(self, part: ChannelPartition, now: int) -> int:
        """``pump`` for one partition's part."""
        if part.in_flight:
            return 0  # (its one message is out: nothing to send; the broker counts what
            # arrived after each flush, ``Channel.arrive``)
        number = part.number
        return self._one_slot(
            self.owners.get(number), self._free(number, part, now), part.pump, now
        )

    def release(self, part: ChannelPartition, now: int) -> int:
        """``pump_part`` once its followers took a cursor (alone: the rest of the channel
        is not looked at), but nothing at all while the partition is not free (its message
        is out, a requeue holds it, or a follower still lacks the cursor): ``pump_part``
        would still count what arrived, which the partition's next pump does as well (a
        commit's, a FIN's, the ticker's)."""
        number = part.number
        if part.in_flight or not self._free(number, part, now):
            return 0
        return self._one_slot(self.owners.get(number), True, part.pump, now)

    def scan(self, now: int) -> int:
        """Timeouts and due deferred messages; an expired hold counts as work (pump after)."""
        work = 0
        for part in self.channel.parts:
            number = part.number
            held = number in self.holds
            free = self._free(number, part, now)
            if held and number not in self.holds:
                work += 1
            work += self._one_slot(self.owners.get(number), free, part.scan, now)
        return work
