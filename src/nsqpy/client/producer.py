"""``Producer``: PUB, MPUB and DPUB to one or more nsqd, each awaiting nsqd's answer;
youzan's PUB_EXT (headers, a dispatch tag) and PUB_TRACE (a trace id) too.

Each publish goes to the next nsqd in round-robin order. A connection is opened on first
use and again after it drops; an address that cannot be reached is skipped for
``retry_interval`` seconds while others are available (when none is, every address is
tried once more before ``NoConnectionsError``). Replies are matched FIFO per connection,
so publishes may overlap freely. Errors from nsqd are raised as the ``nsqpy.errors`` class
of their code; a connection that drops with a publish outstanding raises
``ConnectionClosedError`` (the message may or may not have been stored, as in go-nsq).
Names and sizes are checked before sending, because any PUB error is fatal to the
connection and would fail the other publishes sharing it.

Uses ``conn``; must not import the consumer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

from nsqpy.client.conn import Connection, IdentifyOptions, split_address
from nsqpy.client.errors import ConnectionClosedError, NoConnectionsError
from nsqpy.errors import BadBody, BadMessage, BadTopic, ConfigError, InvalidError
from nsqpy.protocol.client_codec import encode_dpub, encode_mpub, encode_pub
from nsqpy.protocol.extend import (
    DISPATCH_TAG_KEY,
    decode_traced_reply,
    encode_pub_ext,
    encode_pub_trace,
)
from nsqpy.protocol.names import valid_topic_name

log = logging.getLogger("nsqpy.client")

CLOSE_GRACE = 2.0  # seconds ``close`` waits for a connection to close before aborting it


@dataclass(frozen=True)
class Published:
    """Where a traced publish went (youzan's traced reply): the message's ID as a number
    (its partition and offset), its trace id, its offset in its partition and the size of
    what was published in the queue (1 a message: the next offset is ``offset + size``)."""

    id: int
    trace_id: int
    offset: int
    size: int


class _Endpoint:
    __slots__ = ("address", "conn", "dead_until", "last_error", "lock")

    def __init__(self, address: str) -> None:
        split_address(address)  # validate early
        self.address = address
        self.conn: Connection | None = None
        self.dead_until = 0.0
        self.last_error: BaseException | None = None
        self.lock = asyncio.Lock()

    @property
    def up(self) -> bool:
        return self.conn is not None and self.conn.is_open


class Producer:
    """Publishes to nsqd over TCP.

    ``nsqd_tcp_addresses`` is one ``host:port`` or a list of them. Durations are seconds.
    Use as ``async with Producer("127.0.0.1:4150") as p: await p.pub("topic", b"hi")``.
    """

    def __init__(
        self,
        nsqd_tcp_addresses: str | Sequence[str],
        *,
        connect_timeout: float = 1.0,
        retry_interval: float = 1.0,
        identify: IdentifyOptions | None = None,
    ) -> None:
        if isinstance(nsqd_tcp_addresses, str):
            nsqd_tcp_addresses = [nsqd_tcp_addresses]
        if not nsqd_tcp_addresses:
            raise ConfigError("Producer needs at least one nsqd TCP address")
        self._endpoints = [_Endpoint(a) for a in nsqd_tcp_addresses]
        self.connect_timeout = connect_timeout
        self.retry_interval = retry_interval
        self.identify = identify or IdentifyOptions()
        self._next = 0
        self._closed = False

    # ---- public API ------------------------------------------------------------------------
    async def connect(self) -> None:
        """Connect to every address now (optional: publishing connects lazily).

        Raises ``NoConnectionsError`` if none could be reached.
        """
        results = await asyncio.gather(
            *(self._dial(ep) for ep in self._endpoints), return_exceptions=True
        )
        if not any(isinstance(r, Connection) for r in results):
            raise NoConnectionsError(self._failure_summary())

    async def pub(self, topic: str, body: bytes, *, partition: int = -1) -> None:
        """PUB one message; returns when nsqd answered OK. ``partition`` >= 0 names the
        partition (Youzan's ``PUB <topic> <partition>``; nsqd must lead it)."""
        _check_topic(topic)
        _check_body(body)
        _check_partition(partition)
        await self._send(encode_pub(topic, body, partition))

    async def mpub(self, topic: str, bodies: Sequence[bytes], *, partition: int = -1) -> None:
        """MPUB several messages atomically; returns when nsqd answered OK."""
        _check_topic(topic)
        _check_partition(partition)
        if not bodies:
            raise BadBody("MPUB needs at least one message")
        for body in bodies:
            _check_body(body)
        await self._send(encode_mpub(topic, bodies, partition))

    async def dpub(self, topic: str, delay: float, body: bytes) -> None:
        """DPUB: deliver the message after ``delay`` seconds (nsqd allows up to 1 h)."""
        _check_topic(topic)
        _check_body(body)
        if delay < 0:
            raise InvalidError(f"DPUB delay {delay} must be >= 0")
        await self._send(encode_dpub(topic, round(delay * 1000), body))

    async def pub_ext(
        self,
        topic: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        *,
        tag: str = "",
        partition: int = -1,
    ) -> Published | None:
        """youzan's PUB_EXT: one message with a JSON header of strings (``tag``: youzan's
        dispatch tag, only consumers that asked for it get the message). Returns where it
        went when nsqd answers with a traced reply (a ``##trace_id`` header asks for it),
        else None."""
        _check_topic(topic)
        _check_body(body)
        _check_partition(partition)
        doc = dict(headers or {})
        if tag:
            doc[DISPATCH_TAG_KEY] = tag
        try:
            data = encode_pub_ext(topic, doc, body, partition if partition >= 0 else None)
        except ValueError as exc:
            raise BadBody(str(exc)) from None
        reply = await self._send(data)
        return None if reply == b"OK" else Published(*decode_traced_reply(reply))

    async def pub_trace(
        self, topic: str, body: bytes, trace_id: int, *, partition: int = -1
    ) -> Published:
        """youzan's PUB_TRACE: one message with a trace id (a uint64); returns where it went."""
        _check_topic(topic)
        _check_body(body)
        _check_partition(partition)
        if not 0 <= trace_id < 1 << 64:
            raise InvalidError(f"trace id {trace_id} is not a uint64")
        data = encode_pub_trace(topic, trace_id, body, partition if partition >= 0 else None)
        return Published(*decode_traced_reply(await self._send(data)))

    @property
    def connections(self) -> list[Connection]:
        """The connections currently open."""
        return [ep.conn for ep in self._endpoints if ep.conn is not None and ep.up]

    async def close(self, grace: float = CLOSE_GRACE) -> None:
        """Close every connection; publishes still waiting fail with ConnectionClosedError.
        A connection not closed within ``grace`` seconds is aborted: over TLS a close waits
        for the peer's close_notify, which a peer that stopped reading never sends (0:
        abort at once)."""
        self._closed = True
        conns = [ep.conn for ep in self._endpoints if ep.conn is not None]
        for conn in conns:
            if grace > 0:
                conn.close()
            else:
                conn.abort()
        for conn in conns:
            try:
                async with asyncio.timeout(grace if grace > 0 else None):
                    await conn.wait_closed()
            except TimeoutError:
                conn.abort()
                await conn.wait_closed()

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ---- internals -------------------------------------------------------------------------
    async def command(self, data: bytes) -> bytes:
        """Send an already encoded publish of any form (PUB_EXT, MPUB_EXT, PUB_TRACE,
        MPUB_TRACE: ``nsqpy.protocol.extend``'s encoders) and return nsqd's response (``OK``,
        or a traced publish's reply); nsqd's error raises as for ``pub``. Checks nothing of
        ``data``."""
        return await self._send(data)

    async def _send(self, data: bytes) -> bytes:
        conn = await self._pick()
        await conn.drain()
        return await conn.command(data)

    async def _pick(self) -> Connection:
        if self._closed:
            raise ConnectionClosedError("producer is closed")
        n = len(self._endpoints)
        start = self._next
        self._next = (self._next + 1) % n
        order = [self._endpoints[(start + i) % n] for i in range(n)]
        now = time.monotonic()
        for ep in order:
            if ep.conn is not None and ep.up:
                return ep.conn
            if ep.dead_until <= now:
                conn = await self._try_dial(ep)
                if conn is not None:
                    return conn
        # Every address is waiting to be retried: try each once more rather than fail.
        for ep in order:
            conn = await self._try_dial(ep)
            if conn is not None:
                return conn
        raise NoConnectionsError(self._failure_summary())

    async def _try_dial(self, ep: _Endpoint) -> Connection | None:
        try:
            return await self._dial(ep)
        except Exception:  # recorded on the endpoint and logged by _dial
            return None

    async def _dial(self, ep: _Endpoint) -> Connection:
        async with ep.lock:
            if ep.conn is not None and ep.up:
                return ep.conn
            try:
                ep.conn = await Connection.connect(
                    ep.address, self.identify, timeout=self.connect_timeout
                )
            except BaseException as exc:
                ep.conn = None
                ep.last_error = exc
                ep.dead_until = time.monotonic() + self.retry_interval
                log.warning("cannot connect to nsqd %s: %r", ep.address, exc)
                raise
            ep.dead_until = 0.0
            ep.last_error = None
            return ep.conn

    def _failure_summary(self) -> str:
        parts = [f"{ep.address}: {ep.last_error!r}" for ep in self._endpoints]
        return "no nsqd reachable (" + "; ".join(parts) + ")"


def _check_topic(topic: str) -> None:
    if not valid_topic_name(topic):
        raise BadTopic(f"invalid topic name {topic!r}")


def _check_partition(partition: int) -> None:
    if partition < -1:
        raise InvalidError(f"partition {partition} must be -1 (any) or a partition number")


def _check_body(body: bytes) -> None:
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"message body must be bytes, not {type(body).__name__}")
    if len(body) == 0:
        raise BadMessage("message body must not be empty")
