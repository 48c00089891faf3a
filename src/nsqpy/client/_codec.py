"""The client's single door to the wire format: every byte it sends or parses.

Sans-IO (bytes in, values out); imports only the standard library. Meant to delegate to
``nsqpy.protocol`` once that package provides frames/commands/message/names; the rest of
the client only uses the names here, so that switch touches this file alone.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from typing import Any

# nsqpy.protocol was not written yet when the client was: until it is, the few encoders
# and the frame reader the client needs live here (private, same wire format, SPEC 1.3-1.6).
FRAME_RESPONSE = 0
FRAME_ERROR = 1
FRAME_MESSAGE = 2
MAGIC_V2 = b"  V2"
_NAME = re.compile(rb"[.a-zA-Z0-9_-]+(#ephemeral)?")
_HEADER = struct.Struct(">ii")
_SIZE = struct.Struct(">i")
_MSG_HEAD = struct.Struct(">qH")


def _valid_name(name: str) -> bool:
    raw = name.encode("utf-8", "replace")
    return 1 <= len(raw) <= 64 and _NAME.fullmatch(raw) is not None


def valid_topic_name(name: str) -> bool:
    """SPEC 1.9: ``^[.a-zA-Z0-9_-]+(#ephemeral)?$``, 1..64 bytes."""
    return _valid_name(name)


def valid_channel_name(name: str) -> bool:
    return _valid_name(name)


class FrameDecoder:
    """Incremental reader of ``[size][type][data]`` frames; ``feed`` returns whole frames."""

    def __init__(self, max_size: int = 64 * 1024 * 1024) -> None:
        self._buf = bytearray()
        self.max_size = max_size

    def append(self, data: bytes) -> None:
        self._buf += data

    def pop(self) -> tuple[int, bytes] | None:
        """One whole frame from the buffer, or None; raises ValueError on a bad size."""
        buf = self._buf
        if len(buf) < 8:
            return None
        size, frame_type = _HEADER.unpack_from(buf, 0)
        if size < 4 or size > self.max_size:
            raise ValueError(f"bad frame size {size}")
        if len(buf) - 4 < size:
            return None
        frame = (frame_type, bytes(buf[8 : 4 + size]))
        del buf[: 4 + size]
        return frame

    def take_rest(self) -> bytes:
        """The bytes after the last whole frame (a stream upgrade decodes them anew)."""
        rest = bytes(self._buf)
        self._buf.clear()
        return rest

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buf = self._buf
        buf += data
        out: list[tuple[int, bytes]] = []
        pos = 0
        end = len(buf)
        while end - pos >= 8:
            size, frame_type = _HEADER.unpack_from(buf, pos)
            if size < 4 or size > self.max_size:
                raise ValueError(f"bad frame size {size}")
            if end - pos - 4 < size:
                break
            out.append((frame_type, bytes(buf[pos + 8 : pos + 4 + size])))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return out


def _with_body(line: str, body: bytes) -> bytes:
    return line.encode() + _SIZE.pack(len(body)) + body


def _check_id(message_id: bytes) -> bytes:
    if len(message_id) != 16:
        raise ValueError(f"message id must be 16 bytes, got {len(message_id)}")
    return message_id


__all__ = [
    "FRAME_ERROR",
    "FRAME_MESSAGE",
    "FRAME_RESPONSE",
    "MAGIC_V2",
    "FrameDecoder",
    "WireMessage",
    "auth",
    "cls",
    "decode_message",
    "dpub",
    "fin",
    "identify",
    "mpub",
    "nop",
    "pub",
    "rdy",
    "req",
    "sub",
    "touch",
    "valid_channel_name",
    "valid_topic_name",
]


@dataclass(frozen=True, slots=True)
class WireMessage:
    """A message frame's fields: publish time (ns), delivery count, 16-byte id, body."""

    timestamp: int
    attempts: int
    id: bytes
    body: bytes


def decode_message(data: bytes) -> WireMessage:
    """Decode a message frame body (SPEC 1.4): ts, attempts, 16-byte id, body."""
    if len(data) < 26:
        raise ValueError(f"message frame of {len(data)} bytes is shorter than 26")
    ts, attempts = _MSG_HEAD.unpack_from(data)
    return WireMessage(ts, attempts, bytes(data[10:26]), bytes(data[26:]))


def identify(fields: dict[str, Any]) -> bytes:
    """``IDENTIFY\\n`` + size + JSON body."""
    return _with_body("IDENTIFY\n", json.dumps(fields).encode())


def sub(topic: str, channel: str) -> bytes:
    return f"SUB {topic} {channel}\n".encode()


def pub(topic: str, body: bytes | bytearray | memoryview) -> bytes:
    return _with_body(f"PUB {topic}\n", bytes(body))


def mpub(topic: str, bodies: list[bytes]) -> bytes:
    parts = [_SIZE.pack(len(bodies))]
    for body in bodies:
        parts += [_SIZE.pack(len(body)), bytes(body)]
    return _with_body(f"MPUB {topic}\n", b"".join(parts))


def dpub(topic: str, defer_ms: int, body: bytes) -> bytes:
    return _with_body(f"DPUB {topic} {defer_ms}\n", bytes(body))


def rdy(count: int) -> bytes:
    return b"RDY %d\n" % count


def fin(message_id: bytes) -> bytes:
    return b"FIN " + _check_id(message_id) + b"\n"


def req(message_id: bytes, timeout_ms: int) -> bytes:
    return b"REQ " + _check_id(message_id) + b" %d\n" % timeout_ms


def touch(message_id: bytes) -> bytes:
    return b"TOUCH " + _check_id(message_id) + b"\n"


def cls() -> bytes:
    return b"CLS\n"


def nop() -> bytes:
    return b"NOP\n"


def auth(secret: bytes) -> bytes:
    return _with_body("AUTH\n", secret)


def parse_identify_reply(data: bytes) -> dict[str, Any]:
    """The IDENTIFY reply: ``OK`` (no negotiation) gives ``{}``, else the JSON object."""
    if data == b"OK":
        return {}
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"IDENTIFY reply is not a JSON object: {data[:64]!r}")
    return value
