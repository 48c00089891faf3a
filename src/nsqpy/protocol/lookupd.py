"""nsqlookupd's TCP protocol V1 (SPEC 3.1), sans-IO: both directions, no sockets.

Owns the V1 wire format: the ``"  V1"`` magic, the ``\\n``-terminated command lines that
nsqd sends (PING, IDENTIFY + ``[int32 size][JSON]``, REGISTER, UNREGISTER, and nsqpy's
PARTITIONS, which an nsqd sends only to a lookupd that offered it), and the replies, which are ``[int32 size][data]`` with no frame type. The client side is the
encoders plus ``ResponseDecoder`` (used by nsqd); the server side is ``LookupdParser``,
which turns received bytes into command events, checking everything nsqlookupd v1.3.0
checks without its registration DB, in its order and with its codes and texts, and
``decode_identify`` for the IDENTIFY body. Every lookupd error is fatal. Garbage never
raises out of the parser: errors come back as ``ProtocolError`` values, and sizes are
bounded (a line by ``MAX_LINE_LENGTH``, an IDENTIFY body by ``MAX_IDENTIFY_BODY``).
Imports only the standard library, nsqpy.errors and sibling protocol modules; never
asyncio or sockets.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, TypeAlias

from nsqpy.errors import (
    BadBody,
    BadChannel,
    BadProtocol,
    BadTopic,
    InvalidError,
    ProtocolError,
    from_wire,
)
from nsqpy.protocol._gofmt import JsonPairs, go_json
from nsqpy.protocol.limits import MAX_LINE_LENGTH
from nsqpy.protocol.names import valid_channel_name, valid_name_bytes, valid_topic_name

MAGIC_V1 = b"  V1"
OK = b"OK"
# nsqlookupd reads an IDENTIFY body of any size; nsqpy refuses more than this (nsqd's
# IDENTIFY is about 150 bytes).
MAX_IDENTIFY_BODY = 1 << 20
# The client side refuses a reply larger than this (lookupd's replies are tiny).
MAX_RESPONSE_SIZE = 1 << 20

_I32 = struct.Struct(">i")
# Go's unicode.IsSpace, which strings.TrimSpace uses (Python's str.strip() would also
# strip \x1c-\x1f, which Go keeps).
_ASCII_SPACE = b" \t\n\v\f\r"
_GO_SPACE = (
    " \t\n\v\f\r\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


# -- errors whose description carries the peer's raw bytes ---------------------------------


class _RawDescription(ProtocolError):
    """A description that ends in bytes from the peer, echoed verbatim as Go does (``%s``)."""

    def __init__(self, raw: bytes) -> None:
        super().__init__(raw.decode("utf-8", "replace"))
        self.raw = raw

    def wire(self) -> bytes:
        return self.code.encode() + b" " + self.raw


class RawInvalid(_RawDescription, InvalidError):
    """E_INVALID with raw bytes (``invalid command <verb>``)."""


class RawBadTopic(_RawDescription, BadTopic):
    """E_BAD_TOPIC ``<VERB> topic name '<raw>' is not valid``."""


class RawBadChannel(_RawDescription, BadChannel):
    """E_BAD_CHANNEL ``<VERB> channel name '<raw>' is not valid``."""


class LineTooLong(InvalidError):
    """A command line over ``MAX_LINE_LENGTH`` bytes (nsqpy's bound; Go has none)."""


class BadResponse(BadProtocol, ValueError):
    """Client side: lookupd's reply framing is broken (negative or oversized size)."""


# -- client side: encoders and the response decoder ----------------------------------------


def encode_v1_magic() -> bytes:
    """The 4-byte protocol magic a V1 client sends first."""
    return MAGIC_V1


def encode_identify_v1(info: dict[str, object]) -> bytes:
    """``IDENTIFY\\n`` then the JSON body with its 4-byte big-endian size."""
    body = json.dumps(info, separators=(",", ":")).encode()
    return b"IDENTIFY\n" + _I32.pack(len(body)) + body


def encode_ping() -> bytes:
    return b"PING\n"


def _names_line(verb: str, topic: str, channel: str | None) -> bytes:
    if not valid_topic_name(topic):
        raise ValueError(f"{verb}: invalid topic name {topic!r}")
    if channel is None or channel == "":
        return f"{verb} {topic}\n".encode()
    if not valid_channel_name(channel):
        raise ValueError(f"{verb}: invalid channel name {channel!r}")
    return f"{verb} {topic} {channel}\n".encode()


def encode_register(topic: str, channel: str | None = None) -> bytes:
    """``REGISTER topic[ channel]\\n``; an invalid name is a ValueError."""
    return _names_line("REGISTER", topic, channel)


def encode_unregister(topic: str, channel: str | None = None) -> bytes:
    """``UNREGISTER topic[ channel]\\n``; an invalid name is a ValueError."""
    return _names_line("UNREGISTER", topic, channel)


def encode_partitions(topic: str, count: int) -> bytes:
    """``PARTITIONS topic count\n``; an invalid name or count is a ValueError."""
    if not 1 <= count <= MAX_PARTITIONS_NUMBER:
        raise ValueError(f"partition count {count} out of range 1-{MAX_PARTITIONS_NUMBER}")
    return _names_line("PARTITIONS", topic, None)[:-1] + b" %d\n" % count


def response_error(payload: bytes) -> ProtocolError | None:
    """The error a reply payload carries (``E_INVALID ...``), or None for OK / JSON."""
    return from_wire(payload) if payload.startswith(b"E_") else None


class ResponseDecoder:
    """Client side: bytes read from nsqlookupd in, whole reply payloads out.

    A partial reply is kept for the next ``feed``. A negative size or one over
    ``max_size`` raises ``BadResponse`` (also a ValueError), then every later feed does.
    """

    __slots__ = ("_buf", "_error", "max_size")

    def __init__(self, max_size: int = MAX_RESPONSE_SIZE) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._error: BadResponse | None = None

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        if self._error is not None:
            raise self._error
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos = 0
        while len(buf) - pos >= 4:
            size: int = _I32.unpack_from(buf, pos)[0]
            if size < 0 or size > self.max_size:
                self._error = BadResponse(
                    f"lookupd reply size {size} out of range 0-{self.max_size}"
                )
                buf.clear()
                raise self._error
            stop = pos + 4 + size
            if len(buf) < stop:
                break
            out.append(bytes(buf[pos + 4 : stop]))
            pos = stop
        del buf[:pos]
        return out


# -- server side: replies --------------------------------------------------------------------


def encode_response(data: bytes) -> bytes:
    """One V1 reply: ``[int32 size][data]`` (no frame type)."""
    return _I32.pack(len(data)) + data


def encode_error(err: ProtocolError) -> bytes:
    """An error reply: the same framing carrying ``<CODE> <description>``."""
    return encode_response(err.wire())


OK_RESPONSE = encode_response(OK)


# -- server side: commands and the parser ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ping:
    pass


@dataclass(frozen=True, slots=True)
class Identify:
    body: bytes


@dataclass(frozen=True, slots=True)
class Register:
    topic: str
    channel: str | None = None


@dataclass(frozen=True, slots=True)
class Unregister:
    topic: str
    channel: str | None = None


@dataclass(frozen=True, slots=True)
class Partitions:
    """nsqpy's ``PARTITIONS <topic> <count>``: how many partitions the topic has on the
    sending nsqd (sent only to a lookupd whose IDENTIFY reply says ``"partitions": true``)."""

    topic: str
    count: int


MAX_PARTITIONS_NUMBER = 1024  # (what a partition number of youzan's forms can address)

LookupCommand: TypeAlias = Ping | Identify | Register | Unregister | Partitions
Event: TypeAlias = LookupCommand | ProtocolError

_MAGIC, _LINE, _BODY_SIZE, _BODY, _DEAD = range(5)
_PING = Ping()


def go_trim_space(raw: bytes) -> bytes:
    """Go's ``strings.TrimSpace`` on bytes (ASCII and Unicode white space, not \\x1c-\\x1f)."""
    out = raw.strip(_ASCII_SPACE)
    if out and (out[0] >= 0x80 or out[-1] >= 0x80):
        text = out.decode("utf-8", "surrogateescape").strip(_GO_SPACE)
        out = text.encode("utf-8", "surrogateescape")
    return out


class LookupdParser:
    """Incremental parser of one V1 connection (server side).

    ``feed`` returns the events completed so far: commands, or one ``ProtocolError`` after
    which the parser is dead (every lookupd error closes the connection) and returns
    nothing more. It tracks IDENTIFY itself: REGISTER/UNREGISTER before it and a second
    IDENTIFY are refused here, as nsqlookupd does before reading their parameters or body.
    """

    def __init__(
        self,
        *,
        expect_magic: bool = True,
        max_line: int = MAX_LINE_LENGTH,
        max_body: int = MAX_IDENTIFY_BODY,
    ) -> None:
        self.max_line = max_line
        self.max_body = max_body
        self.identified = False
        self.error: ProtocolError | None = None
        self._state = _MAGIC if expect_magic else _LINE
        self._size = 0
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Event]:
        if self._state == _DEAD:
            return []
        self._buf += data
        out: list[Event] = []
        pos = 0
        try:
            while True:
                step = self._step(pos)
                if step is None:
                    break
                event, pos = step
                if event is not None:
                    out.append(event)
        except ProtocolError as err:
            self.error = err
            self._state = _DEAD
            self._buf = bytearray()
            out.append(err)
            return out
        del self._buf[:pos]
        return out

    def _step(self, pos: int) -> tuple[LookupCommand | None, int] | None:
        buf = self._buf
        state = self._state
        if state == _LINE:
            return self._line(pos)
        if state == _MAGIC:
            if len(buf) - pos < 4:
                return None
            if buf[pos : pos + 4] != MAGIC_V1:
                raise BadProtocol()
            self._state = _LINE
            return None, pos + 4
        if state == _BODY_SIZE:
            if len(buf) - pos < 4:
                return None
            size: int = _I32.unpack_from(buf, pos)[0]
            if size < 0:
                raise BadBody(f"IDENTIFY invalid body size {size}")
            if size > self.max_body:
                raise BadBody(f"IDENTIFY body too big {size} > {self.max_body}")
            self._size = size
            self._state = _BODY
            return None, pos + 4
        stop = pos + self._size
        if len(buf) < stop:
            return None
        self._state = _LINE
        self.identified = True
        return Identify(bytes(buf[pos:stop])), stop

    def _line(self, pos: int) -> tuple[LookupCommand | None, int] | None:
        buf = self._buf
        newline = buf.find(b"\n", pos)
        if newline < 0:
            if len(buf) - pos > self.max_line:
                raise LineTooLong(f"command line longer than {self.max_line} bytes")
            return None
        if newline - pos > self.max_line:
            raise LineTooLong(f"command line longer than {self.max_line} bytes")
        params = go_trim_space(bytes(buf[pos:newline])).split(b" ")
        verb = params[0]
        after = newline + 1
        if verb == b"PING":
            return _PING, after
        if verb == b"IDENTIFY":
            if self.identified:
                raise InvalidError("cannot IDENTIFY again")
            self._state = _BODY_SIZE
            return None, after
        if verb == b"PARTITIONS":
            if not self.identified:
                raise InvalidError("client must IDENTIFY")
            if len(params) != 3:
                raise InvalidError("PARTITIONS insufficient number of params")
            topic, _ = _topic_channel(verb, params[1:2])
            raw = params[2]
            count = int(raw) if raw.isdigit() and len(raw) <= 4 else 0
            if not 1 <= count <= MAX_PARTITIONS_NUMBER:
                raise RawInvalid(b"PARTITIONS invalid partition count " + raw)
            return Partitions(topic, count), after
        if verb == b"REGISTER" or verb == b"UNREGISTER":
            if not self.identified:
                raise InvalidError("client must IDENTIFY")
            topic, channel = _topic_channel(verb, params[1:])
            if verb == b"REGISTER":
                return Register(topic, channel), after
            return Unregister(topic, channel), after
        raise RawInvalid(b"invalid command " + verb)


def _topic_channel(verb: bytes, params: list[bytes]) -> tuple[str, str | None]:
    """nsqlookupd's getTopicChan: an empty channel parameter means no channel."""
    name = verb.decode()
    if not params:
        raise InvalidError(f"{name} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) >= 2 else b""
    if not valid_name_bytes(topic):
        raise RawBadTopic(verb + b" topic name '" + topic + b"' is not valid")
    if channel and not valid_name_bytes(channel):
        raise RawBadChannel(verb + b" channel name '" + channel + b"' is not valid")
    return topic.decode("ascii"), channel.decode("ascii") if channel else None


# -- server side: the IDENTIFY body ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeerIdentity:
    """What an nsqd says about itself in IDENTIFY (Go's PeerInfo, exported fields)."""

    remote_address: str = ""
    hostname: str = ""
    broadcast_address: str = ""
    tcp_port: int = 0
    http_port: int = 0
    version: str = ""


_STR_FIELDS = ("remote_address", "hostname", "broadcast_address", "version")
_INT_FIELDS = ("tcp_port", "http_port")
_INT64 = 1 << 63


def _field_name(key: str) -> str | None:
    if key in _STR_FIELDS or key in _INT_FIELDS:
        return key
    folded = key.lower()  # encoding/json also matches keys case-insensitively
    if folded in _STR_FIELDS or folded in _INT_FIELDS:
        return folded
    return None


def decode_identify(body: bytes) -> PeerIdentity | BadBody:
    """The IDENTIFY body as Go's json.Unmarshal into PeerInfo reads it, or the E_BAD_BODY.

    Unknown keys are ignored, ``null`` leaves a field empty, a wrong type (a float or a
    bool for a port, a number for a string) fails. Broadcast address, both ports and the
    version must then be set.
    """
    failed = BadBody("IDENTIFY failed to decode JSON body")
    try:
        doc = go_json(body)
    except (ValueError, RecursionError):
        return failed
    if doc is not None and not isinstance(doc, JsonPairs):
        return failed
    fields: dict[str, Any] = {}
    for key, value in doc or ():  # duplicates: the last wins
        name = _field_name(key)
        if name is None or value is None:
            continue
        if name in _INT_FIELDS:
            if type(value) is not int or not -_INT64 <= value < _INT64:
                return failed
        elif not isinstance(value, str):
            return failed
        fields[name] = value
    peer = PeerIdentity(**fields)
    if not peer.broadcast_address or not peer.tcp_port or not peer.http_port or not peer.version:
        return BadBody("IDENTIFY missing fields")
    return peer


__all__ = [
    "MAGIC_V1",
    "MAX_IDENTIFY_BODY",
    "OK_RESPONSE",
    "BadResponse",
    "Event",
    "Identify",
    "LineTooLong",
    "LookupCommand",
    "LookupdParser",
    "PeerIdentity",
    "Ping",
    "RawBadChannel",
    "RawBadTopic",
    "RawInvalid",
    "Register",
    "ResponseDecoder",
    "Unregister",
    "decode_identify",
    "encode_error",
    "encode_identify_v1",
    "encode_ping",
    "encode_register",
    "encode_response",
    "encode_unregister",
    "encode_v1_magic",
    "go_trim_space",
    "response_error",
]
