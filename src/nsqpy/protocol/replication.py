"""Replication between nsqd (docs/replication.md, "Replication protocol"): the sans-IO codec of the
link a follower opens to its leader's ``--rpc-address``, one link per partition.

Owns the framing, the frames (frozen dataclasses), the incremental ``ReplicationReader``
(bytes in, frames out) and the encoders (frames in, bytes out; an APPEND as a list of
buffers for ``writev`` that never copies its batches). Knows nothing of sessions, logs or
sockets: an APPEND's batches are opaque bytes here (``nsqpy.storage.raw.RawBatch.data``,
the log's batches as stored, CRCs included). Imports only the standard library,
nsqpy.errors and nsqpy.protocol; never asyncio, sockets, storage or the broker.

The same framing both ways (a follower pulls on the link it opened, the leader pushes on
it); all integers unsigned big-endian, every string ``length u16 | UTF-8``::

    stream = magic "NQR1" ("NQR" and the version "1"; each side sends it first) | frame*
    frame  = size u32 (the bytes after it: 1 + payload) | type u8 | payload

    type  frame        payload
    1     HELLO        node_id str | cluster_id str | topic str | partition u16
                       | leader_epoch u32 (the epoch the sender believes current)
                       [| incarnation str (the sender's, as its node key in etcd says;
                       absent from a sender of an older version: "")]
    2     APPEND       leader_epoch u32 | start_offset u64 | committed_offset u64
                       | count u32 | batches (the rest of the frame: whole log batches
                       from start_offset holding count records; none when count is 0)
    3     ACK          leader_epoch u32 | end_offset u64 | durable_offset u64 (fsynced)
    4     FETCH        leader_epoch u32 | from_offset u64 | max_bytes u32
    5     EPOCH_QUERY  epoch u32
    6     EPOCH_END    epoch u32 | end_offset u64 (both all ones: no such epoch)
    7     CURSORS      leader_epoch u32 | topic str | partition u16 | full u8 (0 or 1)
                       | channels u32 | channel * channels
                       | seq u64
              channel = name str | confirmed u64 | flags u16 | ranges u32
                       | (start u64, end u64) * ranges | deferred u32
                       | (offset u64, deliver_at u64, attempts u16) * deferred
    8     ERROR        leader_epoch u32 (the sender's, 0 = unknown) | code str | text str
    9     HEARTBEAT    (empty)
    10    CURSORS_ACK  leader_epoch u32 | seq u64 (the CURSORS the follower has taken)

The conversation: the follower sends the magic and HELLO; the leader answers the magic
and its HELLO, or ERROR (``E_NOT_LEADER``, ``E_STALE_EPOCH``, ``E_CLUSTER_MISMATCH``,
``E_NOT_REPLICA``: also a HELLO whose incarnation is not the one etcd has for that
node, so a stranger cannot take a replica's place by its node id) and closes. A rejoining follower asks EPOCH_QUERY(its last epoch) and
gets EPOCH_END: as Kafka's OffsetsForLeaderEpoch, the largest epoch at most the one asked
for that the leader has, and its end (the first offset after its last record, i.e. where
the next epoch starts, or the leader's end for its current epoch); ``EpochEnd(-1, -1)``
(``nsqpy.storage.epochs.NO_EPOCH``, whose ``end_offset_for_epoch`` computes the answer)
when the leader has no such epoch; the follower truncates past that point. A catch-up
follower sends FETCH and gets an APPEND (count 0 when there is nothing yet); an ISR
follower gets APPENDs pushed, pipelined, and ACKs each with its end and durable offsets.
An APPEND's ``committed_offset`` is the leader's high watermark; an APPEND with
no batches only advances it. CURSORS (leader to follower) replace the named channels'
cursors (``ranges`` are confirmed ``[start, end)`` above ``confirmed``; ``flags`` bits
``CHANNEL_PAUSED``, ``CHANNEL_DELETED``, the rest carried unchanged) and the channels'
delayed stores (``deferred``: the entries in it, ``deliver_at`` in ns of the wall clock;
their offsets count as confirmed, as the leader's cursor confirms them); with ``full`` they
are every channel, and the follower drops the others. ``seq`` numbers a link's CURSORS (1 up);
the follower answers CURSORS_ACK with the ``seq`` of the last one it took, once its
records are flushed and the cursors adopted (an ordered channel delivers its next message
only once every ISR follower has the cursor that finished the last one). HEARTBEAT keeps
an idle link alive.
Every frame with a ``leader_epoch`` below the receiver's is refused with ERROR
``E_STALE_EPOCH`` carrying the receiver's epoch.

Errors: a peer that breaks the framing raises a ``ReplicationProtocolError`` (code and
description name the bad value and the limit; the link cannot be resynchronised, so the
error is sticky and the receiver answers ERROR with its code, then closes); a size over the
reader's limit (``DEFAULT_MAX_FRAME_SIZE``: 16 MiB of batches and 1 KiB of header room;
raise it where one batch may be larger, e.g. a ``--max-body-size`` over 16 MiB) is refused
as soon as the size field is read, an unknown type as soon as the type byte is, before
any body is buffered. An encoder given a value its field cannot hold (a local bug) raises
ValueError naming the frame, the field and the value.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import TypeAlias

from nsqpy.errors import ProtocolError

MAGIC = b"NQR1"
MAX_BATCH_BYTES = 16 << 20  # the batches one APPEND may carry by default (FETCH max_bytes)
DEFAULT_MAX_FRAME_SIZE = MAX_BATCH_BYTES + 1024  # a frame's size field, header room included
MAX_STRING = 0xFFFF
_U32_MAX = 0xFFFF_FFFF  # EPOCH_END's epoch and end_offset for -1: no such epoch
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

CHANNEL_PAUSED = 0x0001
CHANNEL_DELETED = 0x0002

# ERROR codes of the conversation (the reader's own codes are on its exception classes)
E_STALE_EPOCH = "E_STALE_EPOCH"
E_OFFSET_MISMATCH = "E_OFFSET_MISMATCH"
E_NOT_LEADER = "E_NOT_LEADER"
E_NOT_REPLICA = "E_NOT_REPLICA"
E_CLUSTER_MISMATCH = "E_CLUSTER_MISMATCH"


class FrameType(IntEnum):
    HELLO = 1
    APPEND = 2
    ACK = 3
    FETCH = 4
    EPOCH_QUERY = 5
    EPOCH_END = 6
    CURSORS = 7
    ERROR = 8
    HEARTBEAT = 9
    CURSORS_ACK = 10


class ReplicationProtocolError(ProtocolError):
    """The peer broke the replication protocol (always the remote side's fault; fatal)."""

    code = "E_BAD_FRAME"


class BadMagic(ReplicationProtocolError):
    """The stream does not start with ``NQR1`` (another protocol or another version)."""

    code = "E_BAD_MAGIC"


class UnknownFrameType(ReplicationProtocolError):
    code = "E_BAD_FRAME_TYPE"


class FrameTooLarge(ReplicationProtocolError):
    code = "E_FRAME_TOO_LARGE"


class MalformedFrame(ReplicationProtocolError):
    """Size 0, a field or length running past the frame, bad UTF-8, bytes left over."""

    code = "E_BAD_FRAME"


# -- frames ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hello:
    node_id: str
    cluster_id: str
    topic: str
    partition: int
    leader_epoch: int
    incarnation: str = ""  # this start of the sender (``NodeInfo.incarnation``)


@dataclass(frozen=True, slots=True)
class Append:
    """``count`` records from ``start_offset`` in ``data`` (whole batches as the log stores
    them); the leader's ``committed_offset``. No data and count 0: only the watermark."""

    leader_epoch: int
    start_offset: int
    committed_offset: int
    count: int
    data: bytes = field(repr=False)

    @property
    def next_offset(self) -> int:
        return self.start_offset + self.count


@dataclass(frozen=True, slots=True)
class Ack:
    leader_epoch: int
    end_offset: int
    durable_offset: int


@dataclass(frozen=True, slots=True)
class Fetch:
    """A follower's pull from ``from_offset``, its log's end; ``last_epoch``: the epoch of
    its last record there (its ``last_epoch``, 0 for none), which the leader checks
    against its own history before it counts the follower as holding ``from_offset``."""

    leader_epoch: int
    from_offset: int
    max_bytes: int
    last_epoch: int = 0


@dataclass(frozen=True, slots=True)
class EpochQuery:
    epoch: int


@dataclass(frozen=True, slots=True)
class EpochEnd:
    """The leader's answer to EPOCH_QUERY; ``EpochEnd(-1, -1)``: no epoch at or below the
    one asked (``nsqpy.storage.epochs.NO_EPOCH``), sent as all ones."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class ChannelCursor:
    name: str
    confirmed: int
    flags: int = 0
    ranges: tuple[tuple[int, int], ...] = ()
    deferred: tuple[tuple[int, int, int], ...] = ()  # (offset, deliver_at ns, attempts)


@dataclass(frozen=True, slots=True)
class Cursors:
    leader_epoch: int
    topic: str
    partition: int
    channels: tuple[ChannelCursor, ...]
    full: bool = False
    seq: int = 0


@dataclass(frozen=True, slots=True)
class CursorsAck:
    leader_epoch: int
    seq: int


@dataclass(frozen=True, slots=True)
class ErrorFrame:
    leader_epoch: int
    code: str
    text: str = ""

    @classmethod
    def of(cls, err: ProtocolError, leader_epoch: int = 0) -> ErrorFrame:
        """The ERROR frame reporting ``err`` (e.g. what a ReplicationReader raised)."""
        return cls(leader_epoch, err.code, err.description)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    pass


ReplicationFrame: TypeAlias = (
    Hello
    | Append
    | Ack
    | Fetch
    | EpochQuery
    | EpochEnd
    | Cursors
    | CursorsAck
    | ErrorFrame
    | Heartbeat
)
Buffer: TypeAlias = bytes | bytearray | memoryview

# -- encoding -------------------------------------------------------------------------------

_SIZE = struct.Struct(">I")
_HEAD = struct.Struct(">IB")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_APPEND = struct.Struct(">IBIQQI")  # frame header + APPEND's fixed fields
_APPEND_FIELDS = struct.Struct(">IQQI")
_ACK = struct.Struct(">IQQ")
_FETCH = struct.Struct(">IQII")
_EPOCH_END = struct.Struct(">IQ")
_HELLO_TAIL = struct.Struct(">HI")
_CURSORS_MID = struct.Struct(">HBI")
_CHANNEL = struct.Struct(">QHI")
_RANGE = struct.Struct(">QQ")
_DEFERRED = struct.Struct(">QQH")
_MIN_CHANNEL = 2 + _CHANNEL.size + _U32.size  # an empty name, no ranges, nothing deferred
# the frames of fixed size: their payload struct, their fields in the dataclass's order
_FIXED: dict[
    FrameType, tuple[struct.Struct, type[Ack | Fetch | EpochQuery | EpochEnd | CursorsAck]]
] = {
    FrameType.ACK: (_ACK, Ack),
    FrameType.FETCH: (_FETCH, Fetch),
    FrameType.EPOCH_QUERY: (_U32, EpochQuery),
    FrameType.EPOCH_END: (_EPOCH_END, EpochEnd),
    FrameType.CURSORS_ACK: (_EPOCH_END, CursorsAck),
}
_FIELD_NAMES = {cls: tuple(f.name for f in fields(cls)) for _, cls in _FIXED.values()}
_BITS = {"B": 8, "H": 16, "I": 32, "Q": 64}


def _pack(st: struct.Struct, what: str, names: Sequence[str], *values: int) -> bytes:
    try:
        return st.pack(*values)
    except struct.error:
        for code, name, value in zip(st.format.lstrip(">"), names, values, strict=True):
            bits = _BITS[code]
            if not isinstance(value, int) or not 0 <= value < 1 << bits:
                raise ValueError(f"{what} {name}={value!r} is not an unsigned {bits}-bit integer")
        raise


def _str(what: str, name: str, value: str) -> bytes:
    try:
        raw = value.encode()
    except UnicodeEncodeError as err:
        raise ValueError(f"{what} {name} is not encodable as UTF-8: {err.reason}") from None
    if len(raw) > MAX_STRING:
        raise ValueError(f"{what} {name} is {len(raw)} bytes UTF-8, over {MAX_STRING}")
    return _U16.pack(len(raw)) + raw


def _frame(frame_type: FrameType, payload: bytes) -> bytes:
    if len(payload) >= _U32_MAX:
        raise ValueError(f"{frame_type.name} payload of {len(payload)} bytes overflows u32")
    return _HEAD.pack(1 + len(payload), frame_type) + payload


def encode_hello(
    node_id: str,
    cluster_id: str,
    topic: str,
    partition: int,
    leader_epoch: int,
    incarnation: str = "",
) -> bytes:
    names = ("partition", "leader_epoch")
    return _frame(
        FrameType.HELLO,
        _str("HELLO", "node_id", node_id)
        + _str("HELLO", "cluster_id", cluster_id)
        + _str("HELLO", "topic", topic)
        + _pack(_HELLO_TAIL, "HELLO", names, partition, leader_epoch)
        + (_str("HELLO", "incarnation", incarnation) if incarnation else b""),
    )


def encode_append(
    leader_epoch: int, start_offset: int, committed_offset: int, count: int, data: Buffer
) -> list[Buffer]:
    """[header, data] (``data`` itself, not a copy), or [header] when there are no batches."""
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if (count == 0) != (size == 0):
        raise ValueError(f"APPEND count={count} with {size} bytes of batches")
    if 1 + _APPEND_FIELDS.size + size > _U32_MAX:
        raise ValueError(f"APPEND of {size} bytes of batches overflows u32")
    names = ("size", "type", "leader_epoch", "start_offset", "committed_offset", "count")
    values = (1 + _APPEND_FIELDS.size + size, FrameType.APPEND, leader_epoch, start_offset)
    header = _pack(_APPEND, "APPEND", names, *values, committed_offset, count)
    if start_offset + count > _U64_MAX:
        raise ValueError(f"APPEND start_offset={start_offset} + count={count} overflows u64")
    return [header, data] if size else [header]


def _encode_fixed(frame_type: FrameType, *values: int) -> bytes:
    st, cls = _FIXED[frame_type]
    return _frame(frame_type, _pack(st, frame_type.name, _FIELD_NAMES[cls], *values))


def encode_ack(leader_epoch: int, end_offset: int, durable_offset: int) -> bytes:
    return _encode_fixed(FrameType.ACK, leader_epoch, end_offset, durable_offset)


def encode_fetch(leader_epoch: int, from_offset: int, max_bytes: int, last_epoch: int = 0) -> bytes:
    return _encode_fixed(FrameType.FETCH, leader_epoch, from_offset, max_bytes, last_epoch)


def encode_epoch_query(epoch: int) -> bytes:
    return _encode_fixed(FrameType.EPOCH_QUERY, epoch)


def encode_cursors_ack(leader_epoch: int, seq: int) -> bytes:
    return _encode_fixed(FrameType.CURSORS_ACK, leader_epoch, seq)


def encode_epoch_end(epoch: int, end_offset: int) -> bytes:
    """-1 for either field (``NO_EPOCH``) goes on the wire as all ones."""
    epoch = _U32_MAX if epoch == -1 else epoch
    return _encode_fixed(FrameType.EPOCH_END, epoch, _U64_MAX if end_offset == -1 else end_offset)


def encode_cursors(
    leader_epoch: int,
    topic: str,
    partition: int,
    channels: Sequence[ChannelCursor],
    full: bool = False,
    seq: int = 0,
) -> bytes:
    parts = [
        _pack(_U32, "CURSORS", ("leader_epoch",), leader_epoch),
        _str("CURSORS", "topic", topic),
        _pack(
            _CURSORS_MID,
            "CURSORS",
            ("partition", "full", "channels"),
            partition,
            full,
            len(channels),
        ),
    ]
    names = ("confirmed", "flags", "ranges")
    for channel in channels:
        what = f"CURSORS channel {channel.name!r}"
        parts.append(_str(what, "name", channel.name))
        values = (channel.confirmed, channel.flags, len(channel.ranges))
        parts.append(_pack(_CHANNEL, what, names, *values))
        parts += [_pack(_RANGE, what, ("range start", "range end"), *r) for r in channel.ranges]
        parts.append(_pack(_U32, what, ("deferred",), len(channel.deferred)))
        entry = ("deferred offset", "deliver_at", "attempts")
        parts += [_pack(_DEFERRED, what, entry, *d) for d in channel.deferred]
    parts.append(_pack(_U64, "CURSORS", ("seq",), seq))
    return _frame(FrameType.CURSORS, b"".join(parts))


def cursors_with_seq(frame: bytes, seq: int) -> bytes:
    """A CURSORS frame of ``encode_cursors`` with another ``seq`` (its last field): the
    same cursors sent on several links are encoded once."""
    return frame[: -_U64.size] + _pack(_U64, "CURSORS", ("seq",), seq)


def encode_error(leader_epoch: int, code: str, text: str = "") -> bytes:
    """An ERROR frame; a ``text`` over 65535 bytes of UTF-8 is cut (at a character)."""
    raw = text.encode(errors="replace")
    if len(raw) > MAX_STRING:
        raw = raw[:MAX_STRING].decode(errors="ignore").encode()  # drop a character cut in two
    return _frame(
        FrameType.ERROR,
        _pack(_U32, "ERROR", ("leader_epoch",), leader_epoch)
        + _str("ERROR", "code", code)
        + _U16.pack(len(raw))
        + raw,
    )


HEARTBEAT_FRAME = _frame(FrameType.HEARTBEAT, b"")


def encode(frame: ReplicationFrame) -> list[Buffer]:
    """Any frame as buffers for ``writev`` (an APPEND's data is not copied)."""
    match frame:
        case Append(epoch, start, committed, count, data):
            return encode_append(epoch, start, committed, count, data)
        case Hello(node_id, cluster_id, topic, partition, epoch, incarnation):
            return [encode_hello(node_id, cluster_id, topic, partition, epoch, incarnation)]
        case Ack(epoch, end, durable):
            return [encode_ack(epoch, end, durable)]
        case Fetch(epoch, start, max_bytes, last_epoch):
            return [encode_fetch(epoch, start, max_bytes, last_epoch)]
        case EpochQuery(epoch):
            return [encode_epoch_query(epoch)]
        case EpochEnd(epoch, end):
            return [encode_epoch_end(epoch, end)]
        case Cursors(epoch, topic, partition, channels, full, seq):
            return [encode_cursors(epoch, topic, partition, channels, full, seq)]
        case CursorsAck(epoch, seq):
            return [encode_cursors_ack(epoch, seq)]
        case ErrorFrame(epoch, code, text):
            return [encode_error(epoch, code, text)]
        case Heartbeat():
            return [HEARTBEAT_FRAME]
    raise TypeError(f"not a replication frame: {frame!r}")


# -- decoding -------------------------------------------------------------------------------


class _Fields:
    """One payload's fields read in order, each length checked against the frame's end."""

    __slots__ = ("buf", "end", "kind", "pos", "start")

    def __init__(self, buf: bytearray, start: int, end: int, kind: str) -> None:
        self.buf, self.start, self.pos, self.end, self.kind = buf, start, start, end, kind

    @property
    def left(self) -> int:
        return self.end - self.pos

    def take(self, n: int, what: str) -> int:
        pos = self.pos
        if n > self.end - pos:
            raise MalformedFrame(
                f"{self.kind} {what} ({n} bytes at payload byte {pos - self.start}) runs past"
                f" the frame's {self.end - self.start} bytes"
            )
        self.pos = pos + n
        return pos

    def unpack(self, st: struct.Struct, what: str) -> tuple[int, ...]:
        return st.unpack_from(self.buf, self.take(st.size, what))

    def string(self, what: str) -> str:
        (n,) = self.unpack(_U16, f"{what} length")
        at = self.take(n, what)
        try:
            return self.buf[at : at + n].decode()
        except UnicodeDecodeError as err:
            raise MalformedFrame(
                f"{self.kind} {what} is not UTF-8 ({err.reason} at byte {err.start})"
            ) from None

    def done(self) -> None:
        if self.pos != self.end:
            raise MalformedFrame(f"{self.kind} has {self.end - self.pos} bytes after its fields")


def _decode_hello(buf: bytearray, start: int, end: int) -> Hello:
    f = _Fields(buf, start, end, "HELLO")
    node_id, cluster_id, topic = f.string("node_id"), f.string("cluster_id"), f.string("topic")
    partition, epoch = f.unpack(_HELLO_TAIL, "partition and leader_epoch")
    incarnation = f.string("incarnation") if f.pos < f.end else ""
    f.done()
    return Hello(node_id, cluster_id, topic, partition, epoch, incarnation)


def _decode_append(buf: bytearray, start: int, end: int) -> Append:
    at = start + _APPEND_FIELDS.size
    if at > end:
        raise MalformedFrame(
            f"APPEND payload is {end - start} bytes, shorter than its {_APPEND_FIELDS.size}"
        )
    epoch, offset, committed, count = _APPEND_FIELDS.unpack_from(buf, start)
    if (count == 0) != (at == end):
        raise MalformedFrame(f"APPEND count={count} with {end - at} bytes of batches")
    if offset + count > _U64_MAX:
        raise MalformedFrame(f"APPEND start_offset={offset} + count={count} overflows u64")
    with memoryview(buf) as view:
        data = view[at:end].tobytes()
    return Append(epoch, offset, committed, count, data)


def _decode_cursors(buf: bytearray, start: int, end: int) -> Cursors:
    f = _Fields(buf, start, end, "CURSORS")
    (epoch,) = f.unpack(_U32, "leader_epoch")
    topic = f.string("topic")
    partition, full, n = f.unpack(_CURSORS_MID, "partition, full and channels")
    if full > 1:
        raise MalformedFrame(f"CURSORS full={full}, expected 0 or 1")
    if n * _MIN_CHANNEL > f.left:
        raise MalformedFrame(f"CURSORS says {n} channels, which cannot fit in {f.left} bytes")
    channels = []
    for _ in range(n):
        name = f.string("channel name")
        confirmed, flags, n_ranges = f.unpack(_CHANNEL, f"channel {name!r} fields")
        at = f.take(n_ranges * _RANGE.size, f"channel {name!r} {n_ranges} ranges")
        stop = at + n_ranges * _RANGE.size
        ranges = tuple((s, e) for s, e in _RANGE.iter_unpack(buf[at:stop]))
        (n_deferred,) = f.unpack(_U32, f"channel {name!r} deferred")
        at = f.take(n_deferred * _DEFERRED.size, f"channel {name!r} {n_deferred} deferred")
        stop = at + n_deferred * _DEFERRED.size
        deferred = tuple(_DEFERRED.iter_unpack(buf[at:stop]))
        channels.append(ChannelCursor(name, confirmed, flags, ranges, deferred))
    (seq,) = f.unpack(_U64, "seq")
    f.done()
    return Cursors(epoch, topic, partition, tuple(channels), bool(full), seq)


def _decode_error(buf: bytearray, start: int, end: int) -> ErrorFrame:
    f = _Fields(buf, start, end, "ERROR")
    (epoch,) = f.unpack(_U32, "leader_epoch")
    code, text = f.string("code"), f.string("text")
    f.done()
    return ErrorFrame(epoch, code, text)


def _fixed_decoder(frame_type: FrameType) -> Callable[[bytearray, int, int], ReplicationFrame]:
    st, cls = _FIXED[frame_type]

    def decode(buf: bytearray, start: int, end: int) -> ReplicationFrame:
        if end - start != st.size:
            raise MalformedFrame(
                f"{frame_type.name} payload is {end - start} bytes, expected {st.size}"
            )
        return cls(*st.unpack_from(buf, start))

    return decode


_EPOCH_END_FIELDS = _fixed_decoder(FrameType.EPOCH_END)


def _decode_epoch_end(buf: bytearray, start: int, end: int) -> ReplicationFrame:
    frame = _EPOCH_END_FIELDS(buf, start, end)
    assert isinstance(frame, EpochEnd)
    epoch, end_offset = frame.epoch, frame.end_offset
    if epoch == _U32_MAX or end_offset == _U64_MAX:
        return EpochEnd(
            -1 if epoch == _U32_MAX else epoch, -1 if end_offset == _U64_MAX else end_offset
        )
    return frame


_HEARTBEAT = Heartbeat()


def _decode_heartbeat(buf: bytearray, start: int, end: int) -> Heartbeat:
    if end != start:
        raise MalformedFrame(f"HEARTBEAT payload is {end - start} bytes, expected 0")
    return _HEARTBEAT


_DECODERS: dict[int, Callable[[bytearray, int, int], ReplicationFrame]] = {
    FrameType.HELLO: _decode_hello,
    FrameType.APPEND: _decode_append,
    **{frame_type: _fixed_decoder(frame_type) for frame_type in _FIXED},
    FrameType.EPOCH_END: _decode_epoch_end,
    FrameType.CURSORS: _decode_cursors,
    FrameType.ERROR: _decode_error,
    FrameType.HEARTBEAT: _decode_heartbeat,
}
_COMPACT_AT = 1 << 16


class ReplicationReader:
    """Incremental reader of one direction of a replication link.

    ``feed`` buffers bytes; ``next`` returns one frame, or None until more bytes come.
    A size over ``max_frame_size`` or an unknown type is refused as soon as the header is
    read, so at most ``4 + max_frame_size`` bytes of one frame are ever buffered. Errors
    are ReplicationProtocolError and sticky: once raised, ``next`` raises it again.
    """

    __slots__ = ("_buf", "_error", "_need_magic", "_pos", "max_frame_size")

    def __init__(
        self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, expect_magic: bool = True
    ) -> None:
        self.max_frame_size = max_frame_size
        self._need_magic = expect_magic
        self._buf = bytearray()
        self._pos = 0
        self._error: ReplicationProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as a frame."""
        return len(self._buf) - self._pos

    def feed(self, data: Buffer) -> None:
        """Add received bytes (copied: the caller may reuse its buffer)."""
        buf, pos = self._buf, self._pos
        if pos and (pos >= _COMPACT_AT or pos == len(buf)):
            del buf[:pos]
            self._pos = 0
        buf += data

    def frames(self) -> Iterator[ReplicationFrame]:
        """Every whole frame buffered so far."""
        while (frame := self.next()) is not None:
            yield frame

    def next(self) -> ReplicationFrame | None:
        """One frame, or None when more bytes are needed; raises ReplicationProtocolError."""
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except ReplicationProtocolError as err:
            self._error = err
            raise

    def _next(self) -> ReplicationFrame | None:
        buf, pos = self._buf, self._pos
        avail = len(buf) - pos
        if self._need_magic:
            head = bytes(buf[pos : pos + 4])
            if not MAGIC.startswith(head):
                raise BadMagic(_bad_magic(head))
            if avail < 4:
                return None
            pos += 4
            avail -= 4
            self._pos = pos
            self._need_magic = False
        if avail < 4:
            return None
        (size,) = _SIZE.unpack_from(buf, pos)
        if size == 0:
            raise MalformedFrame("frame size 0: a frame has at least its type byte")
        if size > self.max_frame_size:
            raise FrameTooLarge(f"frame size {size} over the limit of {self.max_frame_size}")
        if avail < 5:
            return None
        decode = _DECODERS.get(buf[pos + 4])
        if decode is None:
            raise UnknownFrameType(f"unknown frame type {buf[pos + 4]}")
        if avail < 4 + size:
            return None
        frame = decode(buf, pos + 5, pos + 4 + size)
        self._pos = pos + 4 + size
        return frame


def _bad_magic(head: bytes) -> str:
    if len(head) == 4 and head[:3] == MAGIC[:3]:
        return f"replication protocol version {head[3:]!r} is not supported (only {MAGIC!r})"
    return f"bad magic {head!r}, expected {MAGIC!r}"
