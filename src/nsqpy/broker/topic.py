"""A topic: its partition log (on disk, or in memory when ephemeral) and its channels.

Publishing appends to the log's pending buffer; the broker flushes every dirty log once
per event-loop turn (group commit) and then lets the channels read. A topic with no
channels keeps what it receives from ``buffer_start`` on, and the first channel created
starts there; later channels start at the tail, as NSQ does. Must not import asyncio or
any server.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from nsqpy.broker.channel import Channel
from nsqpy.broker.deferred import Deferred, DurableDeferred, MemoryDeferred
from nsqpy.protocol.names import is_ephemeral
from nsqpy.storage import (
    CursorFile,
    CursorState,
    DelayedStore,
    MemoryLog,
    PartitionLog,
    SyncPolicy,
)


class Topic:
    """One topic (a single partition, number 0, on a single node)."""

    partition = 0

    def __init__(
        self,
        name: str,
        directory: Path | None,
        *,
        sync: SyncPolicy,
        segment_bytes: int,
        mem_queue_size: int,
        retention_ms: int = 0,
        retention_bytes: int = 0,
        buffer_start: int | None = None,
    ) -> None:
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.directory = None if self.ephemeral else directory
        self.paused = False
        self.deleted = False
        self.channels: dict[str, Channel] = {}
        self.message_count = 0
        self.message_bytes = 0
        self.delayed: DelayedStore | None = None
        self.log: PartitionLog | MemoryLog
        if self.directory is None:
            self.log = MemoryLog(mem_queue_size)
        else:
            self.log = PartitionLog(
                self.directory / "p0",
                sync=sync,
                segment_bytes=segment_bytes,
                retention_ms=retention_ms,
                retention_bytes=retention_bytes,
            )
        self.buffer_start = self.log.low_watermark if buffer_start is None else buffer_start

    # -- channels --------------------------------------------------------------------

    def _cursor_path(self, channel: str) -> Path | None:
        if self.directory is None or is_ephemeral(channel):
            return None
        folder = self.directory / "cursors"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"channel-{channel}.cursor"

    def _deferred_for(self, channel: str) -> Deferred:
        if self.directory is None or is_ephemeral(channel):
            return MemoryDeferred()
        if self.delayed is None:
            self.delayed = DelayedStore(self.directory / "p0" / "delayed.sqlite")
        return DurableDeferred(self.delayed, channel)

    def create_channel(self, name: str, *, start: int | None = None) -> Channel:
        """Create (or load from disk) the channel ``name``; see the module doc for where it starts."""
        existing = self.channels.get(name)
        if existing is not None:
            return existing
        path = self._cursor_path(name)
        cursor_file = CursorFile(path) if path is not None else None
        cursor = cursor_file.load() if cursor_file is not None else None
        if cursor is None:
            if start is None:
                start = self.buffer_start if not self.channels else self.log.flushed_offset
            start = max(start, self.log.low_watermark)
            cursor = CursorState(start, start)
        else:
            cursor.next_read = cursor.confirmed
        if cursor_file is not None:
            cursor_file.save(cursor)
        channel = Channel(self, name, cursor, cursor_file, self._deferred_for(name))
        self.channels[name] = channel
        return channel

    def delete_channel(self, name: str) -> Channel | None:
        channel = self.channels.pop(name, None)
        if channel is None:
            return None
        channel.deleted = True
        channel.close_consumers()
        channel.deferred.clear()
        if channel.cursor_file is not None:
            channel.cursor_file.remove()
        if not self.channels:
            self.buffer_start = self.log.flushed_offset
        return channel

    # -- publishing ------------------------------------------------------------------

    def publish(self, bodies: list[bytes], timestamp: int, deliver_at: int = 0) -> int:
        """Append to the pending buffer; returns the last offset (flushed by the broker)."""
        first = self.log.append_bodies(bodies, timestamp, deliver_at)
        self.message_count += len(bodies)
        self.message_bytes += sum(map(len, bodies))
        return first + len(bodies) - 1

    # -- depth, empty, retention -----------------------------------------------------

    @property
    def depth(self) -> int:
        """Messages held at the topic: all of them while there is no channel, else none."""
        if self.channels:
            return 0
        return max(0, self.log.flushed_offset - max(self.buffer_start, self.log.low_watermark))

    def empty(self) -> None:
        """NSQ's /topic/empty: drop what the topic holds for a future first channel."""
        self.buffer_start = self.log.flushed_offset

    def retain(self, now: int) -> None:
        if not self.channels:
            confirmed: int | None = None  # no cursors: keep everything
        else:
            confirmed = min(c.cursor.confirmed for c in self.channels.values())
            if self.delayed is not None:
                oldest = self.delayed_min_offset()
                if oldest is not None:
                    confirmed = min(confirmed, oldest)
        self.log.retain(confirmed, now)

    def delayed_min_offset(self) -> int | None:
        if self.delayed is None:
            return None
        return self.delayed.min_offset()

    def close(self) -> None:
        for channel in self.channels.values():
            channel.maybe_save_cursor(force=True)
        if self.delayed is not None:
            self.delayed.close()
        self.log.close()

    def destroy(self) -> None:
        """Delete: close consumers and remove every file of the topic."""
        self.deleted = True
        for name in list(self.channels):
            self.delete_channel(name)
        if self.delayed is not None:
            self.delayed.close()
            self.delayed = None
        self.log.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

