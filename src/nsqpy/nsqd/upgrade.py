"""The stream upgrades IDENTIFY negotiates (SPEC 1.6): TLS, then snappy or DEFLATE.

``begin_upgrade`` runs after IDENTIFY queued its JSON reply. It holds the connection's
commands, lets the reply (and any reply queued before it) go out in plain text, then puts an
``UpgradedTransport`` between the socket's transport and the ``V2Connection``: to the socket
it is the protocol, to the connection it is the transport. TLS is done in memory
(``ssl.MemoryBIO`` + ``SSLObject``) so it behaves the same on uvloop and asyncio and can
take over bytes the client pipelined behind IDENTIFY. After the handshake (5 s deadline) an
``OK`` goes out over TLS; then the compression codec is switched on and an ``OK`` goes out
compressed; then the connection runs commands again. A failed handshake answers
``E_IDENTIFY_FAILED`` in plain text as nsqd does and closes. Incoming compressed data is
inflated and handed to the connection 64 KiB at a time, never more while it is paused; a
corrupt stream closes the connection without a frame (nsqd's read fails the same way).
At most ``DELIVER_BUDGET`` pieces go to the connection per event-loop turn: a few bytes that
inflate to megabytes of commands are run a turn at a time, with the socket not read
meanwhile, so the other clients are served in between.

Imports ssl and asyncio; knows the connection only through ``Upgradable`` (what it calls;
``nsqd.tcp``'s ``V2Connection`` is one, never named here).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol, cast

from nsqpy.codecs import stream_codec
from nsqpy.errors import IdentifyFailed
from nsqpy.nsqd.ack import Ack
from nsqpy.nsqd.tls import TlsSettings, describe
from nsqpy.protocol.commands import CommandParser
from nsqpy.protocol.compress import CorruptStream, Passthrough, StreamDecoder, StreamEncoder
from nsqpy.protocol.frames import OK_FRAME, encode_error
from nsqpy.protocol.identify import Negotiated

if TYPE_CHECKING:
    from nsqpy.broker.client import Client

log = logging.getLogger("nsqpy.nsqd")

READ_PIECE = 65536  # decompressed bytes handed to the connection at a time
DELIVER_BUDGET = 2  # pieces per event-loop turn (uvloop reads at most 256 KiB a turn)


class Upgradable(Protocol):
    """What an upgrade uses of the client connection: its commands are held meanwhile, its
    queued replies released and flushed, its transport swapped; to the socket the
    ``UpgradedTransport`` is the protocol and passes the events on to it."""

    client: Client
    transport: asyncio.Transport | None
    closing: bool

    @property
    def parser(self) -> CommandParser: ...

    def hold(self, *, pause_reading: bool = True) -> None: ...

    def resume(self) -> None: ...

    def pending_acks(self) -> list[Ack]:
        """The acknowledgements its queued replies still wait for."""
        ...

    def release_replies(self) -> bool: ...

    def trust_cluster_peer(self) -> None:
        """The TLS handshake showed a certificate of the cluster's CA."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task its server holds (and cancels when it stops)."""
        ...

    def flush(self, force: bool = False) -> None: ...

    def data_received(self, data: bytes) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...


def begin_upgrade(conn: Upgradable, neg: Negotiated, settings: TlsSettings) -> None:
    """Upgrade ``conn`` as ``neg`` says, once the IDENTIFY reply queued before this is out."""
    conn.hold(pause_reading=False)
    pending = conn.pending_acks()
    if not pending:
        _switch(conn, neg, settings)
        return
    # Publishes answered before IDENTIFY are still waiting for their commit: their OKs must
    # leave in plain text first, so wait for them (reading paused meanwhile).
    conn.hold()
    conn.spawn(_after_acks(conn, neg, settings, pending))


async def _after_acks(
    conn: Upgradable, neg: Negotiated, settings: TlsSettings, pending: list[Ack]
) -> None:
    loop = asyncio.get_running_loop()
    for ack in pending:
        if not ack.done:
            if ack.callback is None:
                ack.callback = loop.create_future()
            try:
                await ack.callback
            except Exception:
                pass  # the error frame goes out as the reply and closes the connection
    if conn.transport is not None and not conn.closing:
        conn.hold(pause_reading=False)  # the handshake reads on, the commands still wait
        _switch(conn, neg, settings)


def _switch(conn: Upgradable, neg: Negotiated, settings: TlsSettings) -> None:
    conn.release_replies()
    conn.flush()  # the JSON reply leaves in plain text
    raw = conn.transport
    if raw is None or raw.is_closing() or conn.closing:
        return
    wire = UpgradedTransport(raw, conn)
    leftover = conn.parser.take_buffered()
    raw.set_protocol(wire)
    conn.transport = cast(asyncio.Transport, wire)
    compression = "snappy" if neg.snappy else "deflate" if neg.deflate else ""
    level = neg.deflate_level

    def compress_and_resume() -> None:
        if neg.tls_v1 and settings.cluster_peer:
            conn.trust_cluster_peer()
        if compression:
            log.info("[%s] upgrading connection to %s", conn.client.remote_address, compression)
            wire.set_codec(*stream_codec(compression, level))
            setattr(conn.client, compression, True)
            wire.write(OK_FRAME)
        conn.resume()

    if neg.tls_v1 and settings.context is not None:
        log.info("[%s] upgrading connection to TLS", conn.client.remote_address)
        wire.start_tls(settings.context, settings.handshake_timeout, compress_and_resume)
    else:
        compress_and_resume()
    if leftover:
        wire.data_received(leftover)


class UpgradedTransport(asyncio.Protocol):
    """TLS and/or a compression codec between the socket's transport and the connection."""

    def __init__(self, raw: asyncio.Transport, conn: Upgradable) -> None:
        self._raw = raw
        self._conn = conn
        self._ssl: ssl.SSLObject | None = None
        self._in_bio = ssl.MemoryBIO()
        self._out_bio = ssl.MemoryBIO()
        self._handshaking = False
        self._on_secure: Any = None
        self._timer: asyncio.TimerHandle | None = None
        self._pending: list[bytes] = []  # written while the handshake runs
        self._encoder: StreamEncoder | None = None
        self._decoder: StreamDecoder = Passthrough()
        self._paused = False  # the connection asked not to be fed
        self._backlog = False  # decoded input waits for the next turn
        self._carry = b""  # a decoded piece read ahead, delivered first
        self._raw_reading = True
        self._delivering = False

    # -- set-up ------------------------------------------------------------------------

    def start_tls(self, context: ssl.SSLContext, timeout: float, on_secure: Any) -> None:
        self._ssl = context.wrap_bio(self._in_bio, self._out_bio, server_side=True)
        self._handshaking = True
        self._on_secure = on_secure
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(timeout, self._fail, "TLS handshake timed out")

    def set_codec(self, encoder: StreamEncoder, decoder: StreamDecoder) -> None:
        self._encoder = encoder
        self._decoder = decoder

    # -- the connection's transport ----------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._raw.is_closing():
            return
        if self._handshaking:
            self._pending.append(bytes(data))
            return
        if self._encoder is not None:
            data = self._encoder.encode(bytes(data))
        if self._ssl is None:
            self._raw.write(data)
            return
        view = memoryview(data)
        try:
            while view:
                view = view[self._ssl.write(view) :]
        except ssl.SSLError as exc:
            log.info("[%s] TLS write failed: %s", self._conn.client.remote_address, exc)
            self._raw.abort()
            return
        self._flush_out()

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def is_closing(self) -> bool:
        return self._raw.is_closing()

    def close(self) -> None:
        if self._ssl is not None and not self._handshaking and not self._raw.is_closing():
            try:
                self._ssl.unwrap()  # queue our close_notify
            except ssl.SSLError:
                pass
            self._flush_out()
        self._raw.close()

    def abort(self) -> None:
        self._raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._ssl if self._ssl is not None and not self._handshaking else default
        return self._raw.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._paused = True
        self._update_reading()

    def resume_reading(self) -> None:
        if not self._paused:
            return
        self._paused = False
        self._update_reading()
        asyncio.get_running_loop().call_soon(self._deliver)

    def is_reading(self) -> bool:
        return not self._paused

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size() + sum(len(p) for p in self._pending)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._raw.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return False

    # -- the socket's protocol ---------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._ssl is not None:
            data = self._decrypt(data)
            if not data:
                return
        try:
            self._decoder.feed(data)
        except CorruptStream as exc:
            self._corrupt(exc)
            return
        self._deliver()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._conn.connection_lost(exc)

    def pause_writing(self) -> None:
        self._conn.pause_writing()

    def resume_writing(self) -> None:
        self._conn.resume_writing()

    # -- internals ---------------------------------------------------------------------

    def _decrypt(self, data: bytes) -> bytes:
        assert self._ssl is not None
        self._in_bio.write(data)
        if self._handshaking:
            try:
                self._ssl.do_handshake()
            except ssl.SSLWantReadError:
                self._flush_out()
                return b""
            except (ssl.SSLError, OSError) as exc:
                self._fail(str(exc))
                return b""
            self._secured()
        plain: list[bytes] = []
        try:
            while True:
                piece = self._ssl.read(READ_PIECE)
                if not piece:  # the client's close_notify: answer it and close
                    self.close()
                    return b"".join(plain)
                plain.append(piece)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            self.close()
            return b"".join(plain)
        except ssl.SSLError as exc:
            log.info("[%s] TLS read failed: %s", self._conn.client.remote_address, exc)
            self._flush_out()
            self._raw.abort()
            return b""
        self._flush_out()
        return b"".join(plain)

    def _secured(self) -> None:
        assert self._ssl is not None
        self._handshaking = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        client = self._conn.client
        client.tls = True
        for key, value in describe(self._ssl).items():
            setattr(client, key, value)
        self._flush_out()
        self.write(OK_FRAME)  # over TLS, before any compression
        self._on_secure()
        pending, self._pending = self._pending, []
        if pending:
            self.writelines(pending)

    def _fail(self, reason: str) -> None:
        """The TLS handshake failed: nsqd answers E_IDENTIFY_FAILED in plain text and closes."""
        if not self._handshaking or self._raw.is_closing():
            return
        self._handshaking = False
        log.info("[%s] TLS handshake failed: %s", self._conn.client.remote_address, reason)
        self._flush_out()
        self._raw.write(encode_error(IdentifyFailed(f"IDENTIFY failed {reason}")))
        self._raw.close()

    def _corrupt(self, exc: Exception) -> None:
        log.info("[%s] failed to read command - %s", self._conn.client.remote_address, exc)
        self._raw.abort()

    def _flush_out(self) -> None:
        data = self._out_bio.read()
        if data and not self._raw.is_closing():
            self._raw.write(data)

    def _update_reading(self) -> None:
        """Read the socket only while the connection is fed and no decoded input waits."""
        want = not self._paused and not self._backlog
        if want == self._raw_reading or self._raw.is_closing():
            return
        self._raw_reading = want
        if want:
            self._raw.resume_reading()
        else:
            self._raw.pause_reading()

    def _deliver(self) -> None:
        """Hand decoded bytes to the connection a bounded piece at a time while it reads."""
        if self._delivering:
            return
        self._delivering = True
        try:
            for _ in range(DELIVER_BUDGET):
                if self._paused or self._raw.is_closing():
                    return
                piece, self._carry = self._carry or self._decoder.read(READ_PIECE), b""
                if not piece:
                    break
                self._conn.data_received(piece)
            else:
                self._carry = self._decoder.read(READ_PIECE)
            # Decoded input left over waits a turn, the socket unread: the others go first.
            self._backlog = bool(self._carry)
            self._update_reading()
            if self._backlog:
                asyncio.get_running_loop().call_soon(self._deliver)
        except CorruptStream as exc:
            self._corrupt(exc)
        finally:
            self._delivering = False
