"""Youzan's protocol extensions: message headers, partitioned, ordered and traced commands.

Owns what youzan/nsq added on top of NSQ's V2 protocol, as sans-IO values and bytes:
the JSON headers a message may carry (``parse_headers`` checks them: a JSON object of
string values whose names are 1 to 255 characters, none a control character (youzan's
clients name theirs ``nsq.msg.size``, ``nsq.client.compress``), at most 65535 bytes; names starting
with ``##`` are reserved: ``##trace_id`` is a decimal uint64 string, ``##partition_key``
picks the partition by hash; a value that is not valid Unicode, a lone surrogate escape such
as ``"\\ud800"``, is the fatal E_BAD_BODY: it could never be written out as UTF-8 again),
the reply a traced publish gets (``encode_traced_reply``:
``OK`` then the message ID as a uint64, the trace id, the offset and the size in the queue, all
big-endian) and the client-side encoders of ``PUB_EXT``/``MPUB_EXT`` (each message is a
uint16 header length, the JSON header, the body), ``PUB_TRACE``/``MPUB_TRACE`` (a uint64
trace id, the body), the partitioned ``PUB``/``MPUB <topic> <partition>`` and
``SUB``/``SUB_ORDERED <topic> <channel> [<partition>]`` and
``SUB_ADVANCED <topic> <channel> [<partition> [<position>]]``, and the server's parsing of
``PUB_EXT``/``MPUB_EXT``/``PUB_TRACE``/``MPUB_TRACE`` (``parse_pub_ext`` …, which
``commands.CommandParser`` calls with itself as the ``BodyReader`` it satisfies: this module
never imports ``commands``). Imports only the standard library, nsqpy.errors and sibling
protocol modules.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from nsqpy.errors import BadBody, BadMessage, BadPartition, InvalidError, InvalidJsonHeader
from nsqpy.protocol._gofmt import go_quote, reject_json_constant
from nsqpy.protocol.message import MAX_PARTITION
from nsqpy.protocol.names import valid_channel_name, valid_topic_name

TRACE_ID_KEY = "##trace_id"
PARTITION_KEY_KEY = "##partition_key"
DISPATCH_TAG_KEY = "##client_dispatch_tag"  # youzan: delivered to consumers of that tag
MAX_HEADERS_BYTES = 0xFFFF  # the header length is a uint16 on the wire
MAX_TRACE_ID = (1 << 64) - 1
_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,255}")  # (youzan's clients use dots: nsq.msg.size)
_DIGITS = re.compile(r"[0-9]{1,20}")
_SURROGATE = re.compile("[\ud800-\udfff]")
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_TRACED = struct.Struct(">2sQQQI")
TRACE_ID_LENGTH = 8  # PUB_TRACE: the uint64 before the body
HEADER_LENGTH_SIZE = 2  # PUB_EXT: the uint16 before the header


# -- parsed commands (made by nsqpy.protocol.commands.CommandParser) ----------------------


@dataclass(slots=True)
class PubExt:
    """PUB_EXT: one message with a JSON header (raw; the server checks it)."""

    topic: str
    header: bytes
    body: bytes
    partition: int = -1


@dataclass(slots=True)
class MpubExt:
    topic: str
    headers: list[bytes]
    bodies: list[bytes]
    partition: int = -1


@dataclass(slots=True)
class PubTrace:
    """PUB_TRACE: one message with a uint64 trace id."""

    topic: str
    trace_id: int
    body: bytes
    partition: int = -1


@dataclass(slots=True)
class MpubTrace:
    topic: str
    trace_ids: list[int]
    bodies: list[bytes]
    partition: int = -1


def parse_partition(raw: bytes | bytearray) -> int:
    """A partition parameter: a decimal number 0-1023, or -1 for "none" (youzan's default)."""
    text = bytes(raw)
    if text == b"-1":
        return -1
    if not text.isdigit() or len(text) > 4 or int(text) > MAX_PARTITION:
        raise BadPartition(f"topic partition is not valid: {go_quote(text)}")
    return int(text)


def split_header(raw: bytes) -> tuple[bytes, bytes]:
    """An extended message: (its JSON header, its body), as youzan frames them."""
    if len(raw) <= HEADER_LENGTH_SIZE:
        raise BadBody(f"invalid body size {len(raw)} with ext json header enabled")
    length = _U16.unpack_from(raw)[0]
    if len(raw) <= HEADER_LENGTH_SIZE + length:
        raise BadBody(f"invalid body size {len(raw)} in ext json header content length")
    return raw[HEADER_LENGTH_SIZE : HEADER_LENGTH_SIZE + length], raw[HEADER_LENGTH_SIZE + length :]


# -- parsing the extended publishes (for nsqpy.protocol.commands.CommandParser) ------------

_Params: TypeAlias = Sequence[bytes | bytearray]
_Extended: TypeAlias = tuple[PubExt | PubTrace | MpubExt | MpubTrace, int] | None


class BodyReader(Protocol):
    """What the extended forms use of the parser (``CommandParser``): NSQ's checks of the
    topic, of a PUB's body and of an MPUB's bodies; None while the body has not arrived."""

    def read_topic(self, raw: bytes | bytearray, verb: str, prefix: str = "") -> str: ...

    def read_message_body(self, verb: str, start: int) -> tuple[bytes, int] | None: ...

    def read_mpub(
        self, params: _Params, start: int, verb: str
    ) -> tuple[tuple[str, int, list[bytes]], int] | None: ...


def _one_extended(parser: BodyReader, params: _Params, start: int, verb: str) -> _Extended:
    """PUB_EXT / PUB_TRACE: PUB's checks, then the header or trace id split off."""
    if len(params) < 2:
        raise InvalidError(f"{verb} insufficient number of parameters")
    topic = parser.read_topic(params[1], verb)
    partition = parse_partition(params[2]) if len(params) == 3 else -1
    parsed = parser.read_message_body(verb, start)
    if parsed is None:
        return None
    raw, stop = parsed
    if verb == "PUB_TRACE":
        if len(raw) <= TRACE_ID_LENGTH:
            raise BadBody(f"invalid body size {len(raw)} with trace id enabled")
        return PubTrace(topic, _U64.unpack_from(raw)[0], raw[TRACE_ID_LENGTH:], partition), stop
    header, body = split_header(raw)
    return PubExt(topic, header, body, partition), stop


def parse_pub_ext(parser: BodyReader, params: _Params, start: int) -> _Extended:
    return _one_extended(parser, params, start, "PUB_EXT")


def parse_pub_trace(parser: BodyReader, params: _Params, start: int) -> _Extended:
    return _one_extended(parser, params, start, "PUB_TRACE")


def parse_mpub_ext(parser: BodyReader, params: _Params, start: int) -> _Extended:
    parsed = parser.read_mpub(params, start, "MPUB_EXT")
    if parsed is None:
        return None
    (topic, partition, raws), stop = parsed
    split = [split_header(raw) for raw in raws]
    return MpubExt(topic, [h for h, _ in split], [b for _, b in split], partition), stop


def parse_mpub_trace(parser: BodyReader, params: _Params, start: int) -> _Extended:
    parsed = parser.read_mpub(params, start, "MPUB_TRACE")
    if parsed is None:
        return None
    (topic, partition, raws), stop = parsed
    for i, raw in enumerate(raws):
        if len(raw) <= TRACE_ID_LENGTH:
            raise BadMessage(f"MPUB invalid message({i}) body size {len(raw)} for tracing")
    traces = [_U64.unpack_from(raw)[0] for raw in raws]
    return MpubTrace(topic, traces, [raw[TRACE_ID_LENGTH:] for raw in raws], partition), stop


@dataclass(frozen=True, slots=True)
class Headers:
    """Checked headers: the JSON text to store, and the reserved values found in it."""

    json: bytes
    trace_id: int = 0
    partition_key: bytes = b""
    traced: bool = False  # ##trace_id was given: the publish gets the traced reply


NO_HEADERS = Headers(b"")


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        out[key] = value
    return out


def _bad(why: str) -> InvalidJsonHeader:
    return InvalidJsonHeader(f"invalid json header: {why}")


def check_header_values(doc: Mapping[str, object]) -> Headers:
    """Check a decoded header object; returns its reserved values (``json`` left empty)."""
    trace_id = 0
    key = b""
    traced = False
    for name, value in doc.items():
        if not _NAME.fullmatch(name):
            raise _bad(f"header name {name!r} is empty, longer than 255 or has a control character")
        if not isinstance(value, str):
            raise _bad(f"header {name!r} is not a string")
        if _SURROGATE.search(value):
            raise BadBody(f"invalid json header: header {name!r} is not valid Unicode")
        if name == TRACE_ID_KEY:
            if not _DIGITS.fullmatch(value) or int(value) > MAX_TRACE_ID:
                raise _bad(f"{TRACE_ID_KEY} {value!r} is not a decimal uint64")
            trace_id = int(value)
            traced = True
        elif name == PARTITION_KEY_KEY:
            key = value.encode()
    return Headers(b"", trace_id, key, traced)


def parse_headers(raw: bytes) -> Headers:
    """Check a message's JSON header (see the module doc); empty means no headers.

    Raises InvalidJsonHeader (E_INVALID_JSON_HEADER, non-fatal) naming what is wrong, or
    BadBody (fatal) for a value that is not valid Unicode.
    """
    if not raw:
        return NO_HEADERS
    if len(raw) > MAX_HEADERS_BYTES:
        raise _bad(f"{len(raw)} bytes > {MAX_HEADERS_BYTES}")
    try:
        doc = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_pairs, parse_constant=reject_json_constant
        )
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _bad("not valid JSON") from None
    if not isinstance(doc, dict):
        raise _bad("not a JSON object")
    found = check_header_values(doc)
    return Headers(bytes(raw), found.trace_id, found.partition_key, found.traced)


def headers_from_mapping(doc: Mapping[str, str]) -> Headers:
    """Headers built from name/value pairs (HTTP): checked, then written as compact JSON."""
    found = check_header_values(doc)
    raw = json.dumps(dict(doc), separators=(",", ":"), ensure_ascii=False).encode()
    if len(raw) > MAX_HEADERS_BYTES:
        raise _bad(f"{len(raw)} bytes > {MAX_HEADERS_BYTES}")
    return Headers(raw, found.trace_id, found.partition_key, found.traced)


_TAG_BYTES = DISPATCH_TAG_KEY.encode()


def dispatch_tag(headers: bytes) -> str:
    """The ``##client_dispatch_tag`` of a message's JSON headers ("" for none, or for
    headers that do not hold it as a string)."""
    if _TAG_BYTES not in headers:  # (most messages: no JSON to read)
        return ""
    try:
        value = json.loads(headers).get(DISPATCH_TAG_KEY, "")
    except (ValueError, AttributeError):
        return ""
    return value if isinstance(value, str) else ""


def encode_traced_reply(msg_id: int, trace_id: int, offset: int, raw_size: int) -> bytes:
    """The reply to a traced publish: ``OK`` + id u64 + trace id u64 + offset u64 + size u32."""
    return _TRACED.pack(b"OK", msg_id, trace_id, offset, raw_size)


def decode_traced_reply(data: bytes) -> tuple[int, int, int, int]:
    """(message id, trace id, offset, record size) of a traced reply; ValueError if not one."""
    if len(data) != _TRACED.size or data[:2] != b"OK":
        raise ValueError(f"not a traced publish reply: {data[:40]!r}")
    _ok, msg_id, trace_id, offset, size = _TRACED.unpack(data)
    return msg_id, trace_id, offset, size


# -- client-side encoders ------------------------------------------------------------------


def _line(verb: bytes, topic: str, partition: int | None) -> bytes:
    if not valid_topic_name(topic):
        raise ValueError(f"invalid topic name {topic!r}")
    parts = [verb, topic.encode("ascii")]
    if partition is not None:
        if partition < 0:
            raise ValueError(f"partition must not be negative: {partition}")
        parts.append(b"%d" % partition)
    return b" ".join(parts) + b"\n"


def _header_bytes(headers: Mapping[str, str] | bytes) -> bytes:
    raw = headers if isinstance(headers, bytes) else json.dumps(dict(headers)).encode()
    if len(raw) > MAX_HEADERS_BYTES:
        raise ValueError(f"headers of {len(raw)} bytes > {MAX_HEADERS_BYTES}")
    return raw


def ext_message(headers: Mapping[str, str] | bytes, body: bytes) -> bytes:
    """One PUB_EXT/MPUB_EXT message: uint16 header length, header JSON, body."""
    raw = _header_bytes(headers)
    return _U16.pack(len(raw)) + raw + body


def encode_pub_partition(topic: str, partition: int, body: bytes) -> bytes:
    """``PUB <topic> <partition>\\n`` [size] [body]."""
    return _line(b"PUB", topic, partition) + _I32.pack(len(body)) + body


def _mpub(verb: bytes, topic: str, partition: int | None, messages: Sequence[bytes]) -> bytes:
    payload = _I32.pack(len(messages)) + b"".join(_I32.pack(len(m)) + m for m in messages)
    return _line(verb, topic, partition) + _I32.pack(len(payload)) + payload


def encode_mpub_partition(topic: str, partition: int, bodies: Sequence[bytes]) -> bytes:
    """``MPUB <topic> <partition>\\n`` [size] [count] then [size][body] per message."""
    return _mpub(b"MPUB", topic, partition, bodies)


def encode_pub_ext(
    topic: str, headers: Mapping[str, str] | bytes, body: bytes, partition: int | None = None
) -> bytes:
    """``PUB_EXT <topic> [<partition>]\\n`` [size] [uint16 header length] [header] [body]."""
    message = ext_message(headers, body)
    return _line(b"PUB_EXT", topic, partition) + _I32.pack(len(message)) + message


def encode_mpub_ext(
    topic: str,
    messages: Sequence[tuple[Mapping[str, str] | bytes, bytes]],
    partition: int | None = None,
) -> bytes:
    """``MPUB_EXT <topic> [<partition>]\\n``: MPUB's layout, each message as in PUB_EXT."""
    return _mpub(b"MPUB_EXT", topic, partition, [ext_message(h, b) for h, b in messages])


def encode_pub_trace(topic: str, trace_id: int, body: bytes, partition: int | None = None) -> bytes:
    """``PUB_TRACE <topic> [<partition>]\\n`` [size] [uint64 trace id] [body]."""
    message = _U64.pack(trace_id) + body
    return _line(b"PUB_TRACE", topic, partition) + _I32.pack(len(message)) + message


def encode_mpub_trace(
    topic: str, messages: Sequence[tuple[int, bytes]], partition: int | None = None
) -> bytes:
    """``MPUB_TRACE <topic> [<partition>]\\n``: MPUB's layout, each message trace id + body."""
    return _mpub(b"MPUB_TRACE", topic, partition, [_U64.pack(t) + b for t, b in messages])


def encode_extended(cmd: PubExt | MpubExt | PubTrace | MpubTrace, partition: int) -> bytes:
    """A parsed extended publish encoded again, naming ``partition`` (a forward to its
    leader: the same messages, headers and trace ids)."""
    match cmd:
        case PubExt(topic, header, body):
            return encode_pub_ext(topic, header, body, partition)
        case MpubExt(topic, headers, bodies):
            return encode_mpub_ext(topic, list(zip(headers, bodies, strict=True)), partition)
        case PubTrace(topic, trace_id, body):
            return encode_pub_trace(topic, trace_id, body, partition)
        case MpubTrace(topic, trace_ids, bodies):
            return encode_mpub_trace(topic, list(zip(trace_ids, bodies, strict=True)), partition)


def encode_sub_partition(
    topic: str,
    channel: str,
    partition: int | None = None,
    *,
    ordered: bool = False,
    advanced: bool = False,
    start: str = "",
) -> bytes:
    """``SUB``/``SUB_ORDERED <topic> <channel> [<partition>]\\n``, or with ``advanced``
    (implied by a ``start`` position, ``type:value``, which needs a partition)
    ``SUB_ADVANCED <topic> <channel> [<partition> [<start>]]\\n``."""
    if not valid_channel_name(channel):
        raise ValueError(f"invalid channel name {channel!r}")
    if start and (partition is None or ordered):
        raise ValueError("a start position needs a partition and an unordered SUB")
    verb = b"SUB_ADVANCED" if advanced or start else b"SUB_ORDERED" if ordered else b"SUB"
    line = _line(verb, topic, None)[:-1] + b" " + channel.encode("ascii")
    if partition is not None:
        line += b" %d" % partition
    if start:
        line += b" " + start.encode("ascii")
    return line + b"\n"
