"""A topic: its partitions (each a log on disk, or in memory when ephemeral) and its channels.

A topic has 1 to ``MAX_PARTITIONS`` partitions, fixed when it is created. Each
``Partition`` owns one log (``<topic dir>/p<N>``), its delayed store and one ``Channel``
(cursor) per channel of the topic; the user-visible channel over all partitions is a
``ChannelGroup`` (``nsqpy.broker.partitioned``). A publish goes to one partition: the one
asked for, else the one a partition key hashes to (CRC-32 of the key modulo the partition
count: stable across restarts), else the next in turn. Within a partition, publishing
appends to the log's pending buffer; the broker flushes every dirty log once per
event-loop turn (group commit) and then lets the channels read. A topic with no channels
keeps what it receives from ``buffer_start`` on, and the first channel created starts
there; later channels start at the tail, as NSQ does. A paused topic holds what arrives
after the pause (``paused_at``): channels read only up to ``readable_end``, so what they
already had keeps flowing, as when NSQ's topic pump stops. An ephemeral topic (always one
partition) keeps its messages in memory: at most ``mem_queue_size`` of them while it has
no channel (or is paused), dropping the overflow (the newest) and still counting it, as
NSQ does; with channels, each channel takes what reaches it into its own bounded queue
and the topic forgets it (``forget_taken``). A channel loaded from disk confirms, in each
partition, what that partition's delayed store holds (``_confirm_deferred``). Must not
import asyncio or any server.
"""

from __future__ import annotations

import logging
import shutil
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nsqpy.broker.channel import Channel
from nsqpy.broker.deferred import Deferred, DurableDeferred, MemoryDeferred
from nsqpy.broker.extensions import NO_EXTENSION, Extension, extension_from, extension_of
from nsqpy.broker.partitioned import ChannelGroup
from nsqpy.errors import StorageError
from nsqpy.protocol.names import is_ephemeral
from nsqpy.storage import (
    CursorFile,
    CursorState,
    DelayedStore,
    Entry,
    MemoryLog,
    PartitionLog,
    SyncPolicy,
)

log = logging.getLogger("nsqpy.broker")


class EphemeralPartitions(ValueError):
    """An ephemeral topic has exactly one partition (its channels keep their own queues)."""


MAX_PARTITIONS = 255  # as youzan's nsqlookupd allows; message IDs could address 1024
EXT_CACHE = 4096  # extensions of recently delivered offsets kept per partition
EXT_READ = 64  # records read at once to fill that cache

Extras = tuple[int, bytes, bytes]  # a record's trace id, partition key and headers
NO_EXTRAS: Extras = (0, b"", b"")


@dataclass(frozen=True, slots=True)
class LogSettings:
    """How a topic's partition logs are made (shared by every partition of a broker)."""

    sync: SyncPolicy
    segment_bytes: int
    mem_queue_size: int
    retention_ms: int = 0
    retention_bytes: int = 0
    clock: Callable[[], int] = field(default=time.time_ns)  # cursor files' save timing


class Partition:
    """One partition of a topic: a log, its delayed store and one cursor per channel."""

    def __init__(
        self,
        name: str,
        number: int,
        directory: Path | None,
        settings: LogSettings,
        buffer_start: int | None = None,
    ) -> None:
        self.name = name  # the topic's name (channels log it)
        self.number = number
        self.ephemeral = directory is None
        self.directory = directory  # the topic's directory; this log is in p<number>
        self.mem_queue_size = settings.mem_queue_size
        self.clock = settings.clock
        self.sync_always = settings.sync.always
        self.sync = settings.sync  # channel cursors are saved on the same schedule
        self.paused = False
        self.paused_at = 0  # while paused: channels read only below this offset
        self.channels: dict[str, Channel] = {}
        self.message_count = 0
        self.message_bytes = 0
        self.dropped_count = 0  # ephemeral overflow (NSQ drops it silently)
        self.delayed: DelayedStore | None = None
        self._ext: dict[int, Extension] = {}
        # Ephemeral: (trace id, key, headers) of records its log may let go before every
        # channel has delivered them (each channel reads its own queue), by offset.
        self._kept: dict[int, Extras] = {}
        self.log: PartitionLog | MemoryLog
        if directory is None:
            self.log = MemoryLog(None)  # bounded by publish and forget_taken
        else:
            self.log = PartitionLog(
                directory / f"p{number}",
                sync=settings.sync,
                segment_bytes=settings.segment_bytes,
                retention_ms=settings.retention_ms,
                retention_bytes=settings.retention_bytes,
            )
        self.buffer_start = self.log.low_watermark if buffer_start is None else buffer_start

    @property
    def partition(self) -> int:
        """The partition number (what ``Channel`` puts in message IDs)."""
        return self.number

    # -- channels --------------------------------------------------------------------

    def _cursor_path(self, channel: str) -> Path | None:
        if self.directory is None or is_ephemeral(channel):
            return None
        base = self.directory if self.number == 0 else self.directory / f"p{self.number}"
        folder = base / "cursors"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"channel-{channel}.cursor"

    def _deferred_for(self, channel: str) -> Deferred:
        if self.directory is None or is_ephemeral(channel):
            return MemoryDeferred()
        if self.delayed is None:
            self.delayed = DelayedStore(
                self.directory / f"p{self.number}" / "delayed.sqlite", durable=self.sync_always
            )
        return DurableDeferred(self.delayed, channel)

    def create_channel(
        self, name: str, *, start: int | None = None, listed: bool = False
    ) -> Channel:
        """Create (or load from disk) the cursor of channel ``name`` in this partition.

        ``listed``: the metadata names this channel, so its cursor should be on disk. When
        that file is missing or corrupt the cursor restarts at the log's low watermark:
        its backlog is redelivered (duplicates), never skipped.
        """
        existing = self.channels.get(name)
        if existing is not None:
            return existing
        path = self._cursor_path(name)
        cursor_file = (
            CursorFile(
                path,
                every_confirmations=self.sync.every_messages,
                every_ms=self.sync.every_ms,
                clock=self.clock,
            )
            if path is not None
            else None
        )
        cursor = cursor_file.load() if cursor_file is not None else None
        if cursor is None and listed and cursor_file is not None:
            start = self.log.low_watermark
            log.error(
                "TOPIC(%s): channel %s partition %d has no readable cursor (%s); restarting "
                "it at the log's low watermark %d: messages it had finished may be delivered "
                "again",
                self.name, name, self.number, cursor_file.path, start,
            )  # fmt: skip
        if cursor is None:
            if start is None:
                start = self.buffer_start if not self.channels else self.readable_end
            start = max(start, self.log.low_watermark)
            cursor = CursorState(start, start)
            counted_from = start  # what it starts with counts as put into it (message_count)
        else:
            cursor.next_read = cursor.confirmed
            counted_from = self.readable_end
        deferred = self._deferred_for(name)
        self._confirm_deferred(name, cursor, deferred)
        if cursor_file is not None:
            cursor_file.save(cursor)
        channel = Channel(self, name, cursor, cursor_file, deferred, counted_from=counted_from)
        self.channels[name] = channel
        return channel

    def _confirm_deferred(self, name: str, cursor: CursorState, deferred: Deferred) -> None:
        """What the deferred set holds left the cursor's window when it went there; after a
        crash the saved cursor may predate that, and the log must not deliver it again (at
        once, without its delay). An entry past the log's end (its record was lost with an
        unsynced tail) points at nothing: it is dropped, never confirmed ahead of the log."""
        end = self.log.high_watermark
        offsets = deferred.offsets()
        cursor.confirm_many(o for o in offsets if o < end)
        stale = [o for o in offsets if o >= end]
        for offset in stale:
            deferred.remove(offset)
        if stale:
            log.error(
                "TOPIC(%s): channel %s partition %d had %d deferred entries past the log's "
                "end %d; dropped",
                self.name, name, self.number, len(stale), end,
            )  # fmt: skip

    def delete_channel(self, name: str) -> Channel | None:
        channel = self.channels.pop(name, None)
        if channel is None:
            return None
        channel.deleted = True
        channel.deferred.clear()
        if channel.cursor_file is not None:
            channel.cursor_file.remove()
        if not self.channels:
            self.buffer_start = self.readable_end  # a pause's held messages stay at the topic
        return channel

    # -- publishing ------------------------------------------------------------------

    def _room(self, count: int) -> int:
        """How many of ``count`` new messages an ephemeral partition keeps (the rest drop)."""
        if self.paused or not self.channels:
            room = max(0, self.mem_queue_size - self.depth)
            if room < count:
                self.dropped_count += count - room
                return room
        return count

    def publish(self, bodies: Sequence[bytes], timestamp: int, deliver_at: int = 0) -> int:
        """Append to the pending buffer; returns the last offset (flushed by the broker).

        Every body counts in message_count/message_bytes, also the ones an ephemeral topic
        drops because it already holds ``mem_queue_size`` messages (NSQ counts them too).
        """
        self.message_count += len(bodies)
        self.message_bytes += sum(map(len, bodies))
        if self.ephemeral:
            bodies = bodies[: self._room(len(bodies))]
        first = self.log.append_bodies(bodies, timestamp, deliver_at)
        return first + len(bodies) - 1

    def publish_entries(self, entries: Sequence[Entry]) -> int:
        """Like ``publish`` for records with extensions (trace id, partition key, headers)."""
        self.message_count += len(entries)
        self.message_bytes += sum(len(e.body) for e in entries)
        if self.ephemeral:
            entries = entries[: self._room(len(entries))]
        first = self.log.append(entries)
        if self.ephemeral:
            for offset, e in enumerate(entries, first):
                if e.trace_id or e.partition_key or e.headers:
                    self._kept[offset] = (e.trace_id, e.partition_key, e.headers)
        return first + len(entries) - 1

    def extras(self, offset: int) -> Extras:
        """The trace id, partition key and headers of the record at ``offset`` (zero and
        empty when it has none, or is gone)."""
        if self.ephemeral:
            return self._kept.get(offset, NO_EXTRAS)
        try:
            records = self.log.read(offset, 1)
        except (StorageError, OSError):
            return NO_EXTRAS
        if not records or records[0].offset != offset:
            return NO_EXTRAS
        return records[0].trace_id, records[0].partition_key, records[0].headers

    def extension(self, offset: int) -> Extension:
        """The extension to deliver with ``offset`` (read ahead and cached; none if gone)."""
        if self.ephemeral:
            kept = self._kept.get(offset)
            return NO_EXTENSION if kept is None else extension_from(*kept)
        found = self._ext.get(offset)
        if found is not None:
            return found
        if len(self._ext) >= EXT_CACHE:
            self._ext.clear()
        try:
            records = self.log.read(offset, EXT_READ)
        except (StorageError, OSError):
            return NO_EXTENSION
        for record in records:
            self._ext[record.offset] = extension_of(record)
        return self._ext.get(offset, NO_EXTENSION)

    # -- pause, depth, empty, retention ----------------------------------------------

    def pause(self) -> None:
        if not self.paused:
            self.paused = True
            self.paused_at = self.log.high_watermark

    @property
    def readable_end(self) -> int:
        """The offset channels may read up to: the flushed end, or where the pause began."""
        flushed = self.log.flushed_offset
        return min(self.paused_at, flushed) if self.paused else flushed

    @property
    def depth(self) -> int:
        """Messages held here: all while there is no channel, else those held by a pause."""
        flushed = self.log.flushed_offset
        if self.channels:
            return flushed - self.readable_end
        return max(0, flushed - max(self.buffer_start, self.log.low_watermark))

    def empty(self) -> None:
        flushed = self.log.flushed_offset
        if self.channels and self.paused:
            for channel in self.channels.values():
                channel.skip(self.readable_end, flushed)
            self.paused_at = flushed
        self.buffer_start = flushed
        if self.ephemeral:
            self.log.retain(max(flushed, self.log.low_watermark), 0)

    def forget_taken(self) -> None:
        """Ephemeral: let go of what every channel has taken into its own queue, and of
        the extensions of what every channel has confirmed."""
        if not self.ephemeral:
            return
        channels = self.channels.values()
        if channels:
            self.log.retain(min(c.arrived for c in channels), 0)
        kept = self._kept
        if kept:
            floor = min((c.cursor.confirmed for c in channels), default=self.log.low_watermark)
            while kept:
                offset = next(iter(kept))  # offsets were kept in increasing order
                if offset >= floor:
                    break
                del kept[offset]

    def retain(self, now: int) -> None:
        if self.ephemeral:
            self.forget_taken()
            return
        if not self.channels:
            confirmed: int | None = None  # no cursors: keep everything
        else:
            confirmed = min(c.cursor.confirmed for c in self.channels.values())
            if self.delayed is not None:
                oldest = self.delayed.min_offset()
                if oldest is not None:
                    confirmed = min(confirmed, oldest)
        self.log.retain(confirmed, now)

    def close(self) -> None:
        for channel in self.channels.values():
            channel.maybe_save_cursor(force=True)
        if self.delayed is not None:
            self.delayed.close()
        self.log.close()

    def drop(self) -> None:
        """Close the log and delayed store of a deleted topic (files are removed by Topic)."""
        if self.delayed is not None:
            self.delayed.close()
            self.delayed = None
        self.log.close()


class Topic:
    """One topic: its partitions and its user-visible channels (``ChannelGroup``)."""

    def __init__(
        self,
        name: str,
        directory: Path | None,
        settings: LogSettings,
        *,
        partitions: int = 1,
        buffer_starts: Sequence[int | None] = (),
        ordered: bool = False,
    ) -> None:
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise ValueError(f"partition count {partitions} out of range 1-{MAX_PARTITIONS}")
        self.name = name
        self.ephemeral = is_ephemeral(name)
        if self.ephemeral and partitions > 1:
            raise EphemeralPartitions(f"ephemeral topic {name} cannot have {partitions} partitions")
        self.directory = None if self.ephemeral else directory
        self.mem_queue_size = settings.mem_queue_size
        self.paused = False
        self.deleted = False
        self.ordered = ordered  # new channels are ordered
        self.channels: dict[str, ChannelGroup] = {}
        starts = list(buffer_starts) + [None] * partitions
        self.partitions = [
            Partition(name, n, self.directory, settings, starts[n]) for n in range(partitions)
        ]
        self._turn = 0

    # -- partitions ------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    @property
    def log(self) -> PartitionLog | MemoryLog:
        """Partition 0's log (the whole log of a single-partition topic)."""
        return self.partitions[0].log

    @property
    def buffer_start(self) -> int:
        return self.partitions[0].buffer_start

    def partition_for(self, partition: int = -1, key: bytes = b"") -> Partition:
        """The partition a publish goes to: ``partition`` if >= 0 (IndexError if there is no
        such partition), else the one ``key`` hashes to, else the next in turn."""
        partitions = self.partitions
        if partition < 0 and len(partitions) == 1:
            return partitions[0]
        count = len(partitions)
        if partition >= 0:
            if partition >= count:
                raise IndexError(f"topic {self.name} has {count} partitions, not {partition + 1}")
            return self.partitions[partition]
        if key:
            return self.partitions[zlib.crc32(key) % count]
        self._turn = (self._turn + 1) % count
        return self.partitions[self._turn]

    # -- channels --------------------------------------------------------------------

    def create_channel(
        self, name: str, *, start: int | None = None, listed: bool = False
    ) -> ChannelGroup:
        """Create (or load from disk) channel ``name``; see the module doc for where it
        starts, and ``Partition.create_channel`` for ``listed``."""
        existing = self.channels.get(name)
        if existing is not None:
            return existing
        parts = [p.create_channel(name, start=start, listed=listed) for p in self.partitions]
        group = ChannelGroup(self, name, parts, ordered=self.ordered)
        self.channels[name] = group
        return group

    def delete_channel(self, name: str) -> ChannelGroup | None:
        group = self.channels.pop(name, None)
        if group is None:
            return None
        group.deleted = True
        group.close_consumers()
        for partition in self.partitions:
            partition.delete_channel(name)
        return group

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

    def destroy(self) -> None:
        """Delete: close consumers and remove every file of the topic."""
        self.deleted = True
        for name in list(self.channels):
            self.delete_channel(name)
        for partition in self.partitions:
            partition.drop()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
