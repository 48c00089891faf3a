"""The follower's end of replication: ``FollowerFetch`` keeps one followed partition's log
equal to its leader's (CLUSTER.md "Epochs and the commit log", "Write path").

An I/O shell over ``nsqpy.cluster.replica_state.ReplicaState``, which owns the rules: one
link's life is dial the leader's rpc address, HELLO, the catch-up loop (EPOCH_QUERY, the
state's ``on_epoch_end`` until the logs agree: a divergent tail is truncated), FETCH from
the log's end with its last epoch, then every APPEND handed to the state (all frames that
arrive together under one ``flush``; ``sync`` when the log's policy says so) and ACKed with
(end, durable). The state keeps the leader's committed offset: nothing above it may be
exposed (``readable_offset``). The leader's channel cursors (CURSORS) go to ``on_cursors``
once the records that came with them are flushed. A dropped link is redialled with capped
exponential backoff; ``E_STALE_EPOCH`` (and a cluster mismatch) parks it until the owner
gives a new (leader address, epoch) with ``set_leader``. Time comes from the injected
clocks. Imports asyncio, the codec and the replica state; never the broker or nsqd.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from nsqpy.cluster.replica import Link
from nsqpy.cluster.replica_mux import MuxPool, Stream
from nsqpy.cluster.replica_state import ReplicaState
from nsqpy.cluster.tls import ClusterTls, dial
from nsqpy.errors import StorageError
from nsqpy.protocol.replication import (
    E_CLUSTER_MISMATCH,
    E_STALE_EPOCH,
    HEARTBEAT_FRAME,
    MAGIC,
    MAX_BATCH_BYTES,
    Append,
    Cursors,
    EpochEnd,
    ErrorFrame,
    Heartbeat,
    Hello,
    MalformedFrame,
    ReplicationFrame,
    ReplicationProtocolError,
    encode_hello,
)

REPEAT_LOG = 30.0  # seconds before the same replication failure is logged again
SYNC_SLACK_S = 0.001  # past the log's time bound when waking for its fsync (it is due then)

Progress = Callable[[int, int, int], None]  # end, durable, committed
# the leader's channel cursors, after their records; False: not taken (a storage failure),
# so not acknowledged: the leader sends them again with its next CURSORS
CursorSink = Callable[[Cursors], bool | None]


class RemoteError(ConnectionError):
    """The leader answered ERROR."""

    def __init__(self, frame: ErrorFrame) -> None:
        super().__init__(f"leader refused: {frame.code} (epoch {frame.leader_epoch}) {frame.text}")
        self.frame = frame


class FollowerFetch:
    """Follows ``state``'s partition into its log; ``start()``, ``set_leader()``, ``stop()``.

    ``state``: "waiting" (no usable assignment: none yet, stale epoch, gave up),
    "connecting", "catching-up", "streaming", "stopped". ``sessions`` counts links that
    got past HELLO; ``leader_epoch_seen`` is the epoch an E_STALE_EPOCH named.
    """

    def __init__(
        self,
        state: ReplicaState,
        *,
        cluster_id: str,
        leader: str | None = None,
        leader_epoch: int = 0,
        on_progress: Progress | None = None,
        on_cursors: CursorSink | None = None,
        max_bytes: int = MAX_BATCH_BYTES,
        timeout: float = 5.0,
        backoff: float = 0.05,
        max_backoff: float = 2.0,
        max_attempts: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_ns: Callable[[], int] = time.time_ns,
        logger: logging.Logger | None = None,
        tls: ClusterTls | None = None,
        incarnation: str = "",
        pool: MuxPool | None = None,
    ) -> None:
        self.replica = state
        self.pool = pool  # one connection per leader for every partition followed
        self.tls = tls
        self.incarnation = incarnation  # this node's start, as its node key in etcd says
        self.plog = state.log
        self.node_id, self.cluster_id = state.node_id, cluster_id
        self.topic, self.partition = state.topic, state.partition
        self.clock, self.wall_ns = clock, wall_ns
        self.leader, self.leader_epoch = leader, leader_epoch
        self.on_progress = on_progress
        self.on_cursors = on_cursors
        self.max_bytes, self.timeout = max_bytes, timeout
        self.backoff, self.max_backoff, self.max_attempts = backoff, max_backoff, max_attempts
        self.logger = logger or logging.getLogger("nsqpy.cluster.replica")
        self.state = "waiting"
        self.sessions = 0
        # per kind of failure (a session's, an fsync's): what was logged last, and when
        self._last_failure: dict[str, tuple[str, float]] = {}
        self.leader_epoch_seen: int | None = None
        self._parked = leader is None
        self._changed = asyncio.Event()
        self._link: Link | Stream | None = None
        self._task: asyncio.Task[None] | None = None
        self._acked = (-1, -1)  # (end, durable) last acknowledged on the link
        self._sync_owed = False  # an fsync is due (``_take``), and its ACK after it
        self._timed = False  # ``_stream`` waits no longer than the log's time bound

    @property
    def committed_offset(self) -> int:
        """The leader's committed offset, as last told (the state's)."""
        return self.replica.committed

    @property
    def readable_offset(self) -> int:
        """What may be exposed here: below the leader's committed offset and flushed."""
        return self.replica.readable_offset

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"follow {self._where}")

    def set_leader(self, address: str, leader_epoch: int) -> None:
        """A new assignment: drop the current link and dial ``address`` in the epoch."""
        self.leader, self.leader_epoch = address, leader_epoch
        self._parked = False
        self._changed.set()
        if self._link is not None:
            self._link.abort()

    def halt(self) -> None:
        """Stop at once, from synchronous code (the owner is about to lead the partition:
        nothing may be appended from the old leader after this returns)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()  # it is suspended at an await: it appends nothing more, and
        if self._link is not None:  # the aborted stream is out of its connection before
            self._link.abort()  # the next read, which hands frames to ``_take``
        if self.plog.pending():
            self.plog.flush()
        if self.plog.durable_offset < self.plog.flushed_offset:
            # (fsynced in a worker thread, not left for a next session that may not come)
            asyncio.get_running_loop().run_in_executor(None, self._sync_quietly)
        self.state = "stopped"

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._link is not None:
            await self._link.close()
        if self.plog.pending():
            self.plog.flush()
        self.state = "stopped"

    @property
    def _where(self) -> str:
        return f"{self.topic}/{self.partition}"

    async def _run(self) -> None:
        attempt = 0
        while True:
            if self._parked or self.leader is None:
                self.state = "waiting"
                await self._changed.wait()
            self._changed.clear()
            before, had = self.sessions, self.plog.high_watermark
            try:
                await self._session(self.leader or "", self.leader_epoch)
            except RemoteError as err:
                code = err.frame.code
                if code in (E_STALE_EPOCH, E_CLUSTER_MISMATCH):
                    self.leader_epoch_seen = err.frame.leader_epoch or None
                    self._parked = True
                    self.logger.warning("replication of %s: %s; waiting", self._where, err)
                    await self._sync_left()
                    continue
                self._log_failure(f"replication of {self._where}: {err}")
            except (OSError, TimeoutError, ReplicationProtocolError, StorageError) as err:
                self._log_failure(f"replication of {self._where} from {self.leader}: {err!r}")
            await self._sync_left()
            # A session counts as progress only when the log grew in it: one that fails
            # at once every time (a full disk) backs off like a failed dial.
            progressed = self.sessions > before and self.plog.high_watermark > had
            attempt = 1 if progressed else attempt + 1
            if self.max_attempts is not None and attempt >= self.max_attempts:
                self.logger.warning("replication of %s: gave up after %d", self._where, attempt)
                self._parked = True
                continue
            delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._changed.wait()

    async def _sync_left(self) -> None:
        """(a session ended) What it took and has not fsynced is synced now, not left for
        the next session's time bound, which a lost leader may never bring."""
        if self.plog.durable_offset < self.plog.flushed_offset:
            await asyncio.to_thread(self._sync_quietly)

    def _sync_quietly(self) -> None:
        """(a worker thread) fsync the log; a failure is a line of log (tried again on
        the next session's schedule)."""
        try:
            self.plog.sync()
        except OSError as err:
            self._log_failure(f"replication of {self._where}: fsync failed: {err!r}", "fsync")

    def _log_failure(self, text: str, kind: str = "session") -> None:
        """One line per failure, but the same failure of a ``kind`` again only every
        ``REPEAT_LOG`` seconds (a full disk fails every retry for as long as it lasts, and
        the fsync after each failed session too)."""
        now = self.clock()
        last_text, last_at = self._last_failure.get(kind, ("", 0.0))
        if text != last_text or now - last_at >= REPEAT_LOG:
            self.logger.info("%s", text)
            self._last_failure[kind] = (text, now)

    async def _session(self, address: str, epoch: int) -> None:
        self.state = "connecting"
        host, _, port = address.rpartition(":")
        link: Link | Stream | None
        async with asyncio.timeout(self.timeout):
            link = await self.pool.open(address) if self.pool is not None else None
            if link is None:
                reader, writer = await dial(host.strip("[]"), int(port), self.tls)
                link = Link(reader, writer)
        self._link = link
        try:
            hello = encode_hello(
                self.node_id, self.cluster_id, self.topic, self.partition, epoch, self.incarnation
            )
            link.send([MAGIC + hello])
            link.magic_sent = True
            await self._expect_hello(link, epoch)
            self.sessions += 1
            self.state = "catching-up"
            await self._catch_up(link)
            link.send([self.replica.fetch_frame(epoch, self.max_bytes)])
            self.state = "streaming"
            await self._stream(link, epoch)
        finally:
            self._link = None
            if self.plog.pending():
                self.plog.flush()
            await link.close()

    async def _next(self, link: Link | Stream) -> ReplicationFrame:
        while True:
            frame = await link.next(self.timeout)
            if isinstance(frame, ErrorFrame):
                raise RemoteError(frame)
            if not isinstance(frame, Heartbeat):
                return frame

    async def _expect_hello(self, link: Link | Stream, epoch: int) -> None:
        frame = await self._next(link)
        if not isinstance(frame, Hello):
            raise MalformedFrame(f"expected HELLO, got {type(frame).__name__}")
        if (frame.topic, frame.partition, frame.leader_epoch) != (
            self.topic,
            self.partition,
            epoch,
        ):
            raise MalformedFrame(
                f"HELLO for {frame.topic}/{frame.partition} in epoch {frame.leader_epoch},"
                f" asked {self._where} in {epoch}"
            )

    async def _catch_up(self, link: Link | Stream) -> None:
        """EPOCH_QUERY and match_leader until the logs agree up to this log's end."""
        while True:
            asked, query = self.replica.epoch_query()
            link.send([query])
            frame = await self._next(link)
            if not isinstance(frame, EpochEnd):
                raise MalformedFrame(f"expected EPOCH_END, got {type(frame).__name__}")
            if self.replica.on_epoch_end(asked, frame):
                return

    async def _stream(self, link: Link | Stream, epoch: int) -> None:
        """Take the leader's frames (``_take``) until the link ends. A multiplexed link's
        frames are taken as its connection reads them (``Stream.handle``: an APPEND is
        acknowledged in the read that brought it, with no task woken); this coroutine then
        does only what waits: an fsync the log's policy says is due, by count or by time
        even when nothing more comes (in a thread, the ACK of the durable end after it),
        and a drain of a connection that holds unsent bytes."""
        self._acked, self._sync_owed, self._timed = (-1, -1), False, False
        # (a stream's liveness is its connection's: an idle one hears nothing at all)
        silence = None if link.multiplexed else self.timeout
        if isinstance(link, Stream):
            link.handle(lambda frames: self._take(link, epoch, frames))
        while True:
            # What was written waits for an fsync by the log's time bound even when the
            # leader sends nothing more (an idle stream hears nothing at all): the wait
            # ends then, and the fsync and its ACK follow.
            due = self.plog.sync_due_in(self.wall_ns())
            timed = due is not None and (silence is None or due < silence)
            self._timed = timed
            try:  # (a handled stream's recv: no frame, when poked)
                async with asyncio.timeout(
                    due + SYNC_SLACK_S if due is not None and timed else None
                ) as window:
                    frames = await link.recv(None if timed else silence)
            except TimeoutError:
                if not window.expired():  # (the link's silence, or what its reader raised)
                    raise
                frames = []
            if frames:
                self._take(link, epoch, frames)
            elif timed and self.plog.sync_due(self.wall_ns()):
                self._sync_owed = True
            if self._sync_owed:
                self._sync_owed = False
                await link.drain()
                await asyncio.to_thread(self.plog.sync)
                self._acked, _ = self._answer(link, epoch, self._acked, False)
                self._progress()
            await link.drain()

    def _take(self, link: Link | Stream, epoch: int, frames: list[ReplicationFrame]) -> None:
        """Frames of the leader that came together: every APPEND into the log under one
        flush, the CURSORS after the records they cover (``on_cursors``), then the ACK of
        the end, unless an fsync is due under the ``always`` policy (its ACK follows the
        fsync: ``_stream``). The link is poked when an fsync is due, when its connection
        holds unsent bytes, or when the log's time bound starts counting (``_stream``
        waits for it)."""
        log = self.plog
        heartbeat = False
        cursors: list[Cursors] = []
        for frame in frames:
            if isinstance(frame, Append):
                self.replica.take_append(frame, epoch)
            elif isinstance(frame, Heartbeat):
                heartbeat = True
            elif isinstance(frame, Cursors):
                cursors.append(frame)
            elif isinstance(frame, ErrorFrame):
                raise RemoteError(frame)
            else:
                raise MalformedFrame(f"unexpected {type(frame).__name__} from the leader")
        if log.pending():
            log.flush()
        if cursors:
            answers = [self.replica.cursors_ack(frame, epoch) for frame in cursors]
            took = self.on_cursors is None or self.on_cursors(cursors[-1]) is not False
            if took:  # (after the records they cover; with other partitions' of this turn)
                link.send_soon(answers[-1:])
        now = self.wall_ns()
        sync = log.sync_due(now)
        if not sync or not log.policy.always:
            # What is written is acknowledged before an fsync on the log's schedule:
            # the leader commits on ends (but under ``always``, where it waits for
            # what is durable), so a producer does not wait for this node's fsync
            self._acked, heartbeat = self._answer(link, epoch, self._acked, heartbeat)
        if sync or link.congested():
            self._sync_owed |= sync
            link.poke()
        elif not self._timed and log.sync_due_in(now) is not None:
            link.poke()  # (its wait takes the log's time bound from now on: ``_stream``)
        self._progress()

    def _progress(self) -> None:
        if self.on_progress is not None:
            log = self.plog
            self.on_progress(log.flushed_offset, log.durable_offset, self.committed_offset)

    def _answer(
        self, link: Link | Stream, epoch: int, acked: tuple[int, int], heartbeat: bool
    ) -> tuple[tuple[int, int], bool]:
        """An ACK when (end, durable) moved since ``acked``, else a HEARTBEAT when one is
        owed; returns what was acknowledged and whether a heartbeat is still owed."""
        now, ack = self.replica.ack_frame(epoch, self.plog.policy.always, acked)
        if ack:
            link.send([ack])
            return now, False
        if heartbeat:
            link.send([HEARTBEAT_FRAME])
        return acked, False


__all__ = ["FollowerFetch", "RemoteError"]
