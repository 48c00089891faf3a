"""A topic: its partitions (``nsqpy.broker.partition``) and its channels.

A topic has 1 to ``MAX_PARTITIONS`` partitions, set when it is created and only ever grown
(``expand``: the new partitions start empty, every channel reads them from their start, and
what the old ones hold stays where it is); a channel is a
``Channel`` (``nsqpy.broker.channel``) over one ``ChannelPartition`` per partition. A
publish goes to one partition: the one asked for, else the one a partition key hashes to
(CRC-32 of the key modulo the partition count: stable across restarts), else the next in
turn. A topic with no channels keeps what it receives, and the first channel created
starts there; later channels start at the tail, as NSQ does. A paused topic holds what
arrives after the pause: channels read only up to where it began, so what they already
had keeps flowing, as when NSQ's topic pump stops. An ephemeral topic has one partition,
in memory. Deleting a topic removes its files but its partitions' offset reservations.

In cluster mode a node holds only some of the N partitions (``held``; ``partitions`` lists
those, in order; ``partition(n)`` finds one by number) and leads some of those: a publish
without a partition goes to the led ones in turn; one naming a partition, or whose key
hashes to one (over all N), that is not led here raises ``NotLeader``, as does a publish
when none is. Partitions are held and released one at a time (``add_partition``,
``remove_partition``). Must not import asyncio or any server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import zlib
from collections.abc import Sequence
from pathlib import Path

from nsqpy.broker.channel import Channel
from nsqpy.broker.partition import LogSettings, Partition
from nsqpy.errors import NotLeader, StorageError
from nsqpy.protocol.names import is_ephemeral
from nsqpy.storage import (
    MemoryLog,
    PartitionLog,
)

log = logging.getLogger("nsqpy.broker")


class EphemeralPartitions(ValueError):
    """An ephemeral topic has exactly one partition (its channels keep their own queues)."""


MAX_PARTITIONS = 255  # as youzan's nsqlookupd allows; message IDs could address 1024


def key_partition(key: bytes, count: int) -> int:
    """The partition of ``count`` a publish with partition key ``key`` goes to: the one rule,
    used by the broker and by a cluster node forwarding a keyed publish to its leader."""
    return zlib.crc32(key) % count


class Topic:
    """One topic: its partitions and its user-visible channels (``Channel``)."""

    def __init__(
        self,
        name: str,
        directory: Path | None,
        settings: LogSettings,
        *,
        partitions: int = 1,
        buffer_starts: Sequence[int | None] = (),
        ordered: bool = False,
        ephemeral_start: int = 0,
        held: Sequence[int] | None = None,
        leading: bool = True,
    ) -> None:
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise ValueError(f"partition count {partitions} out of range 1-{MAX_PARTITIONS}")
        numbers = sorted(set(range(partitions) if held is None else held))
        if not numbers or not 0 <= numbers[0] <= numbers[-1] < partitions:
            raise ValueError(f"held partitions {held} not within 0-{partitions - 1}")
        self.name = name
        self.ephemeral = is_ephemeral(name)
        if self.ephemeral and partitions > 1:
            raise EphemeralPartitions(f"ephemeral topic {name} cannot have {partitions} partitions")
        self.directory = None if self.ephemeral else directory
        self.mem_queue_size = settings.mem_queue_size
        self.paused = False
        self.deleted = False
        self.ordered = ordered  # new channels are ordered
        self.channels: dict[str, Channel] = {}
        self._settings = settings
        self._node_retention_ms = settings.retention_ms
        self._log_sync = settings.sync  # (its logs': the node's, or the topic's count)
        self._count = partitions
        self._starts = list(buffer_starts) + [None] * partitions  # by number
        self._ephemeral_start = ephemeral_start
        self.partitions: list[Partition] = []  # held here, in order
        self._by_number: dict[int, Partition] = {}
        self._led: list[Partition] = []  # held and led here, in order
        self._turn = 0
        try:
            for n in numbers:
                self._open_partition(n, leading)
        except BaseException:
            self.abandon()
            raise

    # -- partitions ------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        """How many partitions the topic has (in the cluster: this node may hold fewer)."""
        return self._count

    @property
    def held_all(self) -> bool:
        return len(self.partitions) == self._count

    def partition(self, number: int) -> Partition | None:
        """Partition ``number`` when this node holds it."""
        return self._by_number.get(number)

    @property
    def log(self) -> PartitionLog | MemoryLog:
        """The first partition's log (the whole log of a single-partition topic)."""
        return self.partitions[0].log

    @property
    def buffer_start(self) -> int:
        return self.partitions[0].buffer_start

    def partition_for(self, partition: int = -1, key: bytes = b"") -> Partition:
        """The partition a publish goes to: ``partition`` if >= 0 (IndexError if the topic
        has no such partition), else the one ``key`` hashes to, else the next led one in
        turn. NotLeader when that partition is not led here (or none is)."""
        count = self._count
        led = self._led
        if partition < 0 and count == 1 and led:
            return led[0]
        if partition < 0 and not key:
            if len(led) > 1:
                self._turn = turn = (self._turn + 1) % len(led)
                return led[turn]
            if led:
                return led[0]
            raise NotLeader(f"this node leads no partition of topic {self.name}")
        if partition < 0:
            partition = key_partition(key, count)
        elif partition >= count:
            raise IndexError(f"topic {self.name} has {count} partitions, not {partition + 1}")
        part = self._by_number.get(partition)
        if part is None or not part.leading:
            raise NotLeader(f"this node does not lead partition {partition} of {self.name}")
        return part

    def expand(self, count: int, *, hold: bool) -> list[Partition]:
        """Grow to ``count`` partitions (ValueError for fewer, more than MAX_PARTITIONS, or
        an ephemeral topic); with ``hold`` (a single node) the new ones are opened here and
        led, each channel reading them from their start. A keyed publish hashes over the new
        count from now on. The partitions opened."""
        if count < self._count or count > MAX_PARTITIONS:
            raise ValueError(f"topic {self.name} has {self._count} partitions: cannot have {count}")
        if self.ephemeral and count > 1:
            raise EphemeralPartitions(f"ephemeral topic {self.name} cannot have {count} partitions")
        old, self._count = self._count, count
        self._starts += [None] * (count - old)
        return [self.add_partition(n, leading=True) for n in range(old, count) if hold]

    def set_retention(self, retention_ms: int | None) -> None:
        """Keep confirmed records ``retention_ms`` (None: the node's ``--retention``), in
        every partition held now and later (a cluster topic's ``retention`` days)."""
        base = self._node_retention_ms
        ms = base if retention_ms is None else retention_ms
        if ms == self._settings.retention_ms:
            return
        self._settings = dataclasses.replace(self._settings, retention_ms=ms)
        for part in self.partitions:
            if isinstance(part.log, PartitionLog):
                part.log.set_retention(ms)

    @property
    def retention_ms(self) -> int:
        return self._settings.retention_ms

    def set_sync_every(self, messages: int | None) -> None:
        """fsync each partition's log after ``messages`` unsynced messages (None: the
        node's ``--sync-every``), in every partition held now and later (a cluster topic's
        ``syncdisk``); the node's time bound stays, under ``--sync-always`` every write is
        synced whatever the topic says, and channel cursors keep the node's pace."""
        node = self._settings.sync
        policy = node
        if messages is not None and not node.always:
            policy = dataclasses.replace(node, every_messages=messages)
        if policy == self._log_sync:
            return
        self._log_sync = policy
        for part in self.partitions:
            if isinstance(part.log, PartitionLog):
                part.log.policy = policy

    @property
    def sync_every(self) -> int:
        """Unsynced messages after which a partition's log is fsynced (0: by time only)."""
        return self._log_sync.every_messages

    def _open_partition(self, number: int, leading: bool) -> Partition:
        part = Partition(
            self.name, number, self.directory, self._settings, self._starts[number],
            self._ephemeral_start, leading=leading,
        )  # fmt: skip
        if isinstance(part.log, PartitionLog):
            part.log.policy = self._log_sync
        self._by_number[number] = part
        self.partitions = sorted(self._by_number.values(), key=lambda p: p.number)
        self._roles_changed()
        return part

    def _roles_changed(self) -> None:
        self._led = [p for p in self.partitions if p.leading]
        self._turn = 0 if not self._led else self._turn % len(self._led)

    def add_partition(self, number: int, *, leading: bool) -> Partition:
        """Hold partition ``number`` (its log opened or created; each channel gets its part,
        starting at the log's low watermark)."""
        if not 0 <= number < self._count:
            raise ValueError(f"topic {self.name} has no partition {number} (of {self._count})")
        found = self._by_number.get(number)
        if found is not None:
            return found
        self._starts[number] = None
        part = self._open_partition(number, leading)
        if self.paused:
            part.pause()
        try:
            for name, channel in self.channels.items():
                channel.add_part(part.create_channel(name, start=part.log.low_watermark))
        except (OSError, StorageError):
            self._forget_partition(number)
            with contextlib.suppress(OSError, StorageError):  # its files stay
                part.log.close()
                if part.delayed is not None:
                    part.delayed.close()
            raise
        return part

    def _forget_partition(self, number: int) -> Partition | None:
        part = self._by_number.pop(number, None)
        if part is not None:
            self.partitions.remove(part)
            self._roles_changed()
            for channel in self.channels.values():
                channel.remove_part(number)
        return part

    def remove_partition(self, number: int) -> Partition | None:
        """Hold partition ``number`` no more: its channels' parts go, then its files but
        the offset reservation (``Partition.release``). Not the last one held (the topic
        goes instead: ``Broker.release_partition``)."""
        if len(self.partitions) == 1 and number in self._by_number:
            raise ValueError(f"partition {number} is the last of {self.name} held here")
        part = self._forget_partition(number)
        if part is not None:
            part.release()
        return part

    def set_role(self, number: int, role: str, leader_epoch: int) -> Partition:
        """Lead or follow partition ``number`` (KeyError when not held here)."""
        part = self._by_number[number]
        part.set_role(role, leader_epoch)
        self._roles_changed()
        for channel in self.channels.values():
            channel.roles_changed()
        return part

    # -- channels --------------------------------------------------------------------

    def create_channel(
        self, name: str, *, start: int | None = None, listed: bool = False
    ) -> Channel:
        """Create (or load from disk) channel ``name``; see the module doc for where it
        starts, and ``Partition.create_channel`` for ``listed``."""
        existing = self.channels.get(name)
        if existing is not None:
            return existing
        parts = [p.create_channel(name, start=start, listed=listed) for p in self.partitions]
        channel = Channel(self, name, parts, ordered=self.ordered)
        self.channels[name] = channel
        return channel

    def forget_channel(self, name: str) -> None:
        """Undo the creation of channel ``name``, which failed to be stored: no partition
        keeps its cursor, no cursor file of it stays, and what the topic holds is as it was."""
        self.channels.pop(name, None)
        for partition in self.partitions:
            channel = partition.channels.pop(name, None)
            if channel is not None:
                channel.deferral.forget_failures()
            if channel is not None and channel.cursor_file is not None:
                try:
                    channel.cursor_file.remove()
                except OSError:
                    pass  # a new channel's file: its next creation writes it again

    def delete_channel(self, name: str) -> Channel | None:
        channel = self.channels.pop(name, None)
        if channel is None:
            return None
        channel.deleted = True
        channel.close_consumers()
        for partition in self.partitions:
            partition.delete_channel(name)
        return channel

    # -- counters (sums over the partitions) -----------------------------------------

    @property
    def message_count(self) -> int:
        return sum(p.message_count for p in self.partitions)

    @property
    def message_bytes(self) -> int:
        return sum(p.message_bytes for p in self.partitions)

    @property
    def dropped_count(self) -> int:
        return sum(p.dropped_count for p in self.partitions)

    @property
    def depth(self) -> int:
        return sum(p.depth for p in self.partitions)

    # -- pause, empty, retention, close ----------------------------------------------

    def pause(self) -> None:
        """Hold what arrives from now on at the topic (channels keep what they have)."""
        self.paused = True
        for partition in self.partitions:
            partition.pause()

    def unpause(self) -> None:
        self.paused = False
        for partition in self.partitions:
            partition.paused = False

    def empty(self) -> None:
        """NSQ's /topic/empty: drop what the topic holds (not what its channels hold)."""
        for partition in self.partitions:
            partition.empty()

    def retain(self, now: int) -> None:
        for partition in self.partitions:
            partition.retain(now)

    def forget_taken(self) -> None:
        """Ephemeral: let go of what every channel has taken into its own queue."""
        for partition in self.partitions:
            partition.forget_taken()

    def close(self) -> None:
        for partition in self.partitions:
            partition.close()

    def abandon(self) -> None:
        """Close the files of a topic whose creation failed to be stored (they stay: the
        directory may hold the data of a topic the metadata lost, found again next time)."""
        for partition in self.partitions:
            try:
                partition.log.close()
            except (OSError, StorageError):
                pass  # nothing was written through it

    def destroy(self) -> None:
        """Delete: close consumers and remove every file of the topic."""
        self.deleted = True
        for name in list(self.channels):
            self.delete_channel(name)
        for partition in self.partitions:
            partition.drop()
        if self.directory is not None:  # all but the partitions' reservations (p<N>/reserved)
            for path in self.directory.iterdir():
                if path.name[:1] == "p" and path.name[1:].isdigit():
                    continue
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)


__all__ = ["MAX_PARTITIONS", "EphemeralPartitions", "Topic"]
