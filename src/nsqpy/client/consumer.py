"""``Consumer``: subscribe to a topic/channel on many nsqd and run an async handler per message.

Connections come from ``nsqd_tcp_addresses`` (kept connected, retried every
``reconnect_interval``) and from lookupd ``/lookup`` polls (``lookup``: one lookupd per
round, first round at start, then after a random jitter every ``lookupd_poll_interval``;
after a discovered connection closes, at once and then every ``FAST_POLL`` seconds for up
to ``FAST_POLL_FOR`` until a node it finds subscribes: in a cluster that is the
partition's new leader, found within moments of its election rather than at the next
poll; new ``broadcast_address:tcp_port`` are connected, vanished ones are never dropped).
Each connection sends IDENTIFY then SUB: of every partition, or of ``partition`` only
(then lookupd is asked for that partition's leader only), ``ordered`` (SUB_ORDERED: one
message in flight per partition, the next after FIN), or from a ``start`` position
(SUB_ADVANCED ``type:value``: ``timestamp:S``, ``virtual_queue:N``/``msgcount:N``,
``special:-1`` for the newest end; applied by the channel's first consumer only). With
youzan's ``extend_support`` (``IdentifyOptions``) messages carry their JSON header and
trace id, and ``desired_tag`` asks for only the messages published with that tag.

RDY follows ``rdy.plan_rdy`` (SPEC 7.2), backoff follows ``backoff.Backoff`` (SPEC 7.3).
Each message runs ``handler(msg)`` in its own task: a normal return FINs, an exception REQs
with ``requeue_delay * attempts`` (capped) and signals backoff; the handler may also answer
itself with ``msg.finish()``/``msg.requeue()``. A message delivered more than
``max_attempts`` times goes to ``on_give_up(msg)`` and is FIN'd without the handler.
``close()`` sends CLS, lets running handlers finish, then closes.

Uses ``conn``, ``lookup``, ``rdy``, ``backoff``, ``message``; must not import the producer.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType

from nsqpy.client.backoff import Backoff
from nsqpy.client.conn import Connection, IdentifyOptions, split_address
from nsqpy.client.lookup import LookupdPoller
from nsqpy.client.message import Message, json_headers
from nsqpy.client.rdy import RdyMode, RdyTimeouts, changes, plan_rdy
from nsqpy.errors import BadChannel, BadTopic, ConfigError, ProtocolError
from nsqpy.errors import NsqError as _NsqError
from nsqpy.protocol.client_codec import encode_cls, encode_fin, encode_req, encode_touch
from nsqpy.protocol.extend import encode_sub_partition
from nsqpy.protocol.message import BINARY_ID, JSON_HEADER_EXT_VERSION
from nsqpy.protocol.message import Message as WireMessage
from nsqpy.protocol.names import valid_channel_name, valid_topic_name

log = logging.getLogger("nsqpy.client")

FAST_POLL = 0.5  # seconds between lookupd polls after a discovered node was lost ...
FAST_POLL_FOR = 30.0  # ... for at most this long, until a node it finds subscribes

Handler = Callable[[Message], Awaitable[None]]
GiveUpHook = Callable[[Message], Awaitable[None] | None]


@dataclass
class ConsumerStats:
    """Counters since start: messages received, FIN'd, REQ'd, given up."""

    received: int = 0
    finished: int = 0
    requeued: int = 0
    given_up: int = 0
    connections: int = 0


class _ConnResponder:
    """Routes a message's FIN/REQ/TOUCH to the connection it came from."""

    __slots__ = ("conn", "consumer")

    def __init__(self, consumer: Consumer, conn: Connection) -> None:
        self.consumer = consumer
        self.conn = conn

    def _finish(self, message: Message) -> None:
        self.consumer._answered(
            self.conn, encode_fin(message.id, binary=self.conn.extended), success=True
        )
        self.consumer.stats.finished += 1

    def _requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        if delay is None:
            delay = self.consumer.requeue_delay_for(message.attempts)
        data = encode_req(message.id, round(delay * 1000), binary=self.conn.extended)
        self.consumer._answered(self.conn, data, success=False if backoff else None)
        self.consumer.stats.requeued += 1

    def _touch(self, message: Message) -> None:
        self.conn.write(encode_touch(message.id, binary=self.conn.extended))


class Consumer:
    """Consumes ``topic``/``channel`` with ``handler``; durations are in seconds.

    ``async with Consumer("t", "c", handle, nsqd_tcp_addresses=["127.0.0.1:4150"]): ...``
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        handler: Handler,
        *,
        nsqd_tcp_addresses: Sequence[str] = (),
        lookupd_http_addresses: Sequence[str] = (),
        max_in_flight: int = 1,
        max_attempts: int = 5,
        on_give_up: GiveUpHook | None = None,
        requeue_delay: float = 90.0,
        max_requeue_delay: float = 900.0,
        backoff_multiplier: float = 1.0,
        max_backoff_duration: float = 120.0,
        auto_touch: bool = False,
        lookupd_poll_interval: float = 60.0,
        lookupd_poll_jitter: float = 0.3,
        reconnect_interval: float = 15.0,
        rdy_redistribute_interval: float = 5.0,
        low_rdy_idle_timeout: float = 10.0,
        low_rdy_timeout: float = 30.0,
        connect_timeout: float = 1.0,
        identify: IdentifyOptions | None = None,
        partition: int = -1,
        ordered: bool = False,
        start: str = "",
    ) -> None:
        if not valid_topic_name(topic):
            raise BadTopic(f"invalid topic name {topic!r}")
        if not valid_channel_name(channel):
            raise BadChannel(f"invalid channel name {channel!r}")
        if not nsqd_tcp_addresses and not lookupd_http_addresses:
            raise ConfigError("Consumer needs nsqd_tcp_addresses or lookupd_http_addresses")
        for address in nsqd_tcp_addresses:
            split_address(address)
        if max_in_flight < 0 or max_attempts < 0:
            raise ConfigError("max_in_flight and max_attempts must be >= 0")
        try:
            self._sub = encode_sub_partition(
                topic, channel, partition if partition >= 0 else None, ordered=ordered, start=start
            )
        except ValueError as exc:
            raise ConfigError(f"cannot subscribe: {exc}") from None
        self.partition = partition
        # youzan's detail comes in front of each body of an ordered or started subscription
        self._detail = ordered or bool(start)
        self.topic = topic
        self.channel = channel
        self.handler = handler
        self.nsqd_tcp_addresses = list(nsqd_tcp_addresses)
        self.lookupd_http_addresses = list(lookupd_http_addresses)
        self.max_attempts = max_attempts
        self.on_give_up = on_give_up
        self.requeue_delay = requeue_delay
        self.max_requeue_delay = max_requeue_delay
        self.auto_touch = auto_touch
        self.lookupd_poll_interval = lookupd_poll_interval
        self.lookupd_poll_jitter = lookupd_poll_jitter
        self.reconnect_interval = reconnect_interval
        self.rdy_redistribute_interval = rdy_redistribute_interval
        self.rdy_timeouts = RdyTimeouts(low_rdy_idle_timeout, low_rdy_timeout)
        self.connect_timeout = connect_timeout
        self.identify = identify or IdentifyOptions()
        self.stats = ConsumerStats()
        self._max_in_flight = max_in_flight
        self._backoff = Backoff(backoff_multiplier, max_backoff_duration)
        self._backoff_timer: asyncio.TimerHandle | None = None
        self._conns: dict[str, Connection] = {}
        self._responders: dict[Connection, _ConnResponder] = {}
        self._connecting: set[str] = set()
        self._poller: LookupdPoller | None = None
        self._poll_now = asyncio.Event()
        self._fast_until = 0.0  # monotonic: poll every FAST_POLL until then (a node lost)
        self._handlers: set[asyncio.Task[None]] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._started = False
        self._closing = False

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect to the nsqd addresses and run the first lookupd poll, then keep going.

        Addresses that fail now are retried in the background; start() does not raise
        for them.
        """
        if self._started:
            return
        self._started = True
        first = [self._try_connect(a) for a in self.nsqd_tcp_addresses]
        await asyncio.gather(*first)
        for address in self.nsqd_tcp_addresses:
            self._spawn(self._keep_connected(address))
        if self.lookupd_http_addresses:
            addresses = list(self.lookupd_http_addresses)
            self._poller = LookupdPoller(
                addresses,
                self.topic,
                timeout=max(self.connect_timeout, 5),
                auth_secret=self.identify.auth_secret,
                partition=self.partition,
            )
            await self._poll_once()
            self._spawn(self._poll_loop())
        self._spawn(self._redistribute_loop())

    async def close(self, timeout: float = 30.0) -> None:
        """Stop: CLS every connection, wait up to ``timeout`` for running handlers, close."""
        if self._closing:
            return
        self._closing = True
        background = list(self._background)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        if self._backoff_timer is not None:
            self._backoff_timer.cancel()
        conns = list(self._conns.values())
        if conns:
            acks = [c.command(encode_cls()) for c in conns]
            await asyncio.wait(acks, timeout=min(timeout, 5.0))
            for fut in acks:
                if fut.done() and not fut.cancelled():
                    fut.exception()  # retrieved: a closed connection needs no CLS
                else:
                    fut.cancel()
        if self._handlers:
            _, pending = await asyncio.wait(set(self._handlers), timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()
        if self._poller is not None:
            await self._poller.close()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ---- public state ----------------------------------------------------------------------
    @property
    def connections(self) -> list[Connection]:
        """The subscribed connections, in connection order."""
        return list(self._conns.values())

    @property
    def max_in_flight(self) -> int:
        return self._max_in_flight

    def set_max_in_flight(self, value: int) -> None:
        """Change the budget; 0 pauses the consumer (RDY 0 everywhere)."""
        if value < 0:
            raise ConfigError(f"max_in_flight {value} must be >= 0")
        self._max_in_flight = value
        self._update_rdy()

    @property
    def backoff_level(self) -> int:
        return self._backoff.level

    @property
    def rdy_mode(self) -> RdyMode:
        return RdyMode.PAUSED if self._closing else self._backoff.mode

    def requeue_delay_for(self, attempts: int) -> float:
        """The default REQ delay: ``requeue_delay * attempts`` capped at ``max_requeue_delay``."""
        return min(self.requeue_delay * max(1, attempts), self.max_requeue_delay)

    # ---- connections -----------------------------------------------------------------------
    async def connect_to_nsqd(self, address: str) -> Connection:
        """Open, IDENTIFY and SUB one nsqd; raises on failure (error codes as exceptions)."""
        split_address(address)
        if address in self._conns:
            return self._conns[address]
        if address in self._connecting:
            raise ConfigError(f"already connecting to {address}")
        self._connecting.add(address)
        try:
            conn = await Connection.connect(
                address,
                self.identify,
                timeout=self.connect_timeout,
                on_message=self._on_message,
                on_close=self._on_close,
                on_error=self._on_error,
            )
            try:
                async with asyncio.timeout(self.connect_timeout):
                    conn.detail = self._detail
                    await conn.command(self._sub)
            except BaseException:
                conn.close()
                raise
        finally:
            self._connecting.discard(address)
        if self._closing:
            conn.close()
            raise ConfigError("consumer is closing")
        self._conns[address] = conn
        self._responders[conn] = _ConnResponder(self, conn)
        self.stats.connections += 1
        log.info("consumer %s/%s connected to %s", self.topic, self.channel, address)
        self._update_rdy()
        return conn

    async def _try_connect(self, address: str) -> Connection | None:
        try:
            return await self.connect_to_nsqd(address)
        except (OSError, TimeoutError, _NsqError) as exc:
            log.warning("consumer cannot connect to nsqd %s: %r", address, exc)
            return None

    async def _keep_connected(self, address: str) -> None:
        while not self._closing:
            conn = self._conns.get(address)
            if conn is not None:
                await conn.wait_closed()
            await asyncio.sleep(self.reconnect_interval)
            if address not in self._conns and address not in self._connecting:
                await self._try_connect(address)

    def _on_close(self, conn: Connection) -> None:
        self._responders.pop(conn, None)
        if self._conns.get(conn.key) is not conn:
            return  # never subscribed (IDENTIFY/SUB failed): the caller already knows
        del self._conns[conn.key]
        if self._closing:
            return
        log.info("consumer lost nsqd %s", conn.key)
        self._update_rdy()
        if conn.key not in self.nsqd_tcp_addresses:
            self._fast_until = time.monotonic() + FAST_POLL_FOR
            self._poll_now.set()

    def _on_error(self, conn: Connection, err: ProtocolError) -> None:
        level = logging.ERROR if err.fatal else logging.WARNING
        log.log(level, "nsqd %s: %s", conn.key, err)

    # ---- discovery -------------------------------------------------------------------------
    async def _poll_once(self) -> None:
        assert self._poller is not None
        for address in await self._poller.poll():
            if address not in self._conns and address not in self._connecting:
                self._spawn(self._discovered(address))

    async def _discovered(self, address: str) -> None:
        if await self._try_connect(address) is not None:
            self._fast_until = 0.0  # (a node subscribed: the one that took over, say)

    async def _poll_loop(self) -> None:
        # The first wait is a random part of the interval (clients started together do not
        # poll together); every wait ends early when a discovered node is lost.
        wait = random.uniform(0, self.lookupd_poll_jitter * self.lookupd_poll_interval)
        while not self._closing:
            try:
                async with asyncio.timeout(wait):
                    await self._poll_now.wait()
            except TimeoutError:
                pass
            self._poll_now.clear()
            await self._poll_once()
            fast = time.monotonic() < self._fast_until
            wait = FAST_POLL if fast else self.lookupd_poll_interval

    # ---- messages --------------------------------------------------------------------------
    def _on_message(self, conn: Connection, wire: WireMessage) -> None:
        responder = self._responders.get(conn)
        if responder is None:
            return
        conn.in_flight += 1
        conn.last_message_at = time.monotonic()
        self.stats.received += 1
        msg = Message(
            wire.id,
            wire.body,
            wire.timestamp,
            wire.attempts,
            responder,
            headers=json_headers(wire.ext) if wire.ext_version == JSON_HEADER_EXT_VERSION else None,
            trace_id=BINARY_ID.unpack(wire.id)[1] if conn.extended else 0,
            queue_offset=wire.queue_offset,
        )
        if self._closing:
            msg.requeue(0, backoff=False)
        elif self.max_attempts and msg.attempts > self.max_attempts:
            self._track(self._give_up(msg))
        else:
            self._track(self._handle(msg, conn))

    async def _handle(self, msg: Message, conn: Connection) -> None:
        toucher = None
        if self.auto_touch:
            toucher = asyncio.create_task(self._touch_loop(msg, conn.msg_timeout / 2))
        try:
            await self.handler(msg)
        except asyncio.CancelledError:
            msg.requeue(0, backoff=False)
            raise
        except Exception:
            log.exception("handler failed for %r", msg)
            msg.requeue()
        else:
            msg.finish()
        finally:
            if toucher is not None:
                toucher.cancel()

    async def _touch_loop(self, msg: Message, interval: float) -> None:
        while not msg.has_responded:
            await asyncio.sleep(interval)
            msg.touch()

    async def _give_up(self, msg: Message) -> None:
        self.stats.given_up += 1
        try:
            if self.on_give_up is not None:
                result = self.on_give_up(msg)
                if inspect.isawaitable(result):
                    await result
            else:
                log.warning("giving up on %r after %d attempts", msg, msg.attempts)
        except Exception:
            log.exception("on_give_up failed for %r", msg)
        finally:
            msg.finish()

    def _answered(self, conn: Connection, data: bytes, *, success: bool | None) -> None:
        conn.write(data)
        if conn.in_flight > 0:
            conn.in_flight -= 1
        if success is None or self._closing:
            return
        before = self._backoff.mode
        block_for = self._backoff.signal(success)
        if block_for is not None:
            if self._backoff_timer is not None:
                self._backoff_timer.cancel()
            loop = asyncio.get_running_loop()
            self._backoff_timer = loop.call_later(block_for, self._backoff_expired)
        if self._backoff.mode is not before:
            self._update_rdy()

    def _backoff_expired(self) -> None:
        self._backoff_timer = None
        self._backoff.unblock()
        self._update_rdy()

    # ---- RDY -------------------------------------------------------------------------------
    def _update_rdy(self, *, rotate: bool = False) -> None:
        slots = list(self._conns.values())
        plan = plan_rdy(
            slots,
            self._max_in_flight,
            self.rdy_mode,
            time.monotonic(),
            rotate=rotate,
            timeouts=self.rdy_timeouts,
        )
        for key, count in changes(slots, plan):
            self._conns[key].send_rdy(count)

    async def _redistribute_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.rdy_redistribute_interval)
            low = len(self._conns) > self._max_in_flight
            testing = self._backoff.mode is RdyMode.TESTING and len(self._conns) > 1
            if low or testing:
                self._update_rdy(rotate=True)

    # ---- tasks -----------------------------------------------------------------------------
    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _track(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
