"""One protocol V2 connection to an nsqd: handshake, frame dispatch, FIFO replies, heartbeats.

``Connection.connect(address, options)`` opens TCP, sends the magic and IDENTIFY (always
with ``feature_negotiation``) and reads the reply; after that every response or error frame
answers the oldest command still waiting (PUB/MPUB/DPUB/SUB/CLS, FIFO as go-nsq and pynsq
match them), except ``_heartbeat_`` (answered with NOP here) and the non-fatal
E_FIN_FAILED/E_REQ_FAILED/E_TOUCH_FAILED, which answer no waiting command and go to
``on_error``. Message frames go to ``on_message``. Commands written in one loop turn leave
in one ``writelines``. The byte stream enters through ``data_received`` only: after the
IDENTIFY reply ``secure.negotiate`` upgrades it through the ``secure.Upgradable`` methods
here (``start_tls``, then a snappy/deflate codec in front of the frame decoder) and sends
AUTH when nsqd asks for it.

Owns sockets (asyncio); uses ``nsqpy.protocol`` for every byte it sends or parses. Must not
import the consumer or producer.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from nsqpy import __version__
from nsqpy.client.errors import ConnectionClosedError, UnexpectedResponseError
from nsqpy.client.secure import negotiate
from nsqpy.errors import ConfigError, ProtocolError, from_wire
from nsqpy.protocol.client_codec import encode_identify, encode_magic, encode_nop, encode_rdy
from nsqpy.protocol.compress import CorruptStream, StreamDecoder, StreamEncoder
from nsqpy.protocol.frames import (
    FRAME_MESSAGE,
    FRAME_RESPONSE,
    HEARTBEAT,
    BadFrame,
    FrameDecoder,
)
from nsqpy.protocol.identify import MAX_TAG_LENGTH, parse_identify_response
from nsqpy.protocol.message import Message as WireMessage
from nsqpy.protocol.message import decode_message

log = logging.getLogger("nsqpy.client")

# Non-fatal errors that answer commands nsqd never answers otherwise (FIN, REQ, TOUCH): no
# waiting command is theirs. Any other non-fatal error is the answer to the oldest one.
_UNANSWERED = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})

NOP = encode_nop()


def _default_hostname() -> str:
    return socket.gethostname()


@dataclass(frozen=True)
class IdentifyOptions:
    """What the client says about itself in IDENTIFY (durations in seconds).

    ``msg_timeout`` None leaves nsqd's ``--msg-timeout``; ``heartbeat_interval`` must be
    1..60 s (nsqd refuses SUB without heartbeats, so -1 is not offered).
    """

    hostname: str = field(default_factory=_default_hostname)
    client_id: str = ""
    user_agent: str = f"nsqpy/{__version__}"
    heartbeat_interval: float = 30.0
    msg_timeout: float | None = None
    output_buffer_size: int | None = None
    output_buffer_timeout: float | None = None
    sample_rate: int = 0
    # TLS and compression negotiated after IDENTIFY, AUTH after them (go-nsq's Config keys).
    tls_v1: bool = False
    tls_context: ssl.SSLContext | None = field(default=None, compare=False)  # None: system CAs
    tls_server_hostname: str | None = None  # None: the host of the nsqd address
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = 6
    auth_secret: str | None = field(default=None, repr=False)
    # youzan's extensions: extended message frames (each message's JSON header, its trace
    # id in a binary ID) and a dispatch tag (only messages published with this tag)
    extend_support: bool = False
    desired_tag: str = ""

    def __post_init__(self) -> None:
        if not 1.0 <= self.heartbeat_interval <= 60.0:
            raise ConfigError(f"heartbeat_interval {self.heartbeat_interval} s not in 1..60")
        if self.msg_timeout is not None and not 1.0 <= self.msg_timeout <= 900.0:
            raise ConfigError(f"msg_timeout {self.msg_timeout} s not in 1..900")
        if not 0 <= self.sample_rate <= 99:
            raise ConfigError(f"sample_rate {self.sample_rate} not in 0..99")
        if self.snappy and self.deflate:
            raise ConfigError("cannot enable both deflate and snappy compression")
        if not 1 <= self.deflate_level <= 9:
            raise ConfigError(f"deflate_level {self.deflate_level} not in 1..9")
        if len(self.desired_tag) > MAX_TAG_LENGTH:
            raise ConfigError(f"desired_tag longer than {MAX_TAG_LENGTH} characters")

    def fields(self) -> dict[str, Any]:
        """The IDENTIFY JSON object (ints in ms, real bools, as nsqd's Go decoder requires)."""
        out: dict[str, Any] = {
            "client_id": self.client_id or self.hostname.split(".")[0],
            "hostname": self.hostname,
            "user_agent": self.user_agent,
            "feature_negotiation": True,
            "heartbeat_interval": round(self.heartbeat_interval * 1000),
            "tls_v1": self.tls_v1,
            "snappy": self.snappy,
            "deflate": self.deflate,
            "deflate_level": self.deflate_level,
        }
        if self.msg_timeout is not None:
            out["msg_timeout"] = round(self.msg_timeout * 1000)
        if self.output_buffer_size is not None:
            out["output_buffer_size"] = self.output_buffer_size
        if self.output_buffer_timeout is not None:
            out["output_buffer_timeout"] = round(self.output_buffer_timeout * 1000)
        if self.sample_rate:
            out["sample_rate"] = self.sample_rate
        if self.extend_support:
            out["extend_support"] = True
        if self.desired_tag:
            out["desired_tag"] = self.desired_tag
        return out


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` -> (host, port); IPv6 hosts may be bracketed."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"address {address!r} is not host:port")
    return host.strip("[]") or "127.0.0.1", int(port)


MessageCallback = Callable[["Connection", WireMessage], None]
ConnCallback = Callable[["Connection"], None]
ErrorCallback = Callable[["Connection", ProtocolError], None]


class Connection(asyncio.Protocol):
    """A live V2 connection; also the per-connection RDY state the consumer plans over."""

    def __init__(
        self,
        address: str,
        options: IdentifyOptions,
        *,
        on_message: MessageCallback | None = None,
        on_close: ConnCallback | None = None,
        on_error: ErrorCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.key = address
        self.options = options
        self.on_message = on_message
        self.on_close = on_close
        self.on_error = on_error
        self.clock = clock
        self.settings: dict[str, Any] = {}
        self.error: ProtocolError | None = None
        # RDY bookkeeping (rdy.RdyView)
        self.rdy = 0
        self.max_rdy = 2500
        self.in_flight = 0
        self.last_message_at = clock()
        self.rdy_changed_at = clock()
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder()
        self._waiting: deque[asyncio.Future[bytes]] = deque()
        self._out: list[bytes] = []
        self._flush_handle: asyncio.Handle | None = None
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._closed = asyncio.get_running_loop().create_future()
        self._last_recv = clock()
        self._watchdog: asyncio.TimerHandle | None = None
        # Stream upgrades (client.secure): frames stop after each reply while negotiating.
        self._negotiating = False
        self._hold = False
        self._encoder: StreamEncoder | None = None
        self._inflate: StreamDecoder | None = None
        self.auth_reply: dict[str, Any] = {}
        # How message frames are read: youzan's extended form (nsqd agreed to
        # ``extend_support``), and with youzan's detail in front of each body (the
        # connection subscribed with SUB_ORDERED or SUB_ADVANCED).
        self.extended = False
        self.detail = False

    # ---- opening -------------------------------------------------------------------------
    @classmethod
    async def connect(
        cls,
        address: str,
        options: IdentifyOptions,
        *,
        timeout: float = 1.0,
        on_message: MessageCallback | None = None,
        on_close: ConnCallback | None = None,
        on_error: ErrorCallback | None = None,
    ) -> Connection:
        """Open, send the magic and IDENTIFY, read the reply. Raises on any failure."""
        host, port = split_address(address)
        loop = asyncio.get_running_loop()
        conn = cls(address, options, on_message=on_message, on_close=on_close, on_error=on_error)
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(lambda: conn, host, port)
                conn.write(encode_magic())
                conn._negotiating = True
                reply = await conn.command(encode_identify(options.fields()))
                conn._negotiated(reply)
                await negotiate(conn, host)
        except BaseException:
            conn.close()
            raise
        return conn

    def _negotiated(self, reply: bytes) -> None:
        try:
            self.settings = parse_identify_response(reply)
        except ValueError as exc:
            self.close()
            raise UnexpectedResponseError(str(exc)) from None
        self.max_rdy = int(self.settings.get("max_rdy_count", 2500))
        self.extended = self.settings.get("extend_support") is True

    @property
    def msg_timeout(self) -> float:
        """The server's in-flight timeout for this connection, in seconds."""
        ms = self.settings.get("msg_timeout")
        if isinstance(ms, int) and ms > 0:
            return ms / 1000
        return self.options.msg_timeout or 60.0

    # ---- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self._arm_watchdog()

    def data_received(self, data: bytes) -> None:
        self._last_recv = self.clock()
        self._received(data)

    def _received(self, data: bytes) -> None:
        """Bytes from the stream: inflated a bounded piece at a time when compressed."""
        inflate = self._inflate
        if inflate is None:
            self._decoder.append(data)
            self._drain_frames()
            return
        try:
            inflate.feed(data)
            while piece := inflate.read(65536):
                self._decoder.append(piece)
                self._drain_frames()
        except CorruptStream as exc:
            log.error("nsqd %s sent a corrupt compressed stream: %s", self.key, exc)
            self.close()

    def _drain_frames(self) -> None:
        while not self._hold:
            try:
                frame = self._decoder.pop()
            except BadFrame as exc:
                log.error("nsqd %s sent a bad frame: %s", self.key, exc)
                self.close()
                return
            if frame is None:
                return
            frame_type, body = frame
            if frame_type == FRAME_MESSAGE:
                self._got_message(body)
            elif frame_type == FRAME_RESPONSE:
                # While negotiating, each reply may switch the stream's encoding: stop here.
                self._hold = self._negotiating
                self._got_response(body)
            else:  # FRAME_ERROR: the decoder lets no other type through
                self._got_error(body)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._can_write.set()
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        reason = f"connection to {self.key} closed"
        if self.error is not None:
            reason += f" after {self.error}"
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(ConnectionClosedError(reason))
        if not self._closed.done():
            self._closed.set_result(None)
        if self.on_close is not None:
            self.on_close(self)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # ---- incoming --------------------------------------------------------------------------
    def _got_message(self, body: bytes) -> None:
        try:
            msg = decode_message(body, extended=self.extended, detail=self.detail)
        except Exception as exc:
            log.error("nsqd %s sent a bad message frame: %s", self.key, exc)
            self.close()
            return
        if self.on_message is None:
            log.error("nsqd %s sent a message to a connection that did not SUB", self.key)
            return
        self.on_message(self, msg)

    def _got_response(self, body: bytes) -> None:
        if body == HEARTBEAT:
            self.write(NOP)
            return
        if not self._waiting:
            log.warning("nsqd %s sent an unexpected response %r", self.key, body[:64])
            return
        fut = self._waiting.popleft()
        if not fut.done():
            fut.set_result(body)

    def _got_error(self, body: bytes) -> None:
        err = from_wire(body)
        if not err.fatal and err.code not in _UNANSWERED and self._waiting:
            # A non-fatal refusal of a command that waits for its answer (Youzan's
            # E_FAILED_ON_NOT_LEADER, E_FAILED_ON_NOT_WRITABLE or E_INVALID_JSON_HEADER
            # to a publish): that command fails, the connection goes on.
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(err)
            return
        if not err.fatal:
            if self.on_error is not None:
                self.on_error(self, err)
            else:
                log.warning("nsqd %s: %s", self.key, err)
            return
        self.error = err
        if self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(err)
        elif self.on_error is not None:
            self.on_error(self, err)
        else:
            log.error("nsqd %s: %s", self.key, err)
        self.close()

    # ---- outgoing --------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def write(self, data: bytes) -> None:
        """Queue bytes for this loop turn's single write; ignored once the socket closed."""
        if not self.is_open:
            return
        self._out.append(data)
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        out, self._out = self._out, []
        if out and self._transport is not None and not self._transport.is_closing():
            if self._encoder is not None:
                self._transport.write(self._encoder.encode(b"".join(out)))
            else:
                self._transport.writelines(out)

    def command(self, data: bytes) -> asyncio.Future[bytes]:
        """Send a command that the server answers; the future gets the response body.

        Fails with the error class of the error frame, or ``ConnectionClosedError``.
        """
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        if not self.is_open:
            fut.set_exception(ConnectionClosedError(f"connection to {self.key} is closed"))
            return fut
        self._waiting.append(fut)
        self.write(data)
        return fut

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        await self._can_write.wait()

    def send_rdy(self, count: int) -> None:
        """RDY ``count`` if it differs from the last value sent."""
        count = max(0, min(count, self.max_rdy))
        if count == self.rdy:
            return
        self.rdy = count
        self.rdy_changed_at = self.clock()
        self.write(encode_rdy(count))

    # ---- stream upgrades (secure.Upgradable) -----------------------------------------------
    def take_unread(self) -> bytes:
        """The bytes read past the last frame handed out; the decoder is left empty."""
        return self._decoder.take_rest()

    async def start_tls(self, context: ssl.SSLContext, server_hostname: str) -> None:
        """Upgrade the socket to TLS in place (``loop.start_tls``)."""
        transport = self._transport
        if transport is None:
            raise UnexpectedResponseError(f"connection to {self.key} closed during IDENTIFY")
        loop = asyncio.get_running_loop()
        secure = await loop.start_tls(transport, self, context, server_hostname=server_hostname)
        if secure is None:
            raise UnexpectedResponseError(
                f"connection to {self.key} closed during the TLS handshake"
            )
        self._transport = secure

    def compress(self, encoder: StreamEncoder, decoder: StreamDecoder) -> None:
        """From now on every write goes through ``encoder`` and every read through ``decoder``."""
        self._encoder = encoder
        self._inflate = decoder

    def expect_reply(self, unread: bytes) -> asyncio.Future[bytes]:
        """The next response (an upgrade's ``OK``), read from ``unread`` then the socket."""
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        self._hold = False
        if unread:
            self._received(unread)
        else:
            self._drain_frames()
        return fut

    def release_frames(self) -> None:
        """Negotiation is over: frames flow again."""
        self._negotiating = False
        self._hold = False
        self._drain_frames()

    # ---- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        """Flush queued commands and close the socket (idempotent)."""
        if self._transport is not None and not self._transport.is_closing():
            self._flush()
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    @property
    def closed(self) -> bool:
        return self._closed.done()

    def _arm_watchdog(self) -> None:
        interval = self.options.heartbeat_interval
        self._watchdog = asyncio.get_running_loop().call_later(interval, self._check_alive)

    def _check_alive(self) -> None:
        silent = self.clock() - self._last_recv
        if silent > 2 * self.options.heartbeat_interval:
            log.warning("nsqd %s silent for %.1f s, closing", self.key, silent)
            self.abort()
            return
        self._arm_watchdog()

    def __repr__(self) -> str:
        return f"<Connection {self.key} rdy={self.rdy} in_flight={self.in_flight}>"
