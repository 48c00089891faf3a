"""V2 frames (SPEC 1.3): ``[int32 size][int32 type][data]`` with size = 4 + len(data).

Owns the frame constants, the server-side encoders (responses, errors, the precomputed
``OK``/heartbeat/``CLOSE_WAIT`` frames) and the client-side incremental ``FrameDecoder``
(``feed`` for every frame a read completes, ``append``/``pop`` for one frame at a time).
Imports only the standard library and nsqpy.errors: no sockets, no asyncio.
"""

from __future__ import annotations

import struct

from nsqpy.errors import BadProtocol, ProtocolError, from_wire

FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2
FRAME_TYPES = frozenset((FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE))
MAGIC_V2 = b"  V2"
HEARTBEAT = b"_heartbeat_"
OK = b"OK"
CLOSE_WAIT = b"CLOSE_WAIT"

_HEADER = struct.Struct(">ii")
_COMPACT_AT = 1 << 16


def encode_frame(frame_type: int, data: bytes) -> bytes:
    """One frame: size (counting the type field), type, data."""
    return _HEADER.pack(4 + len(data), frame_type) + data


def encode_response(data: bytes) -> bytes:
    """A response frame (type 0): ``OK``, ``CLOSE_WAIT``, ``_heartbeat_`` or JSON."""
    return _HEADER.pack(4 + len(data), FRAME_RESPONSE) + data


def encode_error(err: ProtocolError) -> bytes:
    """An error frame (type 1) carrying ``<CODE> <description>``."""
    return encode_frame(FRAME_ERROR, err.wire())


OK_FRAME = encode_response(OK)
HEARTBEAT_FRAME = encode_response(HEARTBEAT)
CLOSE_WAIT_FRAME = encode_response(CLOSE_WAIT)


def decode_error(data: bytes) -> ProtocolError:
    """The exception for an error frame's data (``E_FIN_FAILED ...`` -> FinFailed)."""
    return from_wire(data)


class BadFrame(BadProtocol):
    """The server broke V2 framing (size < 4, size over the limit, unknown frame type)."""


class FrameDecoder:
    """Client side: feed the bytes read from nsqd, get back whole ``(frame_type, data)`` frames.

    Bytes of an incomplete frame are kept for the next ``feed``. After a framing error every
    later ``feed`` raises the same error: the stream cannot be resynchronised.
    """

    __slots__ = ("_buf", "_error", "_pos", "max_frame_size")

    def __init__(self, max_frame_size: int = 64 << 20) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0
        self._error: BadFrame | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, bytes]]:
        """Add ``data``; return every frame it completes, in order."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        pos = self._pos
        if pos and (pos >= _COMPACT_AT or pos == len(buf)):
            del buf[:pos]
            pos = 0
        buf += data
        out: list[tuple[int, bytes]] = []
        end = len(buf)
        unpack = _HEADER.unpack_from
        while end - pos >= 8:
            size, frame_type = unpack(buf, pos)
            if size < 4 or size > self.max_frame_size or frame_type not in FRAME_TYPES:
                raise self._bad_header(size, frame_type)
            stop = pos + 4 + size
            if stop > end:
                break
            out.append((frame_type, bytes(buf[pos + 8 : stop])))
            pos = stop
        self._pos = pos
        return out

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Add ``data`` without decoding it: ``pop`` then returns the frames one at a time."""
        buf = self._buf
        pos = self._pos
        if pos and (pos >= _COMPACT_AT or pos == len(buf)):
            del buf[:pos]
            self._pos = 0
        buf += data

    def pop(self) -> tuple[int, bytes] | None:
        """The next whole ``(frame_type, data)``, or None until more bytes come.

        For a reader that may stop between frames (a client whose stream is upgraded to TLS
        or compression right after a reply); raises as ``feed`` does.
        """
        if self._error is not None:
            raise self._error
        buf = self._buf
        pos = self._pos
        if len(buf) - pos < 8:
            return None
        size, frame_type = _HEADER.unpack_from(buf, pos)
        if size < 4 or size > self.max_frame_size or frame_type not in FRAME_TYPES:
            raise self._bad_header(size, frame_type)
        stop = pos + 4 + size
        if stop > len(buf):
            return None
        self._pos = stop
        return frame_type, bytes(buf[pos + 8 : stop])

    def _bad_header(self, size: int, frame_type: int) -> BadFrame:
        """The error for a header no nsqd sends (its size first, then its type); kept, so
        every later call raises it again."""
        if size < 4 or size > self.max_frame_size:
            self._error = BadFrame(f"invalid frame size {size}")
        else:
            self._error = BadFrame(f"invalid frame type {frame_type}")
        return self._error

    def take_rest(self) -> bytes:
        """Every byte not yet returned as a frame; the decoder is left empty.

        After a stream upgrade (TLS, snappy, deflate) those bytes belong to the new
        encoding and are decoded anew.
        """
        rest = bytes(self._buf[self._pos :])
        self._buf.clear()
        self._pos = 0
        return rest
