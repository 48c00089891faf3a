"""The leader's end of replication: ``LeaderFeed`` serves follower links for every
partition this node leads (CLUSTER.md "Write path", issue 19).

Owns the per-link conversation (magic, HELLO checked against the cluster id, the log held,
leadership and epoch; EPOCH_QUERY answered from the epoch history; FETCH served by
streaming ``read_raw`` chunks as APPEND frames, pipelined under a window of un-acked bytes,
never the whole log in memory), the followers' ACKs per (topic, partition, node id), the
committed offset (``committed``: the minimum of the leader's own end and every ISR
follower's acked end; durable ends when the log's policy is ``always``), heartbeats on idle
links, the channels' cursors every ``cursor_interval`` when they changed, or at once when
asked (``cursors_now``; CURSORS, the owner's ``cursors`` lookup), what each follower has
taken of them (CURSORS_ACK: ``replicated_confirmed``, ``on_cursors_acked``), and the
report of silent followers (``lagging``). It does no polling: the owner calls
``notify(topic, partition)`` after each flush of a led log, and learns of a committed offset
that moved through ``on_progress``. Imports asyncio, the codec and the storage log; never the
broker or nsqd (the owner hands it lookups).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from nsqpy.cluster.replica import Link, LinkClosed
from nsqpy.errors import StorageError
from nsqpy.protocol.replication import (
    E_CLUSTER_MISMATCH,
    E_NOT_LEADER,
    E_NOT_REPLICA,
    E_STALE_EPOCH,
    HEARTBEAT_FRAME,
    MAGIC,
    Ack,
    ChannelCursor,
    CursorsAck,
    EpochQuery,
    ErrorFrame,
    Fetch,
    Heartbeat,
    Hello,
    MalformedFrame,
    ReplicationProtocolError,
    encode_append,
    encode_cursors,
    encode_epoch_end,
    encode_error,
    encode_hello,
)
from nsqpy.storage.log import PartitionLog

WINDOW = 4 << 20  # un-acked bytes in flight per follower
CHUNK = 1 << 20  # read_raw bytes per APPEND

LogLookup = Callable[[str, int], "PartitionLog | None"]
EpochLookup = Callable[[str, int], "int | None"]  # our leader_epoch, None: not the leader
IsrLookup = Callable[[str, int], Iterable[str]]
Progress = Callable[[str, int, int], None]  # topic, partition, committed offset
CursorLookup = Callable[[str, int], Sequence[ChannelCursor]]  # every channel's, now
UNACKED_CURSORS = 64  # CURSORS a link keeps waiting for their CURSORS_ACK (the newest)


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower of one partition (loop.time() seconds)."""

    node_id: str
    end: int = 0
    durable: int = 0
    last_heard: float = 0.0
    connected: bool = False
    unacked_since: float | None = None  # when the oldest un-acked APPEND went out


@dataclass(eq=False, slots=True)
class _Conn:
    link: Link
    topic: str
    partition: int
    node_id: str
    epoch: int
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    pos: int | None = None  # the next offset to send; None until FETCH
    max_bytes: int = CHUNK
    inflight: deque[tuple[int, int]] = field(default_factory=deque)  # (next offset, bytes)
    inflight_bytes: int = 0
    sent_committed: int = -1
    cursors_at: float = float("-inf")  # loop.time() of the last look at the cursors
    cursors_sent: tuple[ChannelCursor, ...] | None = None
    cursors_seq: int = 0  # the seq of the last CURSORS sent on this link
    cursors_unacked: dict[int, tuple[ChannelCursor, ...]] = field(default_factory=dict)
    cursors_taken: dict[str, int] | None = None  # channel -> confirmed, as last acked


@dataclass(slots=True)
class _Partition:
    since: float
    committed: int = 0
    followers: dict[str, FollowerState] = field(default_factory=dict)
    conns: dict[str, _Conn] = field(default_factory=dict)

    def poke(self) -> None:
        for conn in self.conns.values():
            conn.wake.set()


class _Refused(Exception):
    def __init__(self, epoch: int, code: str, text: str) -> None:
        super().__init__(f"{code}: {text}")
        self.frame = (epoch, code, text)


class LeaderFeed:
    """Serves followers of the partitions this node leads; see the module docstring.

    ``logs(topic, partition)``: the log held here or None; ``leader_epoch(topic,
    partition)``: our leader epoch when we lead it, else None; ``isr(topic, partition)``:
    the node ids of its ISR (this node's own id among them or not: it is skipped).
    """

    def __init__(
        self,
        node_id: str,
        cluster_id: str,
        logs: LogLookup,
        leader_epoch: EpochLookup,
        isr: IsrLookup,
        *,
        on_progress: Progress | None = None,
        cursors: CursorLookup | None = None,
        on_cursors_acked: Callable[[str, int], None] | None = None,
        cursor_interval: float = 1.0,
        window: int = WINDOW,
        chunk: int = CHUNK,
        heartbeat_interval: float = 1.0,
        timeout: float = 5.0,
        logger: logging.Logger | None = None,
    ) -> None:
        self.node_id, self.cluster_id = node_id, cluster_id
        self._logs, self._leader_epoch, self._isr = logs, leader_epoch, isr
        self.on_progress = on_progress
        self._cursors, self.cursor_interval = cursors, cursor_interval
        self.on_cursors_acked = on_cursors_acked
        self.window, self.chunk = window, chunk
        self.heartbeat_interval, self.timeout = heartbeat_interval, timeout
        self.log = logger or logging.getLogger("nsqpy.cluster.replica")
        self._parts: dict[tuple[str, int], _Partition] = {}
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    # -- owner's API ---------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen; returns the bound (host, port)."""
        self._server = await asyncio.start_server(self._serve, host, port)
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for part in self._parts.values():
            for conn in part.conns.values():
                conn.link.writer.close()
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=1.0)
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def notify(self, topic: str, partition: int) -> None:
        """The log of (topic, partition) was flushed (or synced): send what is new."""
        part = self._part(topic, partition)
        part.poke()
        self._advance(topic, partition, part)

    def replicated_confirmed(
        self, topic: str, partition: int, channel: str, followers: Iterable[str]
    ) -> int:
        """The confirmed offset of ``channel`` that every one of ``followers`` has taken
        (CURSORS_ACK); -1 when one has taken none of it (or is not connected)."""
        part = self._parts.get((topic, partition))
        low: int | None = None
        for node in followers:
            conn = part.conns.get(node) if part is not None else None
            taken = conn.cursors_taken if conn is not None else None
            confirmed = taken.get(channel, -1) if taken is not None else -1
            low = confirmed if low is None else min(low, confirmed)
        return -1 if low is None else low

    def cursors_now(self, topic: str) -> None:
        """An ordered channel of ``topic`` moved its cursor: its followers are sent the
        cursors at once, not at the next ``cursor_interval`` (coalesced: one CURSORS per
        link per turn of the send loop)."""
        for (name, _), part in self._parts.items():
            if name == topic:
                for conn in part.conns.values():
                    conn.cursors_at = float("-inf")
                    conn.wake.set()

    def set_committed(self, topic: str, partition: int, offset: int) -> None:
        """Seed (or raise) the committed offset, e.g. when taking over a partition."""
        part = self._part(topic, partition)
        if offset > part.committed:
            part.committed = offset
            part.poke()

    def begin_leading(self, topic: str, partition: int) -> None:
        """This node leads (topic, partition) in a new epoch: followers are given the
        ``timeout`` from now to connect before ``lagging`` names them (what it knew of
        them from an earlier leadership is stale)."""
        part = self._part(topic, partition)
        now = asyncio.get_running_loop().time()
        part.since = now
        part.followers = {n: f for n, f in part.followers.items() if f.connected}
        for f in part.followers.values():
            f.last_heard, f.unacked_since = now, None

    def committed_offset(self, topic: str, partition: int) -> int:
        """The committed offset as last advanced (never goes back)."""
        return self._part(topic, partition).committed

    def committed(self, topic: str, partition: int, isr: Iterable[str]) -> int:
        """min(our flushed end, or durable end when syncdisk is ``always``; every ISR
        follower's acked end, or durable end likewise); 0 for a follower never heard."""
        log = self._logs(topic, partition)
        part = self._part(topic, partition)
        if log is None:
            return part.committed
        durable = log.policy.always
        low = log.durable_offset if durable else log.flushed_offset
        for node in isr:
            if node == self.node_id:
                continue
            f = part.followers.get(node)
            low = min(low, 0 if f is None else f.durable if durable else f.end)
        return low

    def followers(self, topic: str, partition: int) -> dict[str, FollowerState]:
        return dict(self._part(topic, partition).followers)

    def lagging(self, topic: str, partition: int, isr: Iterable[str]) -> list[str]:
        """ISR followers silent, unconnected or with an APPEND un-acked for longer than
        ``timeout`` (the coordinator moves them to catch-up)."""
        now = asyncio.get_running_loop().time()
        part = self._part(topic, partition)
        late = []
        for node in isr:
            f = part.followers.get(node)
            if node == self.node_id:
                continue
            if f is None:
                stale = now - part.since > self.timeout
            elif f.unacked_since is not None and now - f.unacked_since > self.timeout:
                stale = True
            else:
                stale = now - f.last_heard > self.timeout
            if stale:
                late.append(node)
        return late

    def disconnect(self, topic: str, partition: int, node_id: str | None = None) -> int:
        """Close the links of (topic, partition) (of one follower); returns how many."""
        conns = list(self._part(topic, partition).conns.values())
        closed = 0
        for conn in conns:
            if node_id is None or conn.node_id == node_id:
                conn.link.writer.close()
                closed += 1
        return closed

    # -- internals -----------------------------------------------------------------

    def _part(self, topic: str, partition: int) -> _Partition:
        part = self._parts.get((topic, partition))
        if part is None:
            now = asyncio.get_running_loop().time()
            part = self._parts[(topic, partition)] = _Partition(since=now)
        return part

    def _advance(self, topic: str, partition: int, part: _Partition) -> None:
        new = self.committed(topic, partition, self._isr(topic, partition))
        if new > part.committed:
            part.committed = new
            part.poke()
            if self.on_progress is not None:
                self.on_progress(topic, partition, new)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        link = Link(reader, writer)
        try:
            await self._conversation(link)
        except ReplicationProtocolError as err:
            self.log.warning("replication: %s broke the protocol (%s); closing", link.peer, err)
            await link.refuse(err)
        except _Refused as err:
            self.log.info("replication: refused %s: %s", link.peer, err)
            await link.refuse(err.frame)
        except (LinkClosed, OSError, TimeoutError) as err:
            self.log.debug("replication: link from %s ended: %s", link.peer, err)
        except asyncio.CancelledError:
            pass  # close(): a server callback must not end cancelled (asyncio logs it)
        finally:
            await link.close()
            self._handlers.discard(task)

    async def _conversation(self, link: Link) -> None:
        hello = await link.next(self.timeout)
        if not isinstance(hello, Hello):
            raise MalformedFrame(f"expected HELLO first, got {type(hello).__name__}")
        epoch = self._check_hello(hello)
        link.send([MAGIC + encode_hello(self.node_id, self.cluster_id, *_tp(hello), epoch)])
        link.magic_sent = True
        conn = _Conn(link, hello.topic, hello.partition, hello.node_id, epoch)
        part = self._part(hello.topic, hello.partition)
        old = part.conns.get(hello.node_id)
        if old is not None:
            old.link.writer.close()  # a reconnect replaces the old link
        part.conns[hello.node_id] = conn
        f = part.followers.setdefault(hello.node_id, FollowerState(hello.node_id))
        # ``unacked_since`` survives the reconnect: a follower that drops its link and dials
        # again without ever acknowledging what it was sent (its disk is full, say) must
        # still become ``lagging``, not look fresh at every dial.
        f.connected = True
        f.last_heard = asyncio.get_running_loop().time()
        sender = asyncio.create_task(self._send_loop(conn, part))
        try:
            await self._receive_loop(conn, part, f, sender)
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
            if part.conns.get(conn.node_id) is conn:
                del part.conns[conn.node_id]
                f.connected = False

    def _check_hello(self, hello: Hello) -> int:
        if hello.cluster_id != self.cluster_id:
            text = f"cluster {hello.cluster_id!r}, this node is in {self.cluster_id!r}"
            raise _Refused(0, E_CLUSTER_MISMATCH, text)
        where = f"{hello.topic}/{hello.partition}"
        if self._logs(hello.topic, hello.partition) is None:
            raise _Refused(0, E_NOT_REPLICA, f"{where} is not held here")
        epoch = self._leader_epoch(hello.topic, hello.partition)
        if epoch is None:
            raise _Refused(0, E_NOT_LEADER, f"{where} is not led here")
        if hello.leader_epoch < epoch:
            text = f"{where}: epoch {hello.leader_epoch} is stale, the leader is in {epoch}"
            raise _Refused(epoch, E_STALE_EPOCH, text)
        if hello.leader_epoch > epoch:
            text = f"{where}: epoch {hello.leader_epoch} is newer than ours ({epoch})"
            raise _Refused(epoch, E_NOT_LEADER, text)
        return epoch

    async def _receive_loop(
        self, conn: _Conn, part: _Partition, f: FollowerState, sender: asyncio.Task[None]
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            recv = asyncio.ensure_future(conn.link.recv())
            try:
                done, _ = await asyncio.wait({recv, sender}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not recv.done():
                    recv.cancel()
            if recv not in done:  # the sender ended (leadership lost, write failed)
                sender.result()
                return
            f.last_heard = loop.time()
            for frame in recv.result():
                self._on_frame(conn, part, f, frame)

    def _on_frame(self, conn: _Conn, part: _Partition, f: FollowerState, frame: object) -> None:
        match frame:
            case Ack(epoch, end, durable):
                self._check_epoch(conn, epoch)
                advanced = end > f.end
                f.end, f.durable = end, durable
                while conn.inflight and conn.inflight[0][0] <= end:
                    conn.inflight_bytes -= conn.inflight.popleft()[1]
                if not conn.inflight:
                    f.unacked_since = None
                elif advanced:  # (an ACK of nothing new, as after each redial, is no progress)
                    f.unacked_since = f.last_heard
                conn.wake.set()
                self._advance(conn.topic, conn.partition, part)
            case Fetch(epoch, start, max_bytes):
                self._check_epoch(conn, epoch)
                log = self._logs(conn.topic, conn.partition)
                if log is not None and start > log.high_watermark:  # it would get nothing
                    text = f"FETCH from {start}, beyond this leader's end {log.high_watermark}"
                    raise _Refused(conn.epoch, E_NOT_REPLICA, text + ": catch up by epoch first")
                conn.pos, conn.max_bytes = start, max(1, min(max_bytes, self.chunk))
                conn.inflight.clear()
                conn.inflight_bytes = 0
                f.end, f.durable = start, min(f.durable, start)
                conn.wake.set()
            case EpochQuery(epoch):
                log = self._logs(conn.topic, conn.partition)
                if log is None:
                    raise _Refused(conn.epoch, E_NOT_REPLICA, "the log is gone")
                conn.link.send([encode_epoch_end(*log.end_offset_for_epoch(epoch))])
            case CursorsAck(epoch, seq):
                self._check_epoch(conn, epoch)
                taken = conn.cursors_unacked.pop(seq, None)
                for older in [s for s in conn.cursors_unacked if s < seq]:
                    del conn.cursors_unacked[older]
                if taken is not None:
                    conn.cursors_taken = {c.name: c.confirmed for c in taken}
                    if self.on_cursors_acked is not None:
                        self.on_cursors_acked(conn.topic, conn.partition)
            case Heartbeat():
                pass
            case ErrorFrame(epoch, code, text):
                raise LinkClosed(f"{conn.link.peer} sent ERROR {code} (epoch {epoch}): {text}")
            case _:
                raise MalformedFrame(f"unexpected {type(frame).__name__} from a follower")

    def _check_epoch(self, conn: _Conn, epoch: int) -> None:
        if epoch < conn.epoch:
            raise _Refused(conn.epoch, E_STALE_EPOCH, f"epoch {epoch} is below {conn.epoch}")

    async def _send_loop(self, conn: _Conn, part: _Partition) -> None:
        link = conn.link
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        while True:
            conn.wake.clear()
            if self._leader_epoch(conn.topic, conn.partition) != conn.epoch:
                text = f"{conn.topic}/{conn.partition} is no longer led here in {conn.epoch}"
                link.send([encode_error(conn.epoch, E_NOT_LEADER, text)])
                await link.drain()
                return
            log = self._logs(conn.topic, conn.partition)
            cursors = self._send_cursors(conn)
            if log is not None and self._send_some(conn, part, log):
                await link.drain()
                sent_at = loop.time()
                continue
            if cursors:
                await link.drain()
                sent_at = loop.time()
            # A heartbeat once nothing went for heartbeat_interval, however often the
            # owner wakes this loop with nothing new (a flush ticker's notify): the
            # follower's read times out after ``timeout`` of silence.
            due = sent_at + self.heartbeat_interval - loop.time()
            if due <= 0:
                link.send([HEARTBEAT_FRAME])
                await link.drain()
                sent_at, due = loop.time(), self.heartbeat_interval
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(due, self.cursor_interval)):
                    await conn.wake.wait()

    def _send_cursors(self, conn: _Conn) -> bool:
        """Every ``cursor_interval``, the channels' cursors when they changed (all of them:
        ``full``), after the records they cover (a cursor never passes the committed
        offset, which the follower has)."""
        if self._cursors is None or conn.pos is None:
            return False
        now = asyncio.get_running_loop().time()
        if now - conn.cursors_at < self.cursor_interval:
            return False
        conn.cursors_at = now
        cursors = tuple(self._cursors(conn.topic, conn.partition))
        if cursors == conn.cursors_sent:
            return False
        seq = conn.cursors_seq = conn.cursors_seq + 1
        frame = encode_cursors(conn.epoch, conn.topic, conn.partition, cursors, True, seq)
        conn.link.send([frame])
        conn.cursors_sent = cursors
        unacked = conn.cursors_unacked
        unacked[seq] = cursors
        if len(unacked) > UNACKED_CURSORS:
            del unacked[min(unacked)]
        return True

    def _send_some(self, conn: _Conn, part: _Partition, log: PartitionLog) -> bool:
        """APPENDs while the window allows; an empty one when only committed moved."""
        if conn.pos is None:
            return False
        pos, sent = max(conn.pos, log.low_watermark), False
        try:
            while conn.inflight_bytes < self.window and pos < log.flushed_offset:
                raw = log.read_raw(pos, conn.max_bytes)
                if not raw.count:  # no record up to the end: a gap (a reboot's jump)
                    end = log.flushed_offset
                    conn.link.send(encode_append(conn.epoch, end, part.committed, 0, b""))
                    pos, sent = end, True  # (an empty APPEND there: the follower jumps)
                    break
                size = len(raw.data)
                conn.link.send(
                    encode_append(conn.epoch, raw.offset, part.committed, raw.count, raw.data)
                )
                if not conn.inflight:
                    f = part.followers[conn.node_id]
                    f.unacked_since = f.unacked_since or asyncio.get_running_loop().time()
                conn.inflight.append((raw.next_offset, size))
                conn.inflight_bytes += size
                pos, sent = raw.next_offset, True
        except StorageError as err:
            raise _Refused(conn.epoch, E_NOT_REPLICA, f"reading the log failed: {err}") from err
        conn.pos = pos
        if not sent and part.committed != conn.sent_committed:
            conn.link.send(encode_append(conn.epoch, pos, part.committed, 0, b""))
            sent = True
        if sent:
            conn.sent_committed = part.committed
        return sent


def _tp(hello: Hello) -> tuple[str, int]:
    return hello.topic, hello.partition


__all__ = ["FollowerState", "LeaderFeed"]
