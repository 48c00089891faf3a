"""One partition of a topic: its log, delayed store, DPUB notes and each channel's part.

A ``Partition`` owns one log (``<topic dir>/p<N>``, or in memory when ephemeral), its
delayed store and one ``ChannelPartition`` (``nsqpy.broker.channel_partition``: cursor,
in-flight, deferred) per channel of its topic. Publishing appends to the log's pending
buffer; the broker flushes every dirty log once per event-loop turn (group commit) and then
lets the channels read, up to ``readable_end`` (the flushed end; the durable end under
``--sync-always``; where a pause began). A partition with no channels keeps what it
receives from ``buffer_start`` on. An ephemeral partition keeps its messages in memory, at
most ``mem_queue_size`` of them while it has no channel (or is paused), dropping the
overflow and still counting it, as NSQ does; each channel takes what reaches it into its
own bounded queue and the partition forgets it (``forget_taken``). Loading a channel from
disk brings its cursor back inside the log the partition recovered (``_bound_by_log``, gaps
confirmed) and hands what the delayed store holds to its read to skip
(``_deferred_ahead``); a damaged delayed store makes its channels read the log again
(``settle_lost_deferred``). A partition notes its delayed messages (``dpubs``) for its
channels to defer as they reach them. In cluster mode a partition has a ``role``: the
leader takes writes and its channels deliver; a follower does neither (its log and cursors
are kept for replication), and ``set_role`` to leader begins the leader epoch in the log.
Consumers read up to ``committed_offset``: the readable end, or less while replication has
not confirmed it (``commit_bound``). Must not import asyncio or any server.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nsqpy.broker.channel_partition import ChannelPartition
from nsqpy.broker.deferred import Deferred, DurableDeferred, MemoryDeferred
from nsqpy.broker.dpubs import NoteBudget, PublishedDeferred
from nsqpy.broker.extensions import NO_EXTENSION, Extension, extension_from, extension_of
from nsqpy.broker.health import Health, cursor_key, fsync_key
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
from nsqpy.storage.files import fsync_dir

log = logging.getLogger("nsqpy.broker")

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
    health: Health = field(default_factory=Health)  # where storage failures are reported
    dpub_budget: NoteBudget = field(default_factory=NoteBudget)  # DPUB notes of them all


CURSORS = "cursors"  # <topic dir>/p<N>/cursors/channel-<name>.cursor
LEADER = "leader"  # a partition's role on this node (single node: always the leader)
FOLLOWER = "follower"


def move_old_cursors(topic_dir: Path) -> None:
    """Data paths written before every partition kept its cursors in its own directory had
    partition 0's in ``<topic dir>/cursors``: move them to ``p0/cursors`` (each a rename,
    then the directories fsynced), so there is one layout."""
    old = topic_dir / CURSORS
    if not old.is_dir():
        return
    new = topic_dir / "p0" / CURSORS
    new.mkdir(parents=True, exist_ok=True)
    moved = 0
    for path in old.iterdir():
        if path.name.endswith(".tmp"):
            path.unlink(missing_ok=True)
            continue
        os.replace(path, new / path.name)
        moved += 1
    fsync_dir(new)
    old.rmdir()
    fsync_dir(topic_dir)
    log.info("topic %s: %d cursor files moved to p0/%s", topic_dir.name, moved, CURSORS)


class Partition:
    """One partition of a topic: a log, its delayed store and one cursor per channel."""

    def __init__(
        self,
        name: str,
        number: int,
        directory: Path | None,
        settings: LogSettings,
        buffer_start: int | None = None,
        start_offset: int = 0,
        *,
        leading: bool = True,
    ) -> None:
        self.name = name  # the topic's name (channels log it)
        self.number = number
        # Cluster mode: a follower takes no write and its channels deliver nothing.
        self.leading = leading
        # Replication bounds what consumers read by this (None: by the log's readable end,
        # as on a single node). A partition held in a cluster (created following) starts
        # closed, bound at 0 and not writable: only its replica state opens it
        # (``nsqd.replicas.Replication._publish`` is the one writer of both in a cluster).
        self.commit_bound: int | None = None if leading else 0
        # Replication: publishes are answered only below this (None: as ``commit_bound``);
        # while the ISR is not a majority it stays where it was, though consumers may read
        # on to ``commit_bound`` (``ReplicaState.answerable``).
        self.ack_bound: int | None = None if leading else 0
        # Replication: the confirmed offset of a channel (by name) that every ISR follower
        # has taken; an ordered channel delivers its next message only once it reaches
        # the channel's own (None: no followers to wait for, as on a single node).
        self.cursor_bound: Callable[[str], int] | None = None
        # Cluster: False while the partition's ISR is not more than half its replicas
        # (writes get E_FAILED_ON_NOT_WRITABLE); always True on a single node.
        self.writable = leading
        # The last write or fsync of its log failed (a full or failing disk) and none has
        # succeeded since; a cluster leader reports it (``NodeInfo.failing``).
        self.write_failing = False
        self.ephemeral = directory is None
        self.directory = directory  # the topic's directory; this log is in p<number>
        self.mem_queue_size = settings.mem_queue_size
        self.clock = settings.clock
        self.health = settings.health
        self.sync_always = settings.sync.always
        self.sync = settings.sync  # channel cursors are saved on the same schedule
        self.paused = False
        self.paused_at = 0  # while paused: channels read only below this offset
        self.channels: dict[str, ChannelPartition] = {}
        self.message_count = 0
        self.message_bytes = 0
        self.dropped_count = 0  # ephemeral overflow (NSQ drops it silently)
        self.delayed: DelayedStore | None = None
        self._ext: dict[int, Extension] = {}
        # Ephemeral: (trace id, key, headers) of records its log may let go before every
        # channel has delivered them (each channel reads its own queue), by offset.
        self._kept: dict[int, Extras] = {}
        # delayed messages not yet in every channel's set
        self.dpubs = PublishedDeferred(settings.dpub_budget)
        self.purges: set[str] = set()  # deleted channels whose deferred rows are still stored
        self.log: PartitionLog | MemoryLog
        if directory is None:
            # bounded by publish and forget_taken; ``start_offset``: above the offsets of
            # every ephemeral topic deleted before, so no message ID comes back
            self.log = MemoryLog(None, start_offset=start_offset)
        else:
            self.log = PartitionLog(
                directory / f"p{number}",
                sync=settings.sync,
                segment_bytes=settings.segment_bytes,
                retention_ms=settings.retention_ms,
                retention_bytes=settings.retention_bytes,
            )
            if number == 0:
                move_old_cursors(directory)
        self.buffer_start = self.log.low_watermark if buffer_start is None else buffer_start
        self.leader_epoch = self.log.epoch

    @property
    def partition(self) -> int:
        """The partition number (what ``ChannelPartition`` puts in message IDs)."""
        return self.number

    # -- role (cluster mode) ---------------------------------------------------------

    @property
    def role(self) -> str:
        return LEADER if self.leading else FOLLOWER

    def set_role(self, role: str, leader_epoch: int) -> None:
        """Lead or follow in ``leader_epoch`` (ValueError for another role). Leading begins
        the epoch in the log (``PartitionLog.begin_epoch``: its history records the epoch
        at the log's end; StorageError for an epoch below the log's)."""
        if role not in (LEADER, FOLLOWER):
            raise ValueError(f"role {role!r} is not {LEADER!r} or {FOLLOWER!r}")
        if role == LEADER:
            if isinstance(self.log, PartitionLog):
                self.log.begin_epoch(leader_epoch)
            else:
                self.log.set_epoch(leader_epoch)
        self.leading = role == LEADER
        self.leader_epoch = leader_epoch
        self.write_failing = False

    @property
    def committed_offset(self) -> int:
        """What consumers may see of the log, pauses aside: its readable end, or less while
        replication has not confirmed the rest (``commit_bound``)."""
        end = self.log.readable_offset
        bound = self.commit_bound
        return end if bound is None or bound > end else bound

    # -- channels --------------------------------------------------------------------

    def _cursor_path(self, channel: str) -> Path | None:
        if self.directory is None or is_ephemeral(channel):
            return None
        folder = self.directory / f"p{self.number}" / CURSORS
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
    ) -> ChannelPartition:
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
        fresh = cursor is None
        if cursor is not None:
            self._bound_by_log(name, cursor)
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
        if fresh and not listed and cursor_file is not None:
            self._purge(name, deferred)  # a new channel: rows of a deleted one are not its
        if listed and self.delayed is not None and self.delayed.damaged:
            low = self.log.low_watermark
            log.error(
                "TOPIC(%s): channel %s partition %d is read again from the log's low "
                "watermark %d: the deferred entries it had were lost with the damaged delayed "
                "store (messages may be delivered again, none is lost)",
                self.name, name, self.number, low,
            )  # fmt: skip
            cursor.reset(low)
        for start_gap, end_gap in self.log.gaps():  # offsets the log does not have
            if end_gap > cursor.confirmed:
                cursor.confirm_range(start_gap, end_gap)
        ahead = self._deferred_ahead(name, cursor, deferred)
        if cursor_file is not None:
            try:
                cursor_file.save(cursor)  # (a new channel's file is what makes it durable)
            except OSError as exc:
                if not listed:
                    raise  # not created: nothing would find it after a restart
                cursor_file.note(1)  # left due: the periodic save writes it (a full disk)
                self.health.failed(cursor_key(cursor_file.path), exc)
        channel = ChannelPartition(
            self, name, cursor, cursor_file, deferred, counted_from=counted_from
        )
        if ahead:
            channel.deferral.hold_ahead(ahead)
        self.channels[name] = channel
        return channel

    def _purge_what(self, channel: str) -> str:
        return (
            f"failed to clear the deferred messages of channel {self.name}/{channel} "
            f"partition {self.number}"
        )

    def _purge(self, name: str, deferred: Deferred) -> None:
        """Remove the deferred rows a deleted channel ``name`` left (StorageError: kept)."""
        if name in self.purges or deferred.count():
            deferred.clear()
            self.forget_purge(name)

    def forget_purge(self, name: str) -> None:
        if name in self.purges:
            self.purges.discard(name)
            self.health.ok(self._purge_what(name))

    def retry_purges(self) -> None:
        """Timer: clear the deferred rows of deleted channels that a storage failure left."""
        store = self.delayed
        for name in list(self.purges):
            if store is not None and name not in self.channels:
                try:
                    store.clear(name)
                except StorageError:
                    continue  # still failing: reported when it first failed
            self.forget_purge(name)  # (or purged when the channel was created again)

    def settle_lost_deferred(self) -> None:
        """After loading: once every channel read again because the delayed store was
        damaged has its cursor on disk, the store's loss is made good (see DelayedStore)."""
        store = self.delayed
        if store is None or not store.damaged:
            return
        files = [c.cursor_file for c in self.channels.values() if c.cursor_file is not None]
        if all(f.saved for f in files):
            store.settled()

    def _bound_by_log(self, name: str, cursor: CursorState) -> None:
        """A saved cursor beyond the log's end: the log lost a tail that had been read (a
        crash before its fsync) and kept no reservation of those offsets (a data path from
        before reservations, or a damaged ``reserved`` file). The log goes on past every
        offset the cursor names, so new messages never take offsets it counts as done."""
        top = max(cursor.confirmed, cursor.next_read, cursor.ranges[-1][1] if cursor.ranges else 0)
        end = self.log.high_watermark
        if top > end and isinstance(self.log, PartitionLog):
            log.error(
                "TOPIC(%s): channel %s partition %d has read up to offset %d but the log "
                "ends at %d (its tail was lost); new messages start at %d",
                self.name, name, self.number, top, end, top,
            )  # fmt: skip
            self.log.advance_to(top)

    def _deferred_ahead(self, name: str, cursor: CursorState, deferred: Deferred) -> list[int]:
        """What the deferred set holds left the cursor's window when it went there; after a
        crash the saved cursor may predate that, and the log must not deliver it again (at
        once, without its delay): the offsets it holds that the cursor has not confirmed,
        sorted, for the channel's read to skip (``hold_ahead``; no cursor range each). An
        entry whose record the log no longer has (lost with an unsynced tail: past the end
        or in a gap) points at nothing: it is dropped."""
        end = self.log.high_watermark
        gaps = self.log.gaps()
        try:
            offsets = deferred.offsets()
        except StorageError as exc:  # (a full disk at start): at worst they come again early
            log.error("TOPIC(%s): channel %s: %s", self.name, name, exc)
            return []

        def gone(offset: int) -> bool:
            return offset >= end or any(a <= offset < b for a, b in gaps)

        stale = [o for o in offsets if gone(o)]
        ahead = sorted(o for o in offsets if not gone(o) and not cursor.is_confirmed(o))
        try:
            for offset in stale:
                deferred.remove(offset)
        except StorageError as exc:  # removed when they come due (their record is gone)
            log.error("TOPIC(%s): channel %s: %s", self.name, name, exc)
        if stale:
            log.error(
                "TOPIC(%s): channel %s partition %d had %d deferred entries whose records "
                "the log lost (a crash before their fsync); dropped",
                self.name, name, self.number, len(stale),
            )  # fmt: skip
        return ahead

    def delete_channel(self, name: str) -> ChannelPartition | None:
        channel = self.channels.pop(name, None)
        if channel is None:
            return None
        channel.deleted = True
        channel.deferral.forget_failures()
        try:
            channel.deferred.clear()
        except StorageError as exc:  # the channel goes all the same; retry_purges clears them
            self.purges.add(name)
            self.health.failed(self._purge_what(name), exc)
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
        """The offset channels may read up to: the flushed end (under ``--sync-always`` the
        durable end: nothing is delivered that a crash could take back), or where the pause
        began."""
        end = self.log.readable_offset
        bound = self.commit_bound  # (inline ``committed_offset``: read at every pump)
        if bound is not None and bound < end:
            end = bound
        return min(self.paused_at, end) if self.paused else end

    @property
    def depth(self) -> int:
        """Messages held here: all while there is no channel, else those held by a pause."""
        flushed = self.log.flushed_offset
        if self.channels:
            return flushed - self.readable_end
        start = max(self.buffer_start, self.log.low_watermark)
        held = flushed - start
        for a, b in self.log.gaps():  # offsets the log skips hold nothing
            if b > start:
                held -= min(b, flushed) - max(a, start)
        return max(0, held)

    def empty(self) -> None:
        flushed = self.log.flushed_offset
        if self.channels and self.paused:
            for channel in self.channels.values():
                channel.skip(self.readable_end, flushed)
            self.paused_at = flushed
        self.buffer_start = flushed
        if self.ephemeral:
            self.log.retain(max(flushed, self.log.low_watermark), 0)

    def unwritten(self) -> None:
        """A flush failed: forget the DPUB notes of the records it did not write."""
        self.dpubs.forget_from(self.log.high_watermark)

    def settle_deferred(self) -> None:
        """Forget the DPUB notes every channel has taken (``nsqpy.broker.dpubs``)."""
        held = max(self.buffer_start, self.log.low_watermark)
        self.dpubs.forget_below(min((c.arrived for c in self.channels.values()), default=held))

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
            if self.delayed is not None and any(c.deferred.count() for c in self.channels.values()):
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

    def release(self) -> None:
        """This node holds the partition no more: its channels' parts go (their cursor
        files first, so that no queued save writes one again), then every file but the
        offset reservation (``drop``)."""
        for channel in self.channels.values():
            channel.deleted = True
            channel.deferral.forget_failures()
            if channel.cursor_file is not None:
                channel.cursor_file.remove()
        self.channels.clear()
        self.drop()

    def drop(self) -> None:
        """A deleted topic: close the delayed store and remove the log's files but its
        offset reservation (the topic's other files are removed by Topic)."""
        self.dpubs.clear()
        for name in self.purges:
            self.health.forget(self._purge_what(name))
        self.purges.clear()
        self.health.forget(fsync_key(self.name, self.number))
        if self.delayed is not None:
            self.delayed.close()
            self.delayed = None
        if isinstance(self.log, PartitionLog):
            self.log.destroy()
        else:
            self.log.close()
