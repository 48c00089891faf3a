"""The nsqd daemon in-process: broker, TCP and HTTP listeners, group commit and timers.

``NsqdServer(opts)`` then ``await start()`` binds the listeners (port 0 picks a free
port; ``tcp_port``/``http_port`` tell which), loads metadata and starts the ticker.
Group commit: the first publish of a loop turn schedules ``_commit`` with
``call_soon``; it flushes every dirty partition log in one write each, releases the
acknowledgements that the flush (or, under ``always``, the fsync run in a worker
thread) covers, lets channels deliver, and writes every touched connection's output.
Acknowledgements wait per partition (offsets are per partition).
``await stop()`` stops accepting, answers every publish in flight (committed, or refused
as exiting when its commit cannot come: nothing acknowledged is uncommitted), flushes,
persists and closes, in bounded time: nothing is lost.

The top of nsqd: nothing in ``nsqpy`` imports this module but the programs (``nsqd.app``,
``cli``) and the test kit. Each module below is handed exactly what it uses: the TCP
connections a ``ConnectionContext`` (``nsqd.tcp``); the HTTP app, the lookupd client and the
Prometheus exporter this object itself, seen through the ``Protocol`` each of them owns
(``NsqdHttpView``, ``LookupHost``, ``NsqdView``); the statsd push its broker, options and
port. They read the public attributes below (``broker``, ``opts``, ``connections``,
``tcp_port``, ``http_port``, ``start_time``) and call ``publish_and_wait``, ``after_change``,
``lookupd_addresses_changed`` and ``apply_log_level``; what starts with ``_`` is this
module's own.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import resource
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nsqpy.broker.broker import Broker, Placement
from nsqpy.broker.health import cursor_key, fsync_key
from nsqpy.broker.partition import Partition
from nsqpy.broker.topic import Topic
from nsqpy.daemon import BackgroundTasks
from nsqpy.errors import NotLeader, NotWritable, ProtocolError
from nsqpy.flags import LOG_LEVELS
from nsqpy.flags.cluster import require_cluster_extra
from nsqpy.metrics.nsqd_metrics import NodeFigures
from nsqpy.metrics.statsd import StatsdEmitter
from nsqpy.nsqd.ack import Ack
from nsqpy.nsqd.auth import AuthClient
from nsqpy.nsqd.http import make_app
from nsqpy.nsqd.http_limits import runner_options
from nsqpy.nsqd.https import plain_http_app, start_https
from nsqpy.nsqd.looks import LookSchedule
from nsqpy.nsqd.lookup import LookupClient
from nsqpy.nsqd.tcp import ConnectionContext, V2Connection, failed_verb
from nsqpy.nsqd.tls import TlsSettings
from nsqpy.options import NsqdOptions, listen_address
from nsqpy.protocol.frames import OK_FRAME
from nsqpy.protocol.limits import Limits
from nsqpy.storage import Entry
from nsqpy.storage.budget import OPEN_FILES

if TYPE_CHECKING:
    from nsqpy.cluster.tls import ClusterTls
    from nsqpy.nsqd.cluster import NsqdCluster
    from nsqpy.storage import CursorFile, MemoryLog, PartitionLog

log = logging.getLogger("nsqpy.nsqd")

# Test only, never for use: a publish is answered once this node has it, not once every ISR
# member has it (``_release`` ignores ``ack_bound``). The Jepsen harness runs such a broken
# build to show that its checker sees what is lost (``nsqpy jepsen
# --unsafe-ack-before-replication``). Consumers still see only committed messages.
UNSAFE_ACK_ENV = "NSQPY_UNSAFE_ACK_BEFORE_REPLICATION"
UNSAFE_ACK = os.environ.get(UNSAFE_ACK_ENV) == "1"

# Stopping: how long publishes in flight may take to be committed (in a cluster, by the ISR)
# before they are refused as exiting, and how long an HTTP handler may run on after that
# before it is cancelled (aiohttp's default is 60 s).
STOP_GRACE = 2.0
# A stop still running after this long logs, once, where each of its tasks waits
# (``_report_slow_stop``): a stop that hangs says on what.
STOP_REPORT_AFTER = 10.0
HTTP_SHUTDOWN_TIMEOUT = 5.0


def set_storage_budget() -> int:
    """Half the process's open files limit for log segments and delayed stores (the rest
    for clients, sockets and short-lived files); returns that budget."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = soft if soft != resource.RLIM_INFINITY else 1 << 16
    budget = max(32, min(limit // 2, 1 << 16))
    OPEN_FILES.set_capacity(budget)
    return budget


class NsqdServer:
    """One nsqd: the broker plus its servers."""

    def __init__(self, opts: NsqdOptions, *, clock: Callable[[], int] = time.time_ns) -> None:
        self.opts = opts
        self.tls = TlsSettings.from_options(opts)  # ConfigError: nsqd must not start
        self.clock = clock  # ns; heartbeats, timeouts and output buffering all read it
        # Checked before the data path is touched: a bad address changes nothing.
        self.tcp_listen = listen_address("tcp-address", opts.tcp_address)
        self.http_listen = (
            listen_address("http-address", opts.http_address) if opts.http_address else None
        )
        set_storage_budget()
        self.broker = Broker(opts, clock=clock)
        self.limits = Limits(
            max_msg_size=opts.max_msg_size,
            max_body_size=opts.max_body_size,
            max_rdy_count=opts.max_rdy_count,
            max_req_timeout_ms=opts.max_req_timeout_ms,
            max_msg_timeout_ms=opts.max_msg_timeout_ms,
            msg_timeout_ms=opts.msg_timeout_ms,
            max_heartbeat_interval_ms=opts.max_heartbeat_interval_ms,
            max_output_buffer_size=opts.max_output_buffer_size,
            min_output_buffer_timeout_ms=opts.min_output_buffer_timeout_ms,
            max_output_buffer_timeout_ms=opts.max_output_buffer_timeout_ms,
            output_buffer_timeout_ms=opts.output_buffer_timeout_ms,
            max_deflate_level=opts.max_deflate_level,
            snappy=opts.snappy,
            deflate=opts.deflate,
            tls_available=self.tls.context is not None,
            auth_required=bool(opts.auth_http_addresses),
        )
        self.tls_required = self.tls.tcp_required
        self.auth = AuthClient(opts, self.tls.client_context) if opts.auth_http_addresses else None
        self._https_runner: web.AppRunner | None = None
        self.https_port = 0
        self.lookup: LookupClient | None = None
        self.connections: set[V2Connection] = set()
        # Connections with replies waiting for an acknowledgement (a publish's commit or
        # fsync): what a commit, an fsync or a failure looks at, not every connection
        # (thousands of consumers cost a commit nothing). One is let go once its replies
        # are all out (``_flush_connections``) or it closed.
        self._awaiting: set[V2Connection] = set()
        # When the ticker next calls each connection's ``heartbeat`` (``nsqd.looks``), and
        # the connections whose messages wait in a buffer for its timeout: what a tick
        # visits, never every connection
        self._looks: LookSchedule[V2Connection] = LookSchedule(
            max(1, opts.queue_scan_interval_ms) * 1_000_000
        )
        self._buffered: set[V2Connection] = set()
        self._touched: set[V2Connection] = set()
        self._acks: dict[Partition, deque[Ack]] = {}
        self._syncing: set[Partition] = set()
        # Partitions with flushed data not yet fsynced: the ticker checks only these (a
        # node with many thousands of idle topics does no work per topic per tick).
        self._unsynced: set[Partition] = set()
        self._cursor_writes: dict[CursorFile, asyncio.Future[bool]] = {}
        self._commit_scheduled = False
        self._flush_scheduled = False  # (cursors_replicated: one flush per loop turn)
        self._commit_handle: asyncio.Handle | None = None
        self._group = 0  # connections the last commit answered
        self._descriptors_short = False  # nearly out of descriptors (logged once)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tcp_server: asyncio.Server | None = None
        self._http_runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._background = BackgroundTasks(log, "nsqd")  # the TCP connections' tasks
        self._exiting = False  # stopping, past the grace: a publish is refused at once
        self.tcp_port = 0
        self.http_port = 0
        self.start_time = int(time.time())
        self.broker.on_topic_deleted.append(self._topic_deleted)
        self.broker.on_partition_released.append(self._partition_released)
        self.broker.on_stepped_down.append(self._stepped_down)
        self.broker.on_stepped_up.append(self._stepped_up)
        # With --etcd-endpoints: this node's part in a cluster (nsqd.cluster; imported only
        # then: the etcd client and gRPC cost a single node ~15 MB of memory for nothing).
        self.cluster: NsqdCluster | None = None
        if opts.etcd_endpoints:
            require_cluster_extra()
            from nsqpy.nsqd.cluster import NsqdCluster

            self.cluster = NsqdCluster(self)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if UNSAFE_ACK:
            log.warning(
                "%s=1: publishes are acknowledged BEFORE replication (test only)", UNSAFE_ACK_ENV
            )
        self.broker.load_metadata()
        ctx = ConnectionContext(
            broker=self.broker,
            opts=self.opts,
            limits=self.limits,
            clock=self.clock,
            loop=self._loop,
            tls=self.tls,
            auth=self.auth,
            connections=self.connections,
            awaiting=self._awaiting,
            looks=self._looks,
            buffered=self._buffered,
            touch=self.touch_connection,
            expect_ack=self.expect_ack,
            cluster=self.cluster,
            commit_now=self.commit_now,
            publish_now=self.publish_now,
            tasks=self._background,
        )
        where = self.tcp_listen
        if isinstance(where, str):
            self._tcp_server = await self._loop.create_unix_server(
                lambda: V2Connection(ctx), where, backlog=1024
            )
            self.tcp_port = -1  # as /info reports a unix socket listener
            log.info("TCP: listening on %s", where)
        else:
            self._tcp_server = await self._loop.create_server(
                lambda: V2Connection(ctx), where[0], where[1], reuse_address=True, backlog=1024
            )
            self.tcp_port = self._tcp_server.sockets[0].getsockname()[1]
            log.info("TCP: listening on %s:%d", where[0], self.tcp_port)
        if self.http_listen is not None:
            app = plain_http_app(make_app(self), self.tls, lambda: self.https_port)
            await self._start_http(app, self.http_listen)
        self._https_runner = await start_https(lambda: make_app(self), self.opts, self.tls)
        if self._https_runner is not None:
            self.https_port = int(self._https_runner.addresses[0][1])
        self._tasks.append(asyncio.create_task(self._ticker()))
        if self.cluster is not None:
            try:
                await self.cluster.start()
            except BaseException:  # (ConfigError: etcd unreachable, a data path of another)
                await self.stop()
                raise
        if self.opts.statsd_address:  # NSQ's statsd push (nsqpy.metrics.statsd)
            statsd = StatsdEmitter(self.broker, self.opts, self.http_port)
            self._tasks.append(asyncio.create_task(statsd.run()))
        if self.opts.lookupd_tcp_addresses:
            self.lookupd_addresses_changed()

    async def _start_http(self, app: web.Application, where: tuple[str, int] | str) -> None:
        self._http_runner = web.AppRunner(
            app, **runner_options(self.opts), shutdown_timeout=HTTP_SHUTDOWN_TIMEOUT
        )  # nsqd.http_limits
        await self._http_runner.setup()
        if isinstance(where, str):
            await web.UnixSite(self._http_runner, where).start()
            self.http_port = -1
            log.info("HTTP: listening on %s", where)
            return
        await web.TCPSite(self._http_runner, where[0], where[1], reuse_address=True).start()
        self.http_port = int(self._http_runner.addresses[0][1])
        log.info("HTTP: listening on %s:%d", where[0], self.http_port)

    def _remove_unix_sockets(self) -> None:
        """Unlink the socket files we listened on, as Go's unix listener does on close."""
        for where in (self.tcp_listen, self.http_listen):
            if isinstance(where, str):
                try:
                    os.unlink(where)
                except OSError:
                    pass

    async def stop(self) -> None:
        """Stop taking work, answer every publish in flight (``_answer_publishes``), leave
        the cluster (the lease goes, so the coordinator moves leadership at once), flush and
        persist everything, close connections. Bounded in time: nothing waits for what a
        stopping node cannot get (a commit from an ISR it no longer replicates to)."""
        log.info("nsqd stopping")
        report = asyncio.get_running_loop().call_later(STOP_REPORT_AFTER, _report_slow_stop)
        try:
            await self._stop()
        finally:
            report.cancel()
        log.info("nsqd stopped")

    async def _stop(self) -> None:
        if self._tcp_server is not None:
            self._tcp_server.close()
        await self._stop_intake()
        await self._answer_publishes()
        if self.cluster is not None:
            await self.cluster.forwarder.close()  # a forward in flight ends now, refused
        await self._background.close()  # (forwards, topic creations, upgrades waiting)
        self._flush_connections()  # (what the forwards and refusals answered)
        if self.cluster is not None:
            await self.cluster.stop()
        if self.lookup is not None:
            await self.lookup.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._tasks.clear()
        self._commit()
        while self._syncing:
            await asyncio.sleep(0.01)
        if self._cursor_writes:  # let the periodic writes land; close() saves the last state
            await asyncio.gather(*self._cursor_writes.values(), return_exceptions=True)
        self._refuse_waiting()
        for conn in list(self.connections):
            conn.release_replies()
            conn.flush(force=True)
            if conn.transport is not None:
                conn.transport.close()
        if self._http_runner is not None:
            await self._http_runner.cleanup()
        if self._https_runner is not None:
            await self._https_runner.cleanup()
        if self.auth is not None:
            await self.auth.close()
        self._remove_unix_sockets()
        self.broker.close()
        self._refuse_waiting()

    async def _stop_intake(self) -> None:
        """No new connections, requests or commands: the TCP connections run no more
        commands (their socket is not read), HTTP and HTTPS listeners close and their
        keep-alive connections close once their request in progress is answered."""
        for conn in list(self.connections):
            conn.hold()
        for runner in (self._http_runner, self._https_runner):
            if runner is None:
                continue
            for site in list(runner.sites):
                await site.stop()
            if runner.server is not None:
                runner.server.pre_shutdown()

    async def _answer_publishes(self) -> None:
        """Answer every publish in flight: commit what is appended, then give publishes
        waiting for their commit (in a cluster, for the ISR) and forwards waiting for
        their leader ``STOP_GRACE`` to be answered, then refuse those still waiting as
        exiting: a stopping node must not wait for a commit that its own stop prevents
        (replication ends with it), and must never answer OK for what is not committed.
        From here on a publish is refused at once (``_queue_ack``)."""
        self._commit()
        forwarder = self.cluster.forwarder if self.cluster is not None else None
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline and (
            self._syncing
            or any(self._acks.values())
            or (forwarder is not None and forwarder.in_flight)
        ):
            await asyncio.sleep(0.01)  # (commits, replication and forwards run meanwhile)
        self._exiting = True
        self._refuse_waiting()
        self._flush_connections()

    def _refuse_waiting(self) -> None:
        """Every publish still waiting for its commit is answered ``E_PUB_FAILED`` (or
        MPUB's, DPUB's) "exiting", over HTTP 503 ``EXITING``, as nsqd answers a publish
        while it exits. Stored or not, it was never acknowledged: the client publishes
        again (at least once)."""
        for acks in self._acks.values():
            while acks:
                ack = acks.popleft()
                ack.resolve(ack.failed(f"{failed_verb(ack.failed)} failed exiting"))
        self._acks.clear()
        self._touched.update(self._awaiting)

    # -- group commit ----------------------------------------------------------------

    def touch_connection(self, conn: V2Connection) -> None:
        self._touched.add(conn)
        self._schedule_commit()

    def _schedule_commit(self) -> None:
        if not self._commit_scheduled and self._loop is not None:
            self._commit_scheduled = True
            self._commit_handle = self._loop.call_soon(self._commit)

    def commit_now(self) -> None:
        """The end of one connection's input: while publishers are few (the last commit
        answered at most one connection) and acknowledgements wait for no fsync, commit now
        instead of at the end of the loop turn. A round trip is then one loop turn shorter;
        with many publishers at once, the commit stays grouped."""
        if self._commit_scheduled and self._group <= 1 and not self.opts.sync_always:
            assert self._commit_handle is not None
            self._commit_handle.cancel()
            self._commit()

    def publish_now(
        self, conn: V2Connection, topic: Topic, bodies: list[bytes], failed: type[ProtocolError]
    ) -> bool:
        """A connection's publish that was its whole input (``V2Connection._publish_lane``):
        appended and acknowledged as the ordinary path would, without its parsing and
        dispatching, and committed as ``commit_now`` commits at the end of a read: at once
        while publishers are few (the last commit answered at most one connection), else at
        the end of the loop turn, grouped, as under ``--sync-always``. NotWritable when the
        partition in turn cannot take it (a cluster's ISR too small), as the ordinary path
        answers. False, with nothing done, when the topic has settings (a depth bound,
        tracing) or is not led here: the ordinary path then runs and answers."""
        if topic.deleted or topic.name in self.broker.features.settings.topics:
            return False
        try:
            part = topic.partition_for()
        except NotLeader:  # (a cluster's topic led elsewhere meanwhile: forwarded)
            return False
        if not part.writable:  # (answered here: the ordinary path would take the next in turn)
            raise NotWritable()
        ack = self._queue_ack(part, self.broker.append_plain(topic, part, bodies), failed)
        conn.respond_after(ack, OK_FRAME)
        self._touched.add(conn)
        if self._group > 1 or self.opts.sync_always:
            self._schedule_commit()
            return True
        if self._commit_scheduled:  # (another touch this turn: committed now, as commit_now)
            assert self._commit_handle is not None
            self._commit_handle.cancel()
        self._commit()
        return True

    def expect_ack(
        self, partition: Partition, last_offset: int, failed: type[ProtocolError]
    ) -> Ack:
        ack = self._queue_ack(partition, last_offset, failed)
        self._schedule_commit()
        return ack

    def _queue_ack(
        self, partition: Partition, last_offset: int, failed: type[ProtocolError]
    ) -> Ack:
        """An acknowledgement for a publish up to ``last_offset`` of ``partition``, answered
        by the commit (``_release``) that writes it."""
        ack = Ack(last_offset, failed)
        if self._exiting:  # (stopping: its commit may never come)
            ack.resolve(failed(f"{failed_verb(failed)} failed exiting"))
            return ack
        self._acks.setdefault(partition, deque()).append(ack)
        return ack

    async def publish_and_wait(
        self,
        topic: Topic,
        bodies: list[bytes],
        deliver_at: int,
        failed: type[ProtocolError],
        *,
        entries: Sequence[Entry] = (),
        partition: int = -1,
        key: bytes = b"",
        source: str = "",
        trace_id: int = 0,
    ) -> Placement:
        """HTTP publishing: append (see ``Broker.append``: ``source`` and ``trace_id`` are
        for tracing), then wait for the commit that covers it. Refused (``failed``
        "exiting") once the server is stopping past its grace."""
        if self._exiting:
            raise failed(f"{failed_verb(failed)} failed exiting")
        placed = self.broker.append(
            topic, bodies, deliver_at, entries=entries, partition=partition, key=key,
            source=source, trace_id=trace_id,
        )  # fmt: skip
        ack = self.expect_ack(placed.partition, placed.last, failed)
        if ack.done:  # (answered at once: refused while stopping)
            if ack.error is not None:
                raise ack.error
            return placed
        assert self._loop is not None
        ack.callback = self._loop.create_future()
        await ack.callback
        return placed

    def _commit(self) -> None:
        self._commit_scheduled = False
        flushed, failed = self.broker.flush()
        for part, exc in failed.items():
            self._fail_topic(part, exc)
        now = self.broker.clock()
        for part in flushed:
            if self.opts.sync_always and not part.ephemeral:
                self._start_sync(part)  # acknowledged when the fsync covering it is done
                continue
            part.write_failing = False
            self._release(part, part.log.flushed_offset)
            if self.cluster is not None:
                self.cluster.flushed(part)
            if not part.ephemeral:
                self._unsynced.add(part)
                if part.log.sync_due(now):
                    self._start_sync(part)
        if flushed:
            self.broker.pump(flushed)
        self._flush_connections()

    def _flush_connections(self) -> None:
        touched, self._touched = self._touched, set()
        self._group = len(touched)
        for conn in touched:
            waiting = conn.release_replies()
            conn.flush()
            if waiting:  # still waiting for a commit (the ticker ran first): look again
                self._touched.add(conn)
            else:
                self._awaiting.discard(conn)

    def cursors_replicated(self, part: Partition) -> None:
        """(cluster) A follower took the channel cursors of a led partition: its ordered
        channels may deliver their next message (nothing else changed: no commit moved)."""
        if self.broker.pump_ordered(part) and not self._flush_scheduled and self._loop:
            self._flush_scheduled = True  # (once for every partition acked in this turn)
            self._loop.call_soon(self._flush_later)

    def _flush_later(self) -> None:
        self._flush_scheduled = False
        self._flush_connections()

    def replicated(self, part: Partition) -> None:
        """(cluster) The committed offset of a led partition moved: answer the publishes
        it covers, let its channels deliver up to it."""
        self._release(part, part.log.flushed_offset)
        self.broker.pump([part])
        self._touched.update(self._awaiting)
        self._flush_connections()

    def _release(self, part: Partition, limit: int) -> None:
        # (cluster: only what every ISR member has, and a majority of the replicas)
        bound = part.ack_bound if part.ack_bound is not None else part.commit_bound
        if bound is not None and bound < limit and not UNSAFE_ACK:
            limit = bound
        acks = self._acks.get(part)
        while acks and acks[0].offset < limit:
            ack = acks.popleft()
            ack.resolve()

    def _topic_deleted(self, topic: Topic) -> None:
        """Publishes the topic accepted before its deletion are answered (its log was closed)."""
        self._unsynced.difference_update(topic.partitions)
        for part in topic.partitions:
            acks = self._acks.pop(part, None)
            while acks:
                acks.popleft().resolve()

    def _partition_released(self, topic: Topic, part: Partition) -> None:
        """A partition this node no longer holds (cluster): publishes still waiting for it
        are refused (E_FAILED_ON_NOT_LEADER: the client publishes again to its leader)."""
        self._unsynced.discard(part)
        acks = self._acks.pop(part, None)
        while acks:
            acks.popleft().resolve(NotLeader())

    def _stepped_up(self, topic: Topic, part: Partition) -> None:
        """A partition followed here is led now (cluster): what it took as a follower and
        has not fsynced yet is synced on the log's schedule from here on, as if published
        here (the follower's own schedule ended with its link)."""
        del topic
        if not part.ephemeral:
            self._unsynced.add(part)

    def _stepped_down(self, topic: Topic, part: Partition) -> None:
        """A partition led here is followed now (cluster): publishes still waiting for the
        ISR are answered E_FAILED_ON_NOT_LEADER. They were never committed (the new
        leader's epoch does not have them: this log's tail is cut when it catches up); the
        client publishes again, to the leader."""
        del topic
        acks = self._acks.pop(part, None)
        if not acks:
            return
        log.info(
            "TOPIC(%s): partition %d: %d publishes not acknowledged (not the leader now)",
            part.name, part.number, len(acks),
        )  # fmt: skip
        while acks:
            acks.popleft().resolve(NotLeader())
        self._touched.update(self._awaiting)
        self._schedule_commit()

    def _fail_topic(self, part: Partition, exc: OSError) -> None:
        """A write or fsync of a partition failed: its waiting publishers get an error (and
        a cluster leader reports it cannot write the partition, ``Partition.write_failing``,
        so that another ISR member leads it)."""
        part.write_failing = True
        acks = self._acks.get(part)
        while acks:
            ack = acks.popleft()
            ack.resolve(ack.failed(f"{failed_verb(ack.failed)} failed {exc}"))
        self._touched.update(self._awaiting)

    def _start_sync(self, part: Partition) -> None:
        if part in self._syncing or self._loop is None:
            return
        self._syncing.add(part)
        log_: PartitionLog | MemoryLog = part.log
        fut = self._loop.run_in_executor(None, log_.sync)
        fut.add_done_callback(functools.partial(self._synced, part))

    def _synced(self, part: Partition, fut: asyncio.Future[int]) -> None:
        self._syncing.discard(part)
        exc = fut.exception()
        health = self.broker.health_state
        key = fsync_key(part.name, part.number)
        if exc is not None:
            health.failed(key, exc)  # retried: what it covers stays unsynced until then
            if self.opts.sync_always and isinstance(exc, OSError):
                self._fail_topic(part, exc)
            self._flush_connections()
            return
        if part.log.closed:  # (deleted or released meanwhile: its sync did nothing)
            self._flush_connections()
            return
        if health.error:
            health.ok(key)
        self._release(part, part.log.durable_offset)
        if self.cluster is not None:
            self.cluster.flushed(part)
        if self.opts.sync_always:  # channels read only what is durable: now they may
            self.broker.pump([part])
        self._touched.update(self._awaiting)
        self._flush_connections()
        # Data appended while this fsync ran needs another one (under the count or the time
        # bound, when due: a publish found this fsync running and did not start its own)
        if part.log.durable_offset < part.log.flushed_offset and (
            self.opts.sync_always or part.log.sync_due(self.broker.clock())
        ):
            self._start_sync(part)

    # -- timers ----------------------------------------------------------------------

    async def _ticker(self) -> None:
        interval = self.opts.queue_scan_interval_ms / 1000
        ticks = 0
        while True:
            await asyncio.sleep(interval)
            ticks += 1
            try:
                self._tick(ticks)
            except Exception:
                log.exception("ticker failed")

    def _tick(self, ticks: int) -> None:
        self.broker.scan()
        if self.broker.has_dirty():  # dead letters published by timeouts
            self._schedule_commit()
        self._save_cursors()
        now = self.clock()
        for conn in self._looks.due(now):  # (a heartbeat or a deadline may be due)
            try:
                conn.heartbeat(now)
            except Exception:  # (one connection's failure leaves the others to be looked at;
                # it is tried again in a second, a line of log each time)
                log.exception("[%s] heartbeat failed", conn.client.remote_address)
                self._looks.file(conn, now + 1_000_000_000)
        for conn in list(self._buffered):  # (flushed on this clock too: fake in tests)
            if conn.has_output:
                self._touched.add(conn)
            else:
                self._buffered.discard(conn)
        clock = self.broker.clock()
        for part in list(self._unsynced):
            log_ = part.log
            if log_.durable_offset >= log_.flushed_offset:
                self._unsynced.discard(part)
            elif log_.sync_due(clock):
                self._start_sync(part)
        self._save_metadata()
        self.broker.retry_saves(metadata=False)
        if ticks % 50 == 0:
            self.broker.housekeeping()
            self._check_descriptors()
        self._flush_connections()

    def _check_descriptors(self) -> None:
        """Say so (once, until it eases) when nearly every descriptor the process may open
        is in use: new connections are then accepted and closed at once by the event loop,
        and new files fail, with nothing else in the log."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            used = len(os.listdir("/proc/self/fd"))
        except OSError as exc:  # (listing them takes a descriptor too)
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                return
            used = soft
        full = soft != resource.RLIM_INFINITY and used >= soft * 0.9
        if full and not self._descriptors_short:
            log.error(
                "%d of the %d descriptors this process may open are in use: new connections "
                "are closed at once and new files fail (Too many open files); raise the limit "
                "(ulimit -n) or serve fewer clients",
                used, soft,
            )  # fmt: skip
        elif not full and self._descriptors_short:
            log.info("descriptors in use are below 90%% of the limit again (%d of %d)", used, soft)
        self._descriptors_short = full

    def _save_cursors(self) -> None:
        """Write due cursors in worker threads: snapshots taken here, fsyncs off the loop,
        one write in flight per channel."""
        if self._loop is None:
            return
        for cursor_file, snap in self.broker.due_cursor_saves(self._cursor_writes):
            fut = self._loop.run_in_executor(None, cursor_file.write, snap)
            self._cursor_writes[cursor_file] = fut
            fut.add_done_callback(functools.partial(self._cursor_written, cursor_file))

    def _save_metadata(self) -> None:
        """Write ``nsqd.dat`` when it is owed (topics or channels created, a failed save) in
        a worker thread: its fsyncs off the loop, one write in flight."""
        if self._loop is None:
            return
        write = self.broker.metadata_write()
        if write is None:
            return
        try:
            fut = self._loop.run_in_executor(None, write)
        except RuntimeError as exc:  # (the executor shut down: at stop)
            self.broker.metadata_written(exc)
            return
        fut.add_done_callback(  # (cancelled: not written, owed still)
            lambda f: self.broker.metadata_written(None if f.cancelled() else f.exception())
        )

    def _cursor_written(self, cursor_file: CursorFile, fut: asyncio.Future[bool]) -> None:
        """A cursor write ended: a failure turns the health NOK and leaves the cursor due,
        so the next periodic save writes it again; a success turns it OK again."""
        self._cursor_writes.pop(cursor_file, None)
        exc = None if fut.cancelled() else fut.exception()
        health = self.broker.health_state
        if exc is not None:
            cursor_file.note(1)
            health.failed(cursor_key(cursor_file.path), exc)
        elif health.error and not fut.cancelled():
            health.ok(cursor_key(cursor_file.path))

    # -- hooks for the HTTP API --------------------------------------------------------

    def after_change(self) -> None:
        """An HTTP action changed delivery state: write whatever connections now have."""
        for conn in self.connections:
            if conn.has_output or conn.closing:
                self._touched.add(conn)
        self._schedule_commit()

    def lookupd_addresses_changed(self) -> None:
        """PUT /config/nsqlookupd_tcp_addresses: reconnect to the new set of lookupds."""
        if self.lookup is None:
            self.lookup = LookupClient(self)
        found = self.cluster.lookupd_tcp_addresses if self.cluster is not None else []
        wanted = list(self.opts.lookupd_tcp_addresses)
        self.lookup.set_addresses(wanted + [a for a in found if a not in wanted])

    @property
    def cluster_tls(self) -> ClusterTls | None:
        return self.cluster.tls if self.cluster is not None else None

    def log_read_end(self, part: Partition) -> int | None:
        return self.cluster.committed_end(part) if self.cluster is not None else None

    def cluster_id(self) -> str:
        return self.opts.cluster_id if self.cluster is not None else ""

    def cluster_figures(self) -> NodeFigures | None:
        cluster = self.cluster
        if cluster is None:
            return None
        member, replication = cluster.member, cluster.replication
        return NodeFigures(
            live=member is not None and member.live,
            reports_written=member.reports_written if member is not None else 0,
            forwarded=cluster.forwarder.forwarded,
            forward_failures=cluster.forwarder.failed,
            lags=replication.follower_lags() if replication is not None else (),
            lease_left=member.lease_left() if member is not None else -1.0,
            etcd_latency=cluster.etcd.latency.snapshot() if cluster.etcd is not None else {},
        )

    def cluster_info(self) -> dict[str, object]:
        if self.cluster is None:
            return {}
        member = self.cluster.member
        return {
            "ha_support": True,
            "node_id": self.cluster.node_id,
            "cluster_id": self.opts.cluster_id,
            # publishes of partitions led elsewhere (``nsqd.forward``)
            "forwarded_messages": self.cluster.forwarder.forwarded,
            "forward_failures": self.cluster.forwarder.failed,
            # writes of this node's report to etcd (only when it changed: none at rest)
            "node_reports_written": member.reports_written if member is not None else 0,
        }

    def apply_log_level(self) -> None:
        logging.getLogger("nsqpy").setLevel(LOG_LEVELS.get(self.opts.log_level, logging.INFO))


def _report_slow_stop() -> None:
    """One warning: every task of the loop and where it waits (the innermost coroutine of
    its await chain outside asyncio: file, line, function)."""
    waits: list[str] = []
    for task in asyncio.all_tasks():
        frame: Any = None
        coro: Any = task.get_coro()
        while coro is not None:  # (down the chain of awaited coroutines, asyncio's aside)
            found = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if found is not None and "/asyncio/" not in found.f_code.co_filename:
                frame = found
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        where = "?"
        if frame is not None:
            code = frame.f_code
            where = f"{code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} {code.co_name}"
        waits.append(f"{task.get_name()} at {where}")
    log.warning(
        "nsqd still stopping after %.1fs; its tasks wait at: %s",
        STOP_REPORT_AFTER,
        "; ".join(sorted(waits)),
    )
