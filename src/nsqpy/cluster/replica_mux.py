"""Every partition's replication link between two nodes over one connection.

A follower opens one connection to each leader it follows partitions of (``MuxPool``),
and each partition's link is a *stream* on it (``Stream``): the same bytes as a link of its
own (``nsqpy.cluster.replica.Link``, whose interface a stream has: magic, HELLO, frames),
so ``LeaderFeed`` and ``FollowerFetch`` run on either. What the connection adds is
liveness: each end sends a PING every ``heartbeat_interval``, and closes the connection,
every stream on it, after ``timeout`` without hearing anything. An idle stream sends
nothing at all; a PING the leader hears counts as hearing from every follower on the
connection (``Stream.on_ping``), however busy or idle its stream. So a thousand idle partitions between two
nodes cost a PING each way every two seconds, not two thousand heartbeats, and a node has
one socket per peer, not one per partition and peer.

The wire, after the TLS handshake when the cluster has one: the dialer sends
``MUX_MAGIC``, the listener answers ``MUX_MAGIC`` (a listener of an older version answers
a link's magic and an ERROR instead: the dialer then links partition by partition to that
address, ``FALLBACK_S`` before it tries again). Then chunks both ways, each a 9-byte header
(kind u8, stream u32, length u32, big-endian) and ``length`` bytes: DATA carries bytes of
one stream (a stream id above any the dialer used before opens a stream on the listener;
DATA for a stream already closed is dropped: its CLOSE is on the way), CLOSE ends a stream
(its id is not used again), PING has stream 0 and no bytes. A chunk over ``MAX_CHUNK``
bytes, an unknown kind, a PING or CLOSE with bytes, DATA on stream 0 or a stream beyond
``MAX_STREAMS`` open ones closes the connection with one log line (a peer is input too),
and so does a stream that breaks the replication protocol, or that holds more than
``MAX_LISTENER_BUFFER`` bytes unread on the listener (a leader is sent only small frames).
A follower's stream whose reader is stuck ``MAX_DIALER_BUFFER`` bytes behind is closed
alone. Refusals of streams (a HELLO for a partition not led here) are logged once per
``REPEAT_LOG_S`` per connection.
Imports asyncio, the codec and the cluster's TLS; never the broker or nsqd.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections import deque
from collections.abc import Callable, Sequence

from nsqpy.cluster.replica import FramedLink, LinkClosed
from nsqpy.cluster.tls import ClusterTls, dial
from nsqpy.errors import ProtocolError
from nsqpy.protocol.replication import (
    MAGIC,
    Buffer,
    MalformedFrame,
    ReplicationFrame,
    ReplicationProtocolError,
    ReplicationReader,
)

MUX_MAGIC = b"NQM1"
DATA, CLOSE, PING = 1, 2, 3
HEADER = struct.Struct(">BII")
MAX_CHUNK = 1 << 20  # a sender splits larger writes
MAX_STREAMS = 1 << 16  # open at once on one connection
# Bytes a stream may hold received and not yet read: on the listener (a leader, which is
# sent only small frames: HELLO, FETCH, ACK...) more is a broken peer, and closes the
# connection; on the dialer (a follower, sent APPENDs under the leader's window) a stream
# whose reader is stuck that far behind is closed, and dials again later.
MAX_LISTENER_BUFFER = 1 << 20
MAX_DIALER_BUFFER = 64 << 20
FALLBACK_S = 60.0  # an address that takes no multiplexed connection: links of their own
LINGER_S = 10.0  # a dialed connection with no stream left is closed after this long
REPEAT_LOG_S = 30.0  # the same kind of line about one connection, at most this often
_PING = HEADER.pack(PING, 0, 0)

Accept = Callable[["Stream"], None]


class Stream(FramedLink):
    """One partition's link on a ``MuxConn``; ``Link``'s interface (``recv``, ``next``,
    ``send``, ``send_soon``, ``congested``, ``drain``, ``refuse``, ``close``, ``abort``,
    ``peer``, ``magic_sent``)."""

    multiplexed = True

    def __init__(self, conn: MuxConn, sid: int) -> None:
        self.conn, self.sid = conn, sid
        self.decoder = ReplicationReader(expect_magic=True)
        self.leftover: deque[ReplicationFrame] = deque()
        self.magic_sent = False
        self.peer = conn.peer
        self.closed = False
        self.on_ping: Callable[[], None] | None = None  # the connection heard from the peer
        self.handler: Callable[[list[ReplicationFrame]], None] | None = None  # (``handle``)
        self.failure: Exception | None = None  # what the handler raised: ``recv`` raises it
        self._poked = False
        self._ready = asyncio.Event()

    def handle(self, handler: Callable[[list[ReplicationFrame]], None]) -> None:
        """From now on, the frames are handed to ``handler`` in the connection's read:
        every whole frame of the stream that read brought, at once, once the read's chunks
        are all taken apart (no task wakes for them: a leader answers a publish, a follower
        acknowledges it, a loop turn sooner; many APPENDs in one read are one flush and one
        ACK); the frames already received go first, here. What ``handler`` raises ends the
        stream's frames (``recv`` raises it; bytes after it are dropped). ``recv`` then only
        waits for the end, or a ``poke``."""
        frames = [*self.leftover, *self.decoder.frames()]
        self.leftover.clear()
        if frames:
            handler(frames)
        self.handler = handler

    def poke(self) -> None:
        """(with a ``handler``) The ``recv`` that waits returns, with no frame."""
        self._poked = True
        self._ready.set()

    def feed(self, data: Buffer) -> None:
        if self.handler is not None:
            if self.failure is None:  # (after one, nothing more is taken: dropped)
                self.decoder.feed(data)
                self.conn.fed[self.sid] = self  # (``take`` once the read is taken apart)
            return
        self.decoder.feed(data)
        self._ready.set()
        if self.decoder.buffered > self.conn.max_buffer:
            if self.conn.accept is not None:
                raise MalformedFrame(f"a replication stream holds over {self.conn.max_buffer} "
                                     "bytes unread")  # fmt: skip
            self.conn.log.warning("replication: a stream from %s fell %d bytes behind; "
                                  "closing it", self.peer, self.decoder.buffered)  # fmt: skip
            self.abort()

    def take(self) -> None:
        """(``handle``) Every whole frame received, to the handler; what it raises, kept
        for ``recv`` (the stream's failure, never the connection's)."""
        if self.handler is None or self.failure is not None:
            return
        try:
            frames = list(self.decoder.frames())
            if frames:
                self.handler(frames)
        except Exception as err:
            self.failure = err
            self._ready.set()

    def ended(self) -> None:
        """Closed by the peer (CLOSE) or with the connection."""
        self.closed = True
        self._ready.set()

    async def recv(self, timeout: float | None = None) -> list[ReplicationFrame]:
        """As ``Link.recv``: the frames buffered, at least one; LinkClosed once the stream
        or its connection ended, TimeoutError after ``timeout`` without a whole frame.
        With a ``handler``: LinkClosed, what the handler raised, or no frame after a
        ``poke``."""
        frames: list[ReplicationFrame] = []
        if self.handler is None:
            frames = [*self.leftover, *self.decoder.frames()]
            self.leftover.clear()
        while not frames:
            if self.failure is not None:
                raise self.failure
            if self.closed:
                raise LinkClosed(f"{self.peer} closed the replication stream")
            if self._poked:
                self._poked = False
                return frames
            self._ready.clear()
            async with asyncio.timeout(timeout):
                await self._ready.wait()
            if self.handler is None:
                frames = list(self.decoder.frames())
        return frames

    def send(self, bufs: Sequence[Buffer]) -> None:
        if not self.closed:
            self.conn.send_data(self.sid, bufs)

    def send_soon(self, bufs: Sequence[Buffer]) -> None:
        """As ``send``, at the end of this turn of the event loop, in one system call with
        the other streams' frames by then (``MuxConn._write_soon``)."""
        if not self.closed:
            self.conn.send_data(self.sid, bufs, soon=True)

    def congested(self) -> bool:
        """Whether bytes sent wait in the connection's transport."""
        return self.conn.writer.transport.get_write_buffer_size() > 0

    async def drain(self) -> None:
        if self.closed:
            raise LinkClosed(f"the replication stream with {self.peer} is closed")
        await self.conn.drain()

    async def refuse(self, err: ProtocolError | tuple[int, str, str]) -> None:
        """ERROR on this stream (after the magic when not yet sent), then CLOSE."""
        self.send([self.refusal(err)])
        self.abort()

    def abort(self) -> None:
        """End the stream from this side (the peer is sent CLOSE)."""
        if not self.closed:
            self.ended()
            self.conn.close_stream(self.sid)

    async def close(self) -> None:
        self.abort()


class MuxConn(asyncio.Protocol):
    """One connection carrying streams (see the module docstring). ``accept``: on the
    listener, called with each stream the dialer opens; None on the dialer. Made once the
    magic was exchanged on ``reader``/``writer``; from then on it is the transport's
    protocol (it reads; ``writer`` still writes), unless the connection had already
    ended then (``run`` raises LinkClosed at once)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        timeout: float,
        heartbeat_interval: float,
        logger: logging.Logger,
        accept: Accept | None = None,
    ) -> None:
        self.reader, self.writer = reader, writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.timeout, self.heartbeat_interval = timeout, heartbeat_interval
        self.log = logger
        self.accept = accept
        self.max_buffer = MAX_LISTENER_BUFFER if accept is not None else MAX_DIALER_BUFFER
        self.streams: dict[int, Stream] = {}
        self.highest = 0  # the last stream id used (dialer) or opened (listener)
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self.idle_since: float | None = self._loop.time()
        self._logged: dict[str, float] = {}  # what was logged of this connection, and when
        self.pinger: asyncio.Task[None] | None = None
        self._pending: list[Buffer] = []  # (``_write_soon``)
        self.fed: dict[int, Stream] = {}  # handled streams fed by the read being taken apart
        # Receiving: the connection's bytes come to ``data_received`` (this object is the
        # transport's protocol from here on: no task wakes per read, no copy through a
        # StreamReader); ``run`` waits for ``_ended``, which the first failure settles.
        self._buf = bytearray()  # the start of a chunk whose rest has not come yet
        self._ended: asyncio.Future[None] = self._loop.create_future()
        self._heard = self._loop.time()  # (the silence timer's reference)
        self._silence: asyncio.TimerHandle | None = None
        self._paused = False  # the transport's write buffer is over its high-water mark
        self._drainers: list[asyncio.Future[None]] = []
        # What the StreamReader holds past the magic (a PING may follow the listener's
        # magic at once), and whether the peer's end came with it: taken here, in order.
        early = bytes(getattr(reader, "_buffer", b""))
        ended = getattr(reader, "_eof", False) or reader.exception() is not None
        if not writer.transport.is_closing():
            writer.transport.set_protocol(self)
        if early:
            self.data_received(early)
        if ended or writer.transport.is_closing():
            self._end(LinkClosed(f"{self.peer} closed the replication connection"))

    # -- sending -------------------------------------------------------------------------

    def open_stream(self) -> Stream:
        """A new stream (dialer): its first DATA opens it on the listener."""
        self.highest += 1
        stream = self.streams[self.highest] = Stream(self, self.highest)
        self.idle_since = None
        return stream

    def send_data(self, sid: int, bufs: Sequence[Buffer], soon: bool = False) -> None:
        out: list[Buffer] = []
        for buf in bufs:
            view = memoryview(buf).cast("B")
            for start in range(0, len(view), MAX_CHUNK):
                piece = view[start : start + MAX_CHUNK]
                out += [HEADER.pack(DATA, sid, len(piece)), piece]
        if soon:
            self._write_soon(out)
        else:
            self._write(out)

    def close_stream(self, sid: int) -> None:
        if self.streams.pop(sid, None) is not None:
            self._write([HEADER.pack(CLOSE, sid, 0)])
            if not self.streams:
                self.idle_since = self._loop.time()

    def _write(self, out: list[Buffer]) -> None:
        """``out`` (after what ``_write_soon`` left waiting) to the transport; nothing once
        the connection is closed or its transport closing (its end reaches every stream
        through ``run``; uvloop's transport raises RuntimeError on a write to a closed
        transport)."""
        if self._pending:  # (what waits goes first: the order on the wire is kept)
            out, self._pending = self._pending + out, []
        if out and not self.closed and not self.writer.transport.is_closing():
            self.writer.writelines(out)

    def _write_soon(self, out: list[Buffer]) -> None:
        """Written at the end of this turn of the event loop, with whatever else is sent
        on the connection by then (sooner, before anything sent with ``_write``): the
        CURSORS of several partitions' FINs in one read go in one system call."""
        if not self._pending:
            self._loop.call_soon(self._write, [])
        self._pending += out

    async def drain(self) -> None:
        """Until the transport's write buffer is below its low-water mark (at once when
        it is); ConnectionResetError once the connection has ended (also while waiting)."""
        while True:
            if self._ended.done():
                raise ConnectionResetError(f"the replication connection with {self.peer} ended")
            if not self._paused:
                return
            waiter = self._loop.create_future()
            self._drainers.append(waiter)
            await waiter

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drainers()

    def _wake_drainers(self) -> None:
        drainers, self._drainers = self._drainers, []
        for waiter in drainers:
            if not waiter.done():
                waiter.set_result(None)

    def may_log(self, what: str) -> bool:
        """Whether a line about ``what`` on this connection may be logged now: once per
        ``REPEAT_LOG_S`` (a peer refused on a thousand streams is one line, not a thousand)."""
        now = self._loop.time()
        if now - self._logged.get(what, float("-inf")) < REPEAT_LOG_S:
            return False
        self._logged[what] = now
        return True

    # -- receiving -----------------------------------------------------------------------

    async def run(self) -> None:
        """Until the connection ends (LinkClosed, TimeoutError after ``timeout`` of
        silence, OSError, ReplicationProtocolError on garbage), raised here; PINGs
        meanwhile. Every stream ends with it. The chunks are taken apart as they are read
        (``data_received``)."""
        pinger = self.pinger = asyncio.create_task(self._ping())
        self._heard = self._loop.time()
        self._silence = self._loop.call_at(self._heard + self.timeout, self._silent)
        try:
            await self._ended
        finally:
            self._silence.cancel()
            pinger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pinger
            self.shutdown()

    # (the transport's protocol)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        pass  # (made before: the magic was read through a StreamReader)

    def data_received(self, data: bytes) -> None:
        if self._ended.done():
            return
        self._heard = self._loop.time()
        buf = self._buf
        try:
            if buf:  # (a chunk's start came before: the rest joins it)
                buf += data
                del buf[: self._chunks(buf)]
            else:  # (mostly: whole chunks, taken from ``data`` itself)
                buf += memoryview(data)[self._chunks(data) :]
        except Exception as err:  # (a broken peer: MalformedFrame, too many streams)
            self._end(err)

    def eof_received(self) -> bool:
        self._end(LinkClosed(f"{self.peer} closed the replication connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc or LinkClosed(f"the replication connection with {self.peer} closed"))

    def _end(self, err: BaseException) -> None:
        """The connection's end: ``run`` raises ``err`` (the first one)."""
        if not self._ended.done():
            self._ended.set_exception(err)
            self._ended.exception()  # (retrieved: a connection never run logs nothing)
            self._wake_drainers()  # (they raise: the transport may never call back)

    def _silent(self) -> None:
        """The silence timer: TimeoutError once nothing was heard for ``timeout``."""
        due = self._heard + self.timeout
        if self._loop.time() >= due:
            self._end(TimeoutError(f"nothing from {self.peer} for {self.timeout:g} s"))
        else:
            self._silence = self._loop.call_at(due, self._silent)

    def _chunks(self, buf: bytes | bytearray) -> int:
        """Hand over every whole chunk in ``buf``; how many bytes they took."""
        pos, size = 0, len(buf)
        while size - pos >= HEADER.size:
            kind, sid, length = HEADER.unpack_from(buf, pos)
            if kind not in (DATA, CLOSE, PING) or length > MAX_CHUNK:
                raise MalformedFrame(f"replication chunk of kind {kind}, {length} bytes")
            if (kind != DATA and length) or (kind == PING) == (sid != 0):
                raise MalformedFrame(f"replication chunk of kind {kind} on stream {sid}")
            start = pos + HEADER.size
            if size - start < length:
                break
            pos = start + length
            if kind == DATA:
                with memoryview(buf) as view, view[start:pos] as data:
                    self._data(sid, data)  # (copied by the stream's reader)
            elif kind == CLOSE:
                stream = self.streams.pop(sid, None)
                if stream is not None:
                    stream.ended()
                    if not self.streams:
                        self.idle_since = self._loop.time()
            else:
                self._pinged()
        fed, self.fed = self.fed, {}
        for stream in fed.values():
            stream.take()
        return pos

    def _pinged(self) -> None:
        """The peer's PING: every stream's ``on_ping`` (one that fails is closed alone)."""
        for stream in list(self.streams.values()):
            if stream.on_ping is None:
                continue
            try:
                stream.on_ping()
            except Exception:
                self.log.exception("replication: a PING on a stream from %s", self.peer)
                stream.abort()

    def _data(self, sid: int, data: memoryview) -> None:
        stream = self.streams.get(sid)
        if stream is None:
            if self.accept is None or sid <= self.highest:
                return  # closed here; the peer had not seen the CLOSE yet
            if len(self.streams) >= MAX_STREAMS:
                raise MalformedFrame(f"more than {MAX_STREAMS} replication streams")
            self.highest = sid
            stream = self.streams[sid] = Stream(self, sid)
            self.idle_since = None
            self.accept(stream)
        stream.feed(data)

    async def _ping(self) -> None:
        """A PING every ``heartbeat_interval``, whatever else goes: the listener takes each
        as hearing from the dialer on every stream, the busy ones and the idle alike."""
        while True:
            idle = self.idle_since
            if self.accept is None and idle is not None and self._loop.time() - idle >= LINGER_S:
                self.shutdown()  # (no stream for a while: run() ends)
                return
            self._write([_PING])
            await asyncio.sleep(self.heartbeat_interval)

    def shutdown(self) -> None:
        """Close the connection and every stream on it."""
        self.closed = True
        streams, self.streams = list(self.streams.values()), {}
        for stream in streams:
            stream.ended()
        self.writer.close()


async def answer_mux(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    accept: Accept,
    *,
    timeout: float,
    heartbeat_interval: float,
    logger: logging.Logger,
) -> MuxConn:
    """The listener's end, once the dialer's ``MUX_MAGIC`` was read: answer it and return
    the connection (the caller runs ``run()``)."""
    writer.write(MUX_MAGIC)
    return MuxConn(
        reader, writer, timeout=timeout, heartbeat_interval=heartbeat_interval,
        logger=logger, accept=accept,
    )  # fmt: skip


class MuxPool:
    """The dialer's connections, one per leader address (``open``)."""

    def __init__(
        self,
        tls: ClusterTls | None = None,
        *,
        timeout: float = 5.0,
        heartbeat_interval: float = 2.0,
        logger: logging.Logger | None = None,
    ) -> None:
        self.tls = tls
        self.timeout, self.heartbeat_interval = timeout, heartbeat_interval
        self.log = logger or logging.getLogger("nsqpy.cluster.replica")
        self.conns: dict[str, MuxConn] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._plain_until: dict[str, float] = {}  # addresses without multiplexing
        self._tasks: set[asyncio.Task[None]] = set()

    async def open(self, address: str) -> Stream | None:
        """A new stream to the leader at ``address`` (dialing it when there is no
        connection yet); None when that address takes no multiplexed connection (an
        older version: the caller links on its own). OSError or TimeoutError when it
        cannot be reached; the caller bounds the time."""
        loop = asyncio.get_running_loop()
        async with self._locks.setdefault(address, asyncio.Lock()):
            if self._plain_until.get(address, 0.0) > loop.time():
                return None  # (also when found out while this one waited for the lock)
            conn = self.conns.get(address)
            if conn is None or conn.closed or conn.writer.is_closing():
                conn = await self._dial(address)
                if conn is None:
                    return None
            return conn.open_stream()

    async def _dial(self, address: str) -> MuxConn | None:
        host, _, port = address.rpartition(":")
        reader, writer = await dial(host.strip("[]"), int(port), self.tls)
        try:
            writer.write(MUX_MAGIC)
            try:
                answer = await reader.readexactly(len(MUX_MAGIC))
            except asyncio.IncompleteReadError as err:
                answer = err.partial
        except BaseException:
            writer.close()
            raise
        if answer == MAGIC:  # (a link's magic: the ERROR of a version without streams)
            writer.close()
            self._plain_until[address] = asyncio.get_running_loop().time() + FALLBACK_S
            self.log.info("replication: %s links partition by partition (an older version)",
                          address)  # fmt: skip
            return None
        if answer != MUX_MAGIC:
            writer.close()
            if len(answer) < len(MUX_MAGIC):
                raise LinkClosed(f"{address} closed the replication connection")
            raise MalformedFrame(f"{address} answered {answer!r} to the replication magic")
        conn = MuxConn(
            reader, writer, timeout=self.timeout, heartbeat_interval=self.heartbeat_interval,
            logger=self.log,
        )  # fmt: skip
        self.conns[address] = conn
        task = asyncio.create_task(self._run(address, conn), name=f"replication to {address}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return conn

    async def _run(self, address: str, conn: MuxConn) -> None:
        try:
            await conn.run()
        except ReplicationProtocolError as err:
            self.log.warning("replication: %s broke the protocol (%s); closing", address, err)
        except (LinkClosed, OSError, TimeoutError) as err:
            self.log.debug("replication: connection to %s ended: %r", address, err)
        finally:
            if self.conns.get(address) is conn:
                del self.conns[address]

    async def close(self) -> None:
        for conn in list(self.conns.values()):
            conn.shutdown()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


__all__ = ["MUX_MAGIC", "MuxConn", "MuxPool", "Stream", "answer_mux"]
