"""The nsqd daemon in-process: broker, TCP and HTTP listeners, group commit and timers.

``NsqdServer(opts)`` then ``await start()`` binds the listeners (port 0 picks a free
port; ``tcp_port``/``http_port`` tell which), loads metadata and starts the ticker.
Group commit: the first publish of a loop turn schedules ``_commit`` with
``call_soon``; it flushes every dirty topic log in one write each, releases the
acknowledgements that the flush (or, under ``always``, the fsync run in a worker
thread) covers, lets channels deliver, and writes every touched connection's output.
``await stop()`` stops accepting, flushes, persists and closes: nothing is lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from nsqpy.broker.broker import Broker
from nsqpy.broker.topic import Topic
from nsqpy.errors import ProtocolError
from nsqpy.nsqd.tcp import V2Connection
from nsqpy.options import NsqdOptions
from nsqpy.protocol.limits import Limits

if TYPE_CHECKING:
    from nsqpy.nsqd.lookup import LookupClient
    from nsqpy.storage import MemoryLog, PartitionLog

log = logging.getLogger("nsqpy.nsqd")


class Ack:
    """A publisher waiting for its last offset to be written (and synced under ``always``)."""

    __slots__ = ("callback", "done", "error", "failed", "offset")

    def __init__(self, offset: int, failed: type[ProtocolError]) -> None:
        self.offset = offset
        self.done = False
        self.error: ProtocolError | None = None
        self.failed = failed
        self.callback: asyncio.Future[None] | None = None

    def resolve(self, error: ProtocolError | None = None) -> None:
        self.done = True
        self.error = error
        fut = self.callback
        if fut is not None and not fut.done():
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)


def split_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


class NsqdServer:
    """One nsqd: the broker plus its servers."""

    def __init__(self, opts: NsqdOptions, *, clock: Callable[[], int] = time.time_ns) -> None:
        self.opts = opts
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
            snappy=False,
            deflate=False,
            tls_available=False,
            auth_required=False,
        )
        self.tls_required = False
        self.lookup: LookupClient | None = None
        self.connections: set[V2Connection] = set()
        self._touched: set[V2Connection] = set()
        self._acks: dict[str, deque[Ack]] = {}
        self._syncing: set[str] = set()
        self._commit_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tcp_server: asyncio.Server | None = None
        self._http_runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.tcp_port = 0
        self.http_port = 0
        self.start_time = int(time.time())

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        from nsqpy.nsqd.http import make_app

        self._loop = asyncio.get_running_loop()
        self.broker.load_metadata()
        host, port = split_host_port(self.opts.tcp_address)
        self._tcp_server = await self._loop.create_server(
            lambda: V2Connection(self), host, port, reuse_address=True, backlog=1024
        )
        self.tcp_port = self._tcp_server.sockets[0].getsockname()[1]
        log.info("TCP: listening on %s:%d", host, self.tcp_port)
        if self.opts.http_address:
            host, port = split_host_port(self.opts.http_address)
            self._http_runner = web.AppRunner(make_app(self), access_log=None)
            await self._http_runner.setup()
            site = web.TCPSite(self._http_runner, host, port, reuse_address=True)
            await site.start()
            server = site._server
            assert server is not None
            self.http_port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            log.info("HTTP: listening on %s:%d", host, self.http_port)
        self._tasks.append(asyncio.create_task(self._ticker()))
        if self.opts.lookupd_tcp_addresses:
            self.lookupd_addresses_changed()

    async def stop(self) -> None:
        """Stop accepting, flush and persist everything, close connections."""
        if self._tcp_server is not None:
            self._tcp_server.close()
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
        for conn in list(self.connections):
            conn.flush()
            if conn.transport is not None:
                conn.transport.close()
        if self._http_runner is not None:
            await self._http_runner.cleanup()
        self.broker.close()
        for acks in self._acks.values():
            for ack in acks:
                ack.resolve()
        self._acks.clear()
        log.info("nsqd stopped")

    # -- group commit ----------------------------------------------------------------

    def touch_connection(self, conn: V2Connection) -> None:
        self._touched.add(conn)
        self._schedule_commit()

    def _schedule_commit(self) -> None:
        if not self._commit_scheduled and self._loop is not None:
            self._commit_scheduled = True
            self._loop.call_soon(self._commit)

    def expect_ack(self, topic: Topic, last_offset: int, failed: type[ProtocolError]) -> Ack:
        ack = Ack(last_offset, failed)
        self._acks.setdefault(topic.name, deque()).append(ack)
        self._schedule_commit()
        return ack

    async def publish_and_wait(
        self, topic: Topic, bodies: list[bytes], deliver_at: int, failed: type[ProtocolError]
    ) -> None:
        """HTTP publishing: append, then wait for the commit that covers it."""
        last = self.broker.publish(topic, bodies, deliver_at)
        ack = self.expect_ack(topic, last, failed)
        assert self._loop is not None
        ack.callback = self._loop.create_future()
        await ack.callback

    def _commit(self) -> None:
        self._commit_scheduled = False
        try:
            flushed = self.broker.flush()
        except OSError as exc:
            self._fail_all(exc)
            flushed = []
        now = self.broker.clock()
        for topic in flushed:
            if self.opts.sync_always and not topic.ephemeral:
                self._start_sync(topic)  # acknowledged when the fsync covering it is done
                continue
            self._release(topic, topic.log.flushed_offset)
            if not topic.ephemeral and topic.log.sync_due(now):
                self._start_sync(topic)
        if flushed:
            self.broker.pump(flushed)
        self._flush_connections()

    def _flush_connections(self) -> None:
        touched, self._touched = self._touched, set()
        for conn in touched:
            conn.release_replies()
            conn.flush()

    def _release(self, topic: Topic, limit: int) -> None:
        acks = self._acks.get(topic.name)
        while acks and acks[0].offset < limit:
            ack = acks.popleft()
            ack.resolve()

    def _fail_all(self, exc: OSError) -> None:
        for acks in self._acks.values():
            while acks:
                ack = acks.popleft()
                ack.resolve(ack.failed(f"{ack.failed.code[2:]} failed {exc}"))
        for conn in list(self.connections):
            self._touched.add(conn)

    def _start_sync(self, topic: Topic) -> None:
        if topic.name in self._syncing or self._loop is None:
            return
        self._syncing.add(topic.name)
        log_: PartitionLog | MemoryLog = topic.log
        fut = self._loop.run_in_executor(None, log_.sync)
        fut.add_done_callback(lambda f, t=topic: self._synced(t, f))

    def _synced(self, topic: Topic, fut: asyncio.Future[int]) -> None:
        self._syncing.discard(topic.name)
        exc = fut.exception()
        if exc is not None:
            self.broker.health_error = f"fsync of topic {topic.name} failed: {exc}"
            log.error("%s", self.broker.health_error)
            if isinstance(exc, OSError):
                self._fail_all(exc)
            self._flush_connections()
            return
        self._release(topic, topic.log.durable_offset)
        for conn in list(self.connections):
            if conn._replies:
                self._touched.add(conn)
        self._flush_connections()
        # Data appended while this fsync ran needs another one.
        if self.opts.sync_always and topic.log.durable_offset < topic.log.flushed_offset:
            self._start_sync(topic)

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
        now = time.monotonic_ns()
        for conn in list(self.connections):
            conn.heartbeat(now)
            if conn._out:
                self._touched.add(conn)
        clock = self.broker.clock()
        for topic in self.broker.topics.values():
            if not topic.ephemeral and topic.log.sync_due(clock):
                self._start_sync(topic)
        if ticks % 50 == 0:
            self.broker.housekeeping()
        self._flush_connections()

    # -- hooks for the HTTP API --------------------------------------------------------

    def after_change(self) -> None:
        """An HTTP action changed delivery state: write whatever connections now have."""
        for conn in self.connections:
            if conn._out or conn.closing:
                self._touched.add(conn)
        self._schedule_commit()

    def lookupd_addresses_changed(self) -> None:
        """PUT /config/nsqlookupd_tcp_addresses: reconnect to the new set of lookupds."""
        if self.lookup is None:
            from nsqpy.nsqd.lookup import LookupClient

            self.lookup = LookupClient(self)
        self.lookup.set_addresses(self.opts.lookupd_tcp_addresses)

    def apply_log_level(self) -> None:
        levels = {"debug": 10, "info": 20, "warn": 30, "error": 40, "fatal": 50}
        logging.getLogger("nsqpy").setLevel(levels.get(self.opts.log_level, 20))
