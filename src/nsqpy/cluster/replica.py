"""One partition's replication link over asyncio streams (CLUSTER.md "Write path").

Owns ``Link``, the framed stream both ends use (magic, frames in and out through the
sans-IO codec ``nsqpy.protocol.replication``, a whole group of frames handed out per read
so a follower can take many APPENDs with one flush). The two ends build on it:
``nsqpy.cluster.replica_leader.LeaderFeed`` (serves followers of the partitions this node
leads) and ``nsqpy.cluster.replica_follower.FollowerFetch`` (one followed partition).
Imports asyncio, nsqpy.errors and the codec; never the broker or nsqd.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

from nsqpy.errors import ProtocolError
from nsqpy.protocol.replication import (
    MAGIC,
    Buffer,
    ReplicationFrame,
    ReplicationReader,
    encode_error,
)

READ_SIZE = 1 << 20


class LinkClosed(ConnectionError):
    """The peer closed the link (EOF)."""


class FramedLink:
    """What every kind of link has over its ``recv``: ``next``, and the ERROR a refusal
    sends (``Link`` here, ``replica_mux.Stream`` on a shared connection)."""

    leftover: deque[ReplicationFrame]
    magic_sent: bool  # ours: a refusal sends it first when not yet

    async def recv(self, timeout: float | None = None) -> list[ReplicationFrame]:
        raise NotImplementedError

    async def next(self, timeout: float | None = None) -> ReplicationFrame:
        """One frame (the others received with it are kept for the next call)."""
        if not self.leftover:
            self.leftover.extend(await self.recv(timeout))
        return self.leftover.popleft()

    def refusal(self, err: ProtocolError | tuple[int, str, str]) -> bytes:
        """The ERROR for ``err``, after our magic when we have not sent it yet."""
        if isinstance(err, ProtocolError):
            frame = encode_error(0, err.code, err.description)
        else:
            frame = encode_error(*err)
        out = (b"" if self.magic_sent else MAGIC) + frame
        self.magic_sent = True
        return out


class Link(FramedLink):
    """Frames over one asyncio stream pair. ``recv`` waits for at least one frame and
    returns every frame already decodable (one read of up to ``READ_SIZE`` bytes)."""

    multiplexed = False  # (a ``replica_mux.Stream`` shares a connection: True)

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        expect_magic: bool = True,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = ReplicationReader(expect_magic=expect_magic)
        self.leftover: deque[ReplicationFrame] = deque()
        self.magic_sent = False  # ours: a refusal sends it first when not yet
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    async def recv(self, timeout: float | None = None) -> list[ReplicationFrame]:
        """The frames buffered, at least one; LinkClosed at EOF, TimeoutError after
        ``timeout`` seconds without a whole frame, ReplicationProtocolError on garbage."""
        frames = [*self.leftover, *self.decoder.frames()]
        self.leftover.clear()
        while not frames:
            async with asyncio.timeout(timeout):
                data = await self.reader.read(READ_SIZE)
            if not data:
                raise LinkClosed(f"{self.peer} closed the replication link")
            self.decoder.feed(data)
            frames = list(self.decoder.frames())
        return frames

    def send(self, bufs: Sequence[Buffer]) -> None:
        """LinkClosed once the transport is closing (uvloop's raises RuntimeError on a
        write then, asyncio's drops it: either way the link has ended)."""
        if self.writer.transport.is_closing():
            raise LinkClosed(f"the replication link with {self.peer} is closed")
        self.writer.writelines(bufs)

    send_soon = send  # (a link of its own has no other stream's frames to wait for)

    def poke(self) -> None:
        """Nothing: this link's frames come only through ``recv``, whose caller looks after
        each at what a poke would tell it (a ``Stream``'s wakes the ``recv`` that waits)."""

    def congested(self) -> bool:
        """Whether bytes sent wait in the transport (the socket took no more yet)."""
        return self.writer.transport.get_write_buffer_size() > 0

    async def drain(self) -> None:
        await self.writer.drain()

    async def refuse(self, err: ProtocolError | tuple[int, str, str]) -> None:
        """Send ERROR (after our magic when we have not sent it yet), then close."""
        try:
            if self.writer.transport.is_closing():
                raise ConnectionResetError
            self.writer.write(self.refusal(err))
            async with asyncio.timeout(1.0):
                await self.writer.drain()
        except (OSError, TimeoutError):
            pass
        await self.close()

    def abort(self) -> None:
        """Close at once, from synchronous code (the reading side then ends)."""
        self.writer.close()

    async def close(self) -> None:
        self.writer.close()
        try:
            async with asyncio.timeout(1.0):
                await self.writer.wait_closed()
        except (OSError, TimeoutError):
            pass


__all__ = ["FramedLink", "Link", "LinkClosed"]
