"""nsqlookupd's TCP side: one ``asyncio.Protocol`` per nsqd connection speaking V1.

Bytes go through ``protocol.lookupd.LookupdParser``; each command is applied to the
``Registry`` and answered with a size-prefixed reply. Every error is sent, then the
connection is closed (all lookupd errors are fatal). When a connection ends, its peer
leaves every registration. Reading pauses while the peer does not read our replies, so a
client that never reads cannot grow our buffers. Imports asyncio, the protocol codec and
the registry; never HTTP.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from typing import TYPE_CHECKING, Protocol, cast

from nsqpy.errors import ProtocolError
from nsqpy.lookupd.registry import PeerInfo, Registration, Registry
from nsqpy.protocol.lookupd import (
    OK_RESPONSE,
    Identify,
    LookupCommand,
    LookupdParser,
    Partitions,
    Ping,
    Register,
    Unregister,
    decode_identify,
    encode_error,
    encode_response,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, MutableSet

log = logging.getLogger("nsqpy.lookupd")


class LookupdContext(Protocol):
    """What a connection needs from the daemon."""

    @property
    def registry(self) -> Registry: ...

    @property
    def connections(self) -> MutableSet[V1Connection]: ...

    def identify_reply(self) -> dict[str, object]: ...

    @property
    def command_counts(self) -> Counter[str]: ...


def format_address(peername: object) -> str:
    """Go's ``RemoteAddr().String()``: ``ip:port``, IPv6 in brackets."""
    if isinstance(peername, tuple) and len(peername) >= 2:
        host, port = str(peername[0]), peername[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(peername or "")


class V1Connection(asyncio.Protocol):
    """One nsqd connected to this lookupd."""

    def __init__(self, context: LookupdContext) -> None:
        self.context = context
        self.registry = context.registry
        self.parser = LookupdParser()
        self.transport: asyncio.Transport | None = None
        self.remote_address = ""
        self.peer: PeerInfo | None = None
        self.closing = False

    def __repr__(self) -> str:
        return f"V1Connection({self.remote_address})"

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.remote_address = format_address(transport.get_extra_info("peername"))
        self.context.connections.add(self)
        log.info("TCP: new client(%s)", self.remote_address)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.transport = None
        self.context.connections.discard(self)
        log.info("CLIENT(%s): closing", self.remote_address)
        if self.peer is not None:
            for reg in self.registry.remove_peer(self.peer.id):
                log.info(
                    "DB: client(%s) UNREGISTER category:%s key:%s subkey:%s",
                    self.remote_address,
                    reg.category,
                    reg.key,
                    reg.subkey,
                )

    def pause_writing(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.closing:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        out: list[bytes] = []
        for event in self.parser.feed(data):
            if isinstance(event, ProtocolError):
                self._fail(out, event)
                return
            try:
                out.append(self._dispatch(event))
            except ProtocolError as err:
                self._fail(out, err)
                return
        if out and self.transport is not None:
            self.transport.writelines(out)

    def close(self) -> None:
        """Server shutdown."""
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, out: list[bytes], err: ProtocolError) -> None:
        log.error("[%s] - %s", self.remote_address, err)
        out.append(encode_error(err))
        self.closing = True
        if self.transport is not None:
            self.transport.writelines(out)
            self.transport.close()  # after the buffered replies are written

    # -- commands -------------------------------------------------------------------------

    def _dispatch(self, command: LookupCommand) -> bytes:
        self.context.command_counts[type(command).__name__.upper()] += 1
        match command:
            case Ping():
                return self.ping()
            case Register(topic, channel):
                return self.register(topic, channel)
            case Unregister(topic, channel):
                return self.unregister(topic, channel)
            case Identify(body):
                return self.identify(body)
            case Partitions(topic, count):
                assert self.peer is not None  # the parser refuses it before IDENTIFY
                self.registry.set_partitions(self.peer, topic, count)
                return OK_RESPONSE
        raise AssertionError(f"unknown command {command!r}")  # pragma: no cover

    def ping(self) -> bytes:
        if self.peer is not None:
            log.debug("CLIENT(%s): pinged", self.peer.id)
            self.registry.ping(self.peer)
        return OK_RESPONSE

    def identify(self, body: bytes) -> bytes:
        identity = decode_identify(body)
        if isinstance(identity, ProtocolError):
            raise identity
        peer = PeerInfo(
            id=self.remote_address,
            remote_address=self.remote_address,
            hostname=identity.hostname,
            broadcast_address=identity.broadcast_address,
            tcp_port=identity.tcp_port,
            http_port=identity.http_port,
            version=identity.version,
        )
        log.info(
            "CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s",
            self.remote_address,
            peer.broadcast_address,
            peer.tcp_port,
            peer.http_port,
            peer.version,
        )
        self.peer = peer
        if self.registry.identify(peer):
            log.info("DB: client(%s) REGISTER category:client key: subkey:", self.remote_address)
        reply = self.context.identify_reply()
        return encode_response(
            json.dumps(dict(sorted(reply.items())), separators=(",", ":")).encode()
        )

    def register(self, topic: str, channel: str | None) -> bytes:
        assert self.peer is not None  # the parser refuses REGISTER before IDENTIFY
        self._log_changes("REGISTER", self.registry.register(self.peer, topic, channel))
        return OK_RESPONSE

    def unregister(self, topic: str, channel: str | None) -> bytes:
        assert self.peer is not None  # the parser refuses UNREGISTER before IDENTIFY
        self._log_changes("UNREGISTER", self.registry.unregister(self.peer, topic, channel))
        return OK_RESPONSE

    def _log_changes(self, verb: str, regs: Iterable[Registration]) -> None:
        """One line per registration added or removed, in nsqlookupd's words."""
        for reg in regs:
            log.info(
                "DB: client(%s) %s category:%s key:%s subkey:%s",
                self.remote_address,
                verb,
                reg.category,
                reg.key,
                reg.subkey,
            )
