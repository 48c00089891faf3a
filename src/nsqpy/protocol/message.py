"""Message frames (SPEC 1.4) and nsqpy's message IDs.

A message frame's data is ``[int64 timestamp ns][uint16 attempts][16-byte id][body]``. nsqpy's
ID is 16 lowercase hex characters of a u64 holding the partition in its top 10 bits and the
offset in the low 54 bits, so FIN/REQ/TOUCH need no lookup table. A client that negotiated
``extend_support`` (youzan's extension) gets extended frames instead: after the ID come a
uint8 extension version and, unless it is 0 (no extension), a uint16 length and that many
bytes of extension (version 4: a JSON object of headers), then the body. Owns encoding
(server) and decoding (client) of message frames and IDs. Imports only the standard library
and nsqpy.errors.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from nsqpy.errors import BadMessage, InvalidError

MESSAGE_HEADER = 26
MSG_ID_LENGTH = 16
PARTITION_BITS = 10
OFFSET_BITS = 54
MAX_PARTITION = (1 << PARTITION_BITS) - 1
MAX_OFFSET = (1 << OFFSET_BITS) - 1
_OFFSET_MASK = MAX_OFFSET

# size, frame type (2), timestamp, attempts: everything before the ID.
_FRAME_HEAD = struct.Struct(">iiqH")
_MSG_HEAD = struct.Struct(">qH")
_FRAME_OVERHEAD = 4 + MESSAGE_HEADER  # the size field counts the type field and the header
# For hot loops that build a frame inline: FRAME_HEAD_ID.pack(FRAME_OVERHEAD + len(body), 2,
# ts, attempts, id) + body is what ``encode_message_frame`` makes (size, type, header, ID).
FRAME_HEAD_ID = struct.Struct(">iiqH16s")
FRAME_OVERHEAD = _FRAME_OVERHEAD
_ID_END = 8 + MESSAGE_HEADER  # where the body starts in a whole frame (size and type first)
_SIZE = struct.Struct(">i")
_EXT_HEAD = struct.Struct(">BH")
# youzan's detail, in front of the body of a message sent to a SUB_ORDERED subscriber: the
# message's offset in its partition's queue and its size
DETAIL = struct.Struct(">QI")
QUEUE_SIZE = 1  # a message's size in the queue: the distance from its offset to the next's
BINARY_ID = struct.Struct(">QQ")  # youzan's message ID on the wire: the ID, the trace id

# Extension versions of youzan's extended message frame.
NO_EXT_VERSION = 0
JSON_HEADER_EXT_VERSION = 4
EXT_VERSIONS = frozenset((NO_EXT_VERSION, JSON_HEADER_EXT_VERSION))
MAX_EXT_LENGTH = 0xFFFF


def py_message_frame(timestamp: int, attempts: int, id_value: int, body: bytes) -> bytes:
    """A whole message frame (size, type, timestamp, attempts, the 16-hex-digit ID of
    ``id_value``, body): the reference for the C ``message_frame``, and its fallback."""
    msg_id = b"%016x" % id_value
    return FRAME_HEAD_ID.pack(_FRAME_OVERHEAD + len(body), 2, timestamp, attempts, msg_id) + body


def py_hex_ids(buf: bytes | bytearray, start: int, end: int, step: int) -> list[int]:
    """The 16 hex digits at ``buf[at + 4 : at + 20]`` for each ``at`` in ``range(start,
    end, step)`` as integers (the IDs of a run of FIN lines): the reference for the C
    ``hex_ids``, and its fallback."""
    return [int(buf[at + 4 : at + 20], 16) for at in range(start, end, step)]


try:  # (the C forms are optional: a machine without a compiler installs without them)
    from nsqpy.protocol._frames import hex_ids as hex_ids
    from nsqpy.protocol._frames import message_frame as message_frame
except ImportError:  # pragma: no cover - exercised where the extension is not built
    message_frame = py_message_frame
    hex_ids = py_hex_ids


def encode_message_id(partition: int, offset: int) -> bytes:
    """The 16-character lowercase hex ID of ``offset`` in ``partition``."""
    if not 0 <= partition <= MAX_PARTITION:
        raise ValueError(f"partition {partition} out of range 0-{MAX_PARTITION}")
    if not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"offset {offset} out of range 0-{MAX_OFFSET}")
    return b"%016x" % ((partition << OFFSET_BITS) | offset)


def try_decode_message_id(msg_id: bytes | bytearray) -> tuple[int, int] | None:
    """``(partition, offset)``, or None unless ``msg_id`` is exactly 16 lowercase hex chars.

    nsqd accepts any 16 bytes on FIN/REQ/TOUCH and answers an unknown one with the
    non-fatal E_FIN_FAILED/E_REQ_FAILED/E_TOUCH_FAILED; servers use this form for that.
    """
    if len(msg_id) != MSG_ID_LENGTH:
        return None
    try:
        value = int(msg_id, 16)
    except ValueError:
        return None
    if b"%016x" % value != msg_id:  # rejects upper case, "0x", "_", "+", spaces
        return None
    return value >> OFFSET_BITS, value & _OFFSET_MASK


def decode_message_id(msg_id: bytes | bytearray) -> tuple[int, int]:
    """``(partition, offset)``; InvalidError("invalid message ID") for anything else."""
    decoded = try_decode_message_id(msg_id)
    if decoded is None:
        raise InvalidError("invalid message ID")
    return decoded


def encode_message_frame(timestamp_ns: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    """A whole message frame (size, type 2, header, body) ready to write."""
    return b"".join(
        (_FRAME_HEAD.pack(_FRAME_OVERHEAD + len(body), 2, timestamp_ns, attempts), msg_id, body)
    )


def encode_message_frames(messages: Iterable[tuple[int, int, bytes, bytes]]) -> bytes:
    """Several message frames in one buffer, from ``(timestamp_ns, attempts, id, body)``."""
    pack = _FRAME_HEAD.pack
    parts: list[bytes] = []
    append = parts.append
    for timestamp_ns, attempts, msg_id, body in messages:
        append(pack(_FRAME_OVERHEAD + len(body), 2, timestamp_ns, attempts))
        append(msg_id)
        append(body)
    return b"".join(parts)


def extend_frame(frame: bytes, version: int, ext: bytes) -> bytes:
    """The extended form of a whole message frame (as ``encode_message_frame`` makes it).

    Version 0 carries no extension (one byte); any other version carries ``ext`` with its
    uint16 length. ValueError when ``ext`` is longer than 65535 bytes.
    """
    if version == NO_EXT_VERSION:
        head = b"\x00"
    else:
        if len(ext) > MAX_EXT_LENGTH:
            raise ValueError(f"extension of {len(ext)} bytes > {MAX_EXT_LENGTH}")
        head = _EXT_HEAD.pack(version, len(ext)) + ext
    size = _SIZE.unpack_from(frame)[0] + len(head)
    return b"".join((_SIZE.pack(size), frame[4:_ID_END], head, frame[_ID_END:]))


def binary_id_frame(frame: bytes, trace_id: int) -> bytes:
    """A whole message frame with its ID in youzan's binary form: the message ID as a
    uint64, then the trace id as a uint64 (what youzan's nsqd sends and its clients read
    the trace id from). The form an ``extend_support`` client is sent."""
    at = _ID_END - MSG_ID_LENGTH
    value = int(frame[at:_ID_END], 16)
    return b"".join((frame[:at], BINARY_ID.pack(value, trace_id), frame[_ID_END:]))


def detail_frame(frame: bytes, *, extended: bool) -> bytes:
    """A whole message frame with youzan's detail put in front of its body (after the
    extension, for an ``extended`` frame, whose ID is binary): the offset from the frame's
    message ID and the message's size in the queue, which is 1 (offsets count messages;
    youzan's count bytes, and the next message is at offset + size on both). The form a
    ``SUB_ORDERED`` subscriber is sent."""
    at = _ID_END
    raw_id = frame[_ID_END - MSG_ID_LENGTH : _ID_END]
    if extended:
        at += 1 if frame[at] == NO_EXT_VERSION else 3 + _EXT_HEAD.unpack_from(frame, at)[1]
        offset = BINARY_ID.unpack(raw_id)[0] & _OFFSET_MASK
    else:
        decoded = try_decode_message_id(raw_id)
        offset = decoded[1] if decoded is not None else 0
    size = _SIZE.unpack_from(frame)[0] + DETAIL.size
    return b"".join((_SIZE.pack(size), frame[4:at], DETAIL.pack(offset, QUEUE_SIZE), frame[at:]))


@dataclass(slots=True)
class Message:
    """A decoded message frame: publish time (ns), delivery count, 16-byte ID, body.

    ``ext_version`` and ``ext`` are set for frames decoded as extended (``extend_support``);
    ``queue_offset`` and ``raw_size`` for frames decoded with ``detail`` (a ``SUB_ORDERED``
    subscriber's: the message's offset in its partition and its size in the queue, 1, so
    that the next message is at ``queue_offset + raw_size``; -1 otherwise).
    """

    timestamp: int
    attempts: int
    id: bytes
    body: bytes
    ext_version: int = NO_EXT_VERSION
    ext: bytes = b""
    queue_offset: int = -1
    raw_size: int = -1


def decode_message(
    data: bytes | bytearray | memoryview, *, extended: bool = False, detail: bool = False
) -> Message:
    """Decode the data of a type-2 frame; BadMessage when shorter than its header.

    With ``extended`` the frame is read in youzan's extended form; an unknown extension
    version or a length running past the frame is BadMessage. With ``detail`` (a
    ``SUB_ORDERED`` subscriber's frames) the body starts with youzan's detail: the queue
    offset (uint64) and raw size (uint32), taken off into the Message's fields.
    """
    if len(data) < MESSAGE_HEADER:
        raise BadMessage(f"message of {len(data)} bytes is shorter than {MESSAGE_HEADER}")
    timestamp, attempts = _MSG_HEAD.unpack_from(data)
    msg_id = bytes(data[10:26])
    if not extended:
        return _detailed(Message(timestamp, attempts, msg_id, bytes(data[26:])), detail)
    if len(data) < MESSAGE_HEADER + 1:
        raise BadMessage("extended message has no extension version")
    version = data[MESSAGE_HEADER]
    if version not in EXT_VERSIONS:
        raise BadMessage(f"unknown message extension version {version}")
    if version == NO_EXT_VERSION:
        return _detailed(Message(timestamp, attempts, msg_id, bytes(data[27:])), detail)
    if len(data) < MESSAGE_HEADER + 3:
        raise BadMessage("extended message is shorter than its extension header")
    length = int.from_bytes(data[27:29], "big")
    if MESSAGE_HEADER + 3 + length > len(data):
        raise BadMessage(f"message extension of {length} bytes runs past the frame")
    ext = bytes(data[29 : 29 + length])
    body = bytes(data[29 + length :])
    return _detailed(Message(timestamp, attempts, msg_id, body, version, ext), detail)


def _detailed(msg: Message, detail: bool) -> Message:
    if not detail:
        return msg
    if len(msg.body) < DETAIL.size:
        raise BadMessage(f"message body of {len(msg.body)} bytes has no detail")
    msg.queue_offset, msg.raw_size = DETAIL.unpack_from(msg.body)
    msg.body = msg.body[DETAIL.size :]
    return msg
