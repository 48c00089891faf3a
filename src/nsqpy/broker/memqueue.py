"""The memory queue of one channel of an ephemeral topic: NSQ's per-channel memoryMsgChan.

An ephemeral topic keeps nothing on disk, so each of its channels takes what reaches it
into its own bounded queue (at most ``--mem-queue-size`` messages; what does not fit is
dropped, the newest, by the channel) and the topic forgets it once every channel has
taken it. The queue holds log frames in offset order and answers ``read_frames`` like a
log, so the channel reads it exactly as it reads a topic log. Must not import asyncio or
any server.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Protocol

from nsqpy.storage import Frame


class FrameSource(Protocol):
    def read_frames(self, offset: int, max_count: int, max_bytes: int = ...) -> list[Frame]: ...


class MemoryQueue:
    """A channel's own copy of the frames it still has to deliver, in offset order."""

    def __init__(self) -> None:
        self._frames: deque[Frame] = deque()

    def __len__(self) -> int:
        return len(self._frames)

    def take(self, log: FrameSource, start: int, end: int) -> None:
        """Copy the frames of offsets [start, end) from the topic's log."""
        offset = start
        while offset < end:
            frames = log.read_frames(offset, end - offset, 1 << 62)
            if not frames:
                return
            self._frames.extend(frames)
            offset = frames[-1][0] + 1

    def read_frames(self, offset: int, max_count: int, max_bytes: int = 1 << 62) -> list[Frame]:
        """The frames from ``offset`` on (those below it are done with and let go)."""
        frames = self._frames
        while frames and frames[0][0] < offset:
            frames.popleft()
        del max_bytes  # the channel bounds what it asks for by count
        return list(islice(frames, max_count))

    def clear(self) -> None:
        self._frames.clear()
