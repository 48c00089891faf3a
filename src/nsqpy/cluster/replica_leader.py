"""The leader's end of replication: ``LeaderFeed`` serves follower links for every
partition this node leads (CLUSTER.md "Write path").

An I/O shell over ``nsqpy.cluster.replica_state.ReplicaState``, which owns the rules: it
accepts the magic and a HELLO (checked against the cluster id here, the rest by the
partition's state), hands every follower frame to the state and sends what the state
answers (EPOCH_END) and what it has to send (APPENDs, pipelined under a window of
un-acked bytes, never the whole log in memory), heartbeats on idle links, and the
channels' cursors when the state says they are due (every ``cursor_interval`` when they
changed, or at once when asked: ``cursors_now``; CURSORS, the owner's ``cursors`` lookup);
what each follower has taken of them (CURSORS_ACK) is the state's too
(``replicated_confirmed``; the owner is told: ``on_cursors_acked``). It does no
polling: the owner calls ``notify(topic, partition)`` after each flush of a led log (the
state learns of it there and may commit), and the state tells its owner of a committed
offset that moved. Imports asyncio, the codec and the replica state; never the broker or
nsqd (the owner hands it ``states``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from nsqpy.cluster.replica import Link, LinkClosed
from nsqpy.cluster.replica_mux import MUX_MAGIC, MuxConn, Stream, answer_mux
from nsqpy.cluster.replica_state import CHUNK, WINDOW, FollowerLink, Peer, Refused, ReplicaState
from nsqpy.cluster.tls import ClusterTls, serve
from nsqpy.protocol.replication import (
    E_CLUSTER_MISMATCH,
    E_NOT_REPLICA,
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
    ReplicationFrame,
    ReplicationProtocolError,
    encode_hello,
)

# A committed offset that moved with no record to carry it may wait this long for one
# before it goes to the followers alone (``LeaderFeed._output_now``). None by default: a
# follower promoted by a failover shows readers only what it knew committed (until the
# rest of its new ISR acknowledges), so a commit it had not yet been told of would be
# unreadable there for that while; a linger saves a frame per publish only at low rates.
COMMIT_LINGER = 0.0
StateLookup = Callable[[str, int], "ReplicaState | None"]  # the partition's, when held here
CursorLookup = Callable[[str, int], Sequence[ChannelCursor]]  # every channel's, now
FollowerState = Peer  # (the name the owner and tests know)


@dataclass(eq=False, slots=True)
class _Conn:
    link: Link | Stream
    state: ReplicaState
    peer: FollowerLink
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    moving: bool = False  # the channels' cursors moved when last looked at
    commit_timer: asyncio.TimerHandle | None = None  # sends a committed offset that lingered

    @property
    def key(self) -> tuple[str, int]:
        return self.state.topic, self.state.partition


class LeaderFeed:
    """Serves followers of the partitions this node leads; see the module docstring.

    ``states(topic, partition)``: the partition's ``ReplicaState`` when held here, else
    None; ``clock``: the time the states read too (the event loop's by default).
    """

    def __init__(
        self,
        node_id: str,
        cluster_id: str,
        states: StateLookup,
        *,
        cursors: CursorLookup | None = None,
        on_cursors_acked: Callable[[str, int], None] | None = None,
        cursor_interval: float = 1.0,
        commit_linger: float = COMMIT_LINGER,
        heartbeat_interval: float = 2.0,
        timeout: float = 5.0,
        clock: Callable[[], float] | None = None,
        logger: logging.Logger | None = None,
        tls: ClusterTls | None = None,
    ) -> None:
        self.node_id, self.cluster_id = node_id, cluster_id
        self.tls = tls
        self._states = states
        self._cursors, self.cursor_interval = cursors, cursor_interval
        self.commit_linger = commit_linger
        self.on_cursors_acked = on_cursors_acked
        self.heartbeat_interval, self.timeout = heartbeat_interval, timeout
        self._clock = clock
        self.log = logger or logging.getLogger("nsqpy.cluster.replica")
        self._conns: dict[tuple[str, int], dict[str, _Conn]] = {}
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._muxes: set[MuxConn] = set()

    def clock(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    # -- owner's API ---------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen; returns the bound (host, port)."""
        self._server = await serve(self._serve, host, port, self.tls, "replication", self.log)
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conns in self._conns.values():
            for conn in conns.values():
                conn.link.abort()
        for mux in list(self._muxes):
            mux.shutdown()
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
        """The log of (topic, partition) was flushed (or synced): commit what that allows
        and send what is new (``_output_now``)."""
        state = self._states(topic, partition)
        if state is not None:
            state.local_progress()
        cursors = self._cursors_once((topic, partition))
        for conn in list(self._conns.get((topic, partition), {}).values()):
            self._output_now(conn, cursors=cursors)

    def _cursors_once(self, key: tuple[str, int]) -> Callable[[], Sequence[ChannelCursor]]:
        """The channels' cursors of partition ``key``, looked up at most once however many
        of its links ask in this call (each follower is sent the same)."""
        lookup = self._cursors
        memo: list[tuple[ChannelCursor, ...]] = []

        def once() -> Sequence[ChannelCursor]:
            if not memo:
                assert lookup is not None
                memo.append(tuple(lookup(*key)))
            return memo[0]

        return once

    def _output_now(
        self,
        conn: _Conn,
        linger: float | None = None,
        cursors: Callable[[], Sequence[ChannelCursor]] | None = None,
    ) -> None:
        """What the link's send loop would send on its next turn, sent in the caller's turn
        of the event loop (a flush of the log, a follower's ACK, a consumer's FIN on an
        ordered channel): no task wakes for it, and a publish is answered sooner. What is
        due of the log first (``leader_output``), so that no cursor reaches a follower
        before the records it covers, then the channels' cursors when due. The loop is
        woken only to drain a connection that holds unsent bytes, when the cursors started
        moving (it looks at them every ``cursor_interval`` then), or to meet a failure
        (leadership lost, a failed read: it ends the link), which is the link's, never the
        caller's. A committed offset that moved with no record to carry it lingers
        ``commit_linger`` for one (a publish every millisecond costs one frame, not two),
        then goes alone (``_linger``; ``linger``: 0 then). ``cursors``: the partition's,
        shared by the caller's links (``_cursors_once``)."""
        try:
            out = conn.state.leader_output(
                conn.peer, self.commit_linger if linger is None else linger
            )
            if out:
                conn.link.send(out)
            sent = self._send_cursors(conn, cursors)
        except Exception as err:  # (Refused, a failed read or write: the link's)
            self.log.debug("replication: sending to %s left to the link: %r", conn.link.peer, err)
            conn.wake.set()
            return
        if sent and not conn.moving:
            conn.moving = True
            conn.wake.set()
        elif conn.link.congested():
            conn.wake.set()
        self._linger(conn)

    def _linger(self, conn: _Conn) -> None:
        """A committed offset owed on the link goes when ``commit_linger`` is up."""
        due = conn.state.commit_due_in(conn.peer, self.commit_linger)
        if due is not None and conn.commit_timer is None:
            loop = asyncio.get_running_loop()
            conn.commit_timer = loop.call_later(due, self._commit_due, conn)

    def _commit_due(self, conn: _Conn) -> None:
        conn.commit_timer = None
        if conn.peer.open:  # (the timer's time is the linger's end, whatever the clock says)
            self._output_now(conn, linger=0.0)

    def _conns_of(self, conn: _Conn) -> list[_Conn]:
        """Every link of ``conn``'s partition (``conn`` among them)."""
        return list(self._conns.get(conn.key, {}).values())

    def replicated_confirmed(
        self, topic: str, partition: int, channel: str, followers: Iterable[str]
    ) -> int:
        """The confirmed offset of ``channel`` that every one of ``followers`` has taken
        (CURSORS_ACK); -1 when one has taken none of it (or is not connected)."""
        state = self._states(topic, partition)
        return -1 if state is None else state.replicated_confirmed(channel, followers)

    def cursors_now(self, topic: str, partition: int = -1) -> None:
        """An ordered channel of ``topic`` moved its cursor in ``partition`` (-1: in
        several): that partition's followers are sent the cursors at once, not at the next
        ``cursor_interval`` (``_output_now``; a CURSORS only when they changed). Only its
        links are touched: a FIN in one partition costs the others nothing."""
        if partition >= 0:
            found = self._conns.get((topic, partition))
            groups = [] if found is None else [found]
        else:
            groups = [conns for (name, _), conns in self._conns.items() if name == topic]
        for conns in groups:
            cursors = None
            for conn in conns.values():
                cursors = cursors or self._cursors_once(conn.key)
                ReplicaState.cursors_due(conn.peer)
                self._output_now(conn, cursors=cursors)

    def disconnect(self, topic: str, partition: int, node_id: str | None = None) -> int:
        """Close the links of (topic, partition) (of one follower); returns how many."""
        closed = 0
        for conn in list(self._conns.get((topic, partition), {}).values()):
            if node_id is None or conn.peer.node_id == node_id:
                conn.link.abort()
                closed += 1
        return closed

    # -- internals -----------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A connection: one partition's link, or (``MUX_MAGIC`` first) a connection
        carrying many (``nsqpy.cluster.replica_mux``)."""
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            try:
                async with asyncio.timeout(self.timeout):
                    first = await reader.readexactly(len(MAGIC))
            except (asyncio.IncompleteReadError, OSError, TimeoutError):
                writer.close()
                return
            if first == MUX_MAGIC:
                await self._serve_mux(reader, writer)
                return
            link = Link(reader, writer)
            link.decoder.feed(first)
            await self._serve_link(link)
        except asyncio.CancelledError:
            writer.close()  # close(): a server callback must not end cancelled (asyncio logs it)
        finally:
            self._handlers.discard(task)

    async def _serve_mux(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mux = await answer_mux(reader, writer, self._accept_stream, timeout=self.timeout,
                               heartbeat_interval=self.heartbeat_interval, logger=self.log)  # fmt: skip
        self._muxes.add(mux)
        try:
            await mux.run()
        except ReplicationProtocolError as err:
            self.log.warning("replication: %s broke the protocol (%s); closing", mux.peer, err)
        except (LinkClosed, OSError, TimeoutError) as err:
            self.log.debug("replication: connection from %s ended: %r", mux.peer, err)
        finally:
            self._muxes.discard(mux)
            mux.shutdown()

    def _accept_stream(self, stream: Stream) -> None:
        task = asyncio.create_task(self._serve_link(stream))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _serve_link(self, link: Link | Stream) -> None:
        try:
            await self._conversation(link)
        except ReplicationProtocolError as err:
            if not isinstance(link, Stream) or link.conn.may_log("broke"):
                self.log.warning("replication: %s broke the protocol (%s); closing",
                                 link.peer, err)  # fmt: skip
            await link.refuse(err)
            if isinstance(link, Stream):  # (a broken peer: every stream of it, one line)
                link.conn.shutdown()
        except Refused as err:
            if not isinstance(link, Stream) or link.conn.may_log("refused"):
                self.log.info("replication: refused %s: %s", link.peer, err)
            await link.refuse(err.frame)
        except (LinkClosed, OSError, TimeoutError) as err:
            self.log.debug("replication: link from %s ended: %s", link.peer, err)
        except asyncio.CancelledError:
            pass  # close(): a server callback must not end cancelled (asyncio logs it)
        finally:
            await link.close()

    async def _conversation(self, link: Link | Stream) -> None:
        hello = await link.next(self.timeout)
        if not isinstance(hello, Hello):
            raise MalformedFrame(f"expected HELLO first, got {type(hello).__name__}")
        if hello.cluster_id != self.cluster_id:
            text = f"cluster {hello.cluster_id!r}, this node is in {self.cluster_id!r}"
            raise Refused(0, E_CLUSTER_MISMATCH, text)
        state = self._states(hello.topic, hello.partition)
        if state is None:
            text = f"{hello.topic}/{hello.partition} is not held here"
            raise Refused(0, E_NOT_REPLICA, text)
        peer, replaced = state.accept(hello)
        link.send([MAGIC + encode_hello(self.node_id, self.cluster_id, *_tp(hello), peer.epoch)])
        link.magic_sent = True
        conn = _Conn(link, state, peer)
        conns = self._conns.setdefault(conn.key, {})
        old = conns.get(peer.node_id)
        if old is not None and replaced is not None:
            old.link.abort()  # a reconnect replaces the old link
        conns[peer.node_id] = conn
        if isinstance(link, Stream):  # (the connection's PINGs are this link's heartbeats)
            link.on_ping = lambda: self._pinged(conn)
        sender = asyncio.create_task(self._send_loop(conn))
        try:
            await self._receive_loop(conn, sender)
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
            if conn.commit_timer is not None:
                conn.commit_timer.cancel()
            state.closed(peer)
            if conns.get(peer.node_id) is conn:
                del conns[peer.node_id]
                if not conns:
                    self._conns.pop(conn.key, None)

    async def _receive_loop(self, conn: _Conn, sender: asyncio.Task[None]) -> None:
        """The follower's frames until the link ends, or the sender does (leadership lost,
        a write failed: its error is raised here). The sender's end cancels the read that
        waits (no task per read: an idle link's heartbeats cost little). A multiplexed
        link's frames are taken as its connection reads them (an ACK answers the publishes
        it commits in that read, not a loop turn later); the read here then only waits
        for the end."""
        me = asyncio.current_task()
        assert me is not None
        ended = False

        def sender_ended(_: object) -> None:
            nonlocal ended
            ended = True
            me.cancel()

        sender.add_done_callback(sender_ended)
        link = conn.link
        try:
            if isinstance(link, Stream):  # (the frames as they arrive: ``Stream.handle``)

                def take(frames: list[ReplicationFrame]) -> None:
                    last = len(frames) - 1
                    for i, frame in enumerate(frames):
                        if i < last and type(frame) is Ack and type(frames[i + 1]) is Ack:
                            continue  # (an ACK says all the ones before it did: one commit)
                        self._on_frame(conn, frame)

                link.handle(take)
            while True:
                for frame in await link.recv():
                    self._on_frame(conn, frame)
        except asyncio.CancelledError:
            if not ended or me.uncancel() > 0:  # (cancelled from outside too)
                raise
            sender.result()
        finally:
            sender.remove_done_callback(sender_ended)

    def _on_frame(self, conn: _Conn, frame: object) -> None:
        match frame:
            case CursorsAck():
                taken = conn.peer.cursors_taken
                conn.state.leader_frame(conn.peer, frame)
                if conn.peer.cursors_taken is not taken and self.on_cursors_acked is not None:
                    self.on_cursors_acked(*conn.key)
            case Ack() | Fetch() | EpochQuery() | Heartbeat():
                committed = conn.state.committed
                answer = conn.state.leader_frame(conn.peer, frame)
                if answer:
                    conn.link.send(answer)
                moved = conn.state.committed != committed
                if isinstance(frame, Ack):  # (sent at once: the follower's window opened,
                    cursors = self._cursors_once(conn.key)  # and every follower is told
                    for other in self._conns_of(conn) if moved else [conn]:  # the commit)
                        self._output_now(other, cursors=cursors)
                    return
                if moved:
                    for other in self._conns_of(conn):
                        other.wake.set()
                conn.wake.set()
            case ErrorFrame(epoch, code, text):
                raise LinkClosed(f"{conn.link.peer} sent ERROR {code} (epoch {epoch}): {text}")
            case _:
                raise MalformedFrame(f"unexpected {type(frame).__name__} from a follower")

    def _pinged(self, conn: _Conn) -> None:
        """A PING on a multiplexed link's connection: the follower was heard; and since
        an idle stream's send loop sleeps until woken, the channels' cursors are looked
        at here while they do not move (a consumer can move them with nothing published)."""
        try:
            conn.state.leader_frame(conn.peer, Heartbeat())
        except Refused:  # (no longer led here in the link's epoch: the send loop ends it)
            conn.wake.set()
            return
        if not conn.moving and self._send_cursors(conn):
            conn.moving = True
            conn.wake.set()

    async def _send_loop(self, conn: _Conn) -> None:
        link = conn.link
        # Whether the channels' cursors moved when last looked at (conn.moving): while
        # they do, they are looked at every cursor_interval; unchanged, only with the
        # heartbeat (an idle link wakes once per heartbeat_interval; a multiplexed one
        # not at all: its connection's PINGs do that, ``_pinged``).
        sent_at, conn.moving = self.clock(), self._cursors is not None
        while True:
            conn.wake.clear()
            try:
                out = conn.state.leader_output(conn.peer, self.commit_linger)
            except Refused as err:  # no longer led here in this epoch (or the log failed)
                await link.refuse(err.frame)
                return
            if out:
                link.send(out)  # (before the cursors: none goes ahead of what it covers)
            else:
                self._linger(conn)
            looked_at = conn.peer.cursors_at
            cursors = self._send_cursors(conn)
            if cursors or conn.peer.cursors_at != looked_at:
                conn.moving = cursors
            if out:
                await link.drain()
                sent_at = self.clock()
                continue
            if cursors or link.congested():  # (also what ``_output_now`` sent)
                await link.drain()
                sent_at = self.clock()
            wait: float | None
            if link.multiplexed:
                wait = self.cursor_interval if conn.moving else None
            else:
                # A heartbeat once nothing went for heartbeat_interval, however often the
                # owner wakes this loop with nothing new (a flush ticker's notify): the
                # follower's read times out after ``timeout`` of silence.
                due = sent_at + self.heartbeat_interval - self.clock()
                if due <= 0:
                    link.send([HEARTBEAT_FRAME])
                    await link.drain()
                    sent_at, due = self.clock(), self.heartbeat_interval
                wait = min(due, self.cursor_interval) if conn.moving else due
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await conn.wake.wait()

    def _send_cursors(
        self, conn: _Conn, cursors: Callable[[], Sequence[ChannelCursor]] | None = None
    ) -> bool:
        """The channels' cursors, when the state says they are due (``cursors_output``);
        ``cursors``: those of the partition, when the caller has them."""
        if self._cursors is None:
            return False
        if cursors is None:
            cursors = self._cursors_once(conn.key)
        frame = conn.state.cursors_output(conn.peer, cursors, self.cursor_interval)
        if frame is None:
            return False
        conn.link.send_soon([frame])  # (with other partitions' CURSORS of this turn)
        return True


def _tp(hello: Hello) -> tuple[str, int]:
    return hello.topic, hello.partition


__all__ = ["CHUNK", "WINDOW", "FollowerState", "LeaderFeed"]
