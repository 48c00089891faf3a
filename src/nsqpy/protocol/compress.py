"""Stream compression negotiated by IDENTIFY (SPEC 1.6): snappy framing and raw DEFLATE.

Sans-IO codecs shared by nsqd and the client. An encoder turns each write batch into bytes
the peer can decode at once (snappy chunks; deflate with a sync flush). A decoder is fed the
bytes as they arrive, in any pieces, and hands out the decompressed stream with ``read(n)``
a bounded piece at a time, so a small input that inflates hugely (a decompression bomb)
never sits in memory whole: the caller reads, parses and lets the rest wait.

Snappy's framing format: a stream identifier chunk (``ff 06 00 00 "sNaPpY"``), then chunks
``[type][3-byte little-endian length][data]``; compressed (0x00) and uncompressed (0x01)
chunks start with the masked CRC32C of the uncompressed data and carry at most 65536 bytes
of it; 0x80-0xfe are skipped; 0x02-0x7f are reserved and refused. The snappy block codec
itself is injected (``BlockCodec``) so this module imports only the standard library and
crc32c; ``nsqpy.codecs`` binds it to cramjam. Errors are ``CorruptStream``.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import crc32c

MAX_BLOCK = 65536  # uncompressed bytes per snappy chunk
STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
_MAX_COMPRESSED_CHUNK = 4 + 32 + MAX_BLOCK + MAX_BLOCK // 6  # CRC + snappy's worst case
_CHUNK_COMPRESSED = 0x00
_CHUNK_UNCOMPRESSED = 0x01
_CHUNK_PADDING = 0xFE
_CHUNK_STREAM_ID = 0xFF


class CorruptStream(ValueError):
    """The peer's compressed stream cannot be decoded (bad chunk, CRC, or DEFLATE data)."""


class BlockCodec(Protocol):
    """Snappy's raw block format (no framing)."""

    def compress(self, data: bytes) -> bytes: ...

    def decompress(self, data: bytes) -> bytes: ...


class StreamEncoder(Protocol):
    def encode(self, data: bytes) -> bytes: ...


class StreamDecoder(Protocol):
    def feed(self, data: bytes) -> None: ...

    def read(self, limit: int) -> bytes: ...


def masked_crc(data: bytes | memoryview) -> int:
    """The framing format's checksum: CRC32C rotated right by 15 plus a constant."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(data: bytes | memoryview) -> int:
    """The uncompressed length at the head of a snappy block (a little-endian varint)."""
    value = 0
    for i in range(min(len(data), 5)):
        byte = data[i]
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value
    raise CorruptStream("snappy: corrupt input (bad block length)")


class SnappyEncoder:
    """Snappy framing writer: the stream identifier once, then one chunk per 64 KiB."""

    def __init__(self, block: BlockCodec) -> None:
        self.block = block
        self._started = False

    def encode(self, data: bytes) -> bytes:
        out: list[bytes] = []
        if not self._started:
            self._started = True
            out.append(STREAM_IDENTIFIER)
        view = memoryview(data)
        for start in range(0, len(view), MAX_BLOCK):
            piece = view[start : start + MAX_BLOCK]
            crc = masked_crc(piece)
            packed = self.block.compress(bytes(piece))
            if len(packed) >= len(piece) - len(piece) // 8:
                kind, payload = _CHUNK_UNCOMPRESSED, bytes(piece)
            else:
                kind, payload = _CHUNK_COMPRESSED, packed
            size = len(payload) + 4
            out.append(bytes((kind, size & 0xFF, (size >> 8) & 0xFF, size >> 16)))
            out.append(crc.to_bytes(4, "little"))
            out.append(payload)
        return b"".join(out)


class SnappyDecoder:
    """Snappy framing reader: incremental, each chunk checked and bounded to 64 KiB out."""

    def __init__(self, block: BlockCodec) -> None:
        self.block = block
        self._buf = bytearray()
        self._skip = 0  # bytes of a skippable chunk still to drop
        self._seen_identifier = False
        self._error: CorruptStream | None = None

    def feed(self, data: bytes) -> None:
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buf += data

    def read(self, limit: int) -> bytes:
        """Up to about ``limit`` decompressed bytes (at least one chunk's worth if any)."""
        if self._error is not None:
            raise self._error
        out: list[bytes] = []
        total = 0
        while total < limit:
            try:
                chunk = self._next_chunk()
            except CorruptStream as exc:
                if not out:
                    raise
                self._error = exc  # hand out the good chunks before it first
                break
            if chunk is None:
                break
            if chunk:
                out.append(chunk)
                total += len(chunk)
        return b"".join(out)

    def _next_chunk(self) -> bytes | None:
        buf = self._buf
        if len(buf) < 4:
            return None
        kind = buf[0]
        size = buf[1] | buf[2] << 8 | buf[3] << 16
        if kind == _CHUNK_STREAM_ID:
            if size != 6:
                raise CorruptStream("snappy: corrupt input (bad stream identifier)")
        elif not self._seen_identifier:
            raise CorruptStream("snappy: corrupt input (missing stream identifier)")
        elif kind == _CHUNK_COMPRESSED and size > _MAX_COMPRESSED_CHUNK:
            raise CorruptStream(f"snappy: compressed chunk of {size} bytes is too large")
        elif kind == _CHUNK_UNCOMPRESSED and size > MAX_BLOCK + 4:
            raise CorruptStream(f"snappy: uncompressed chunk of {size} bytes is too large")
        elif 0x02 <= kind <= 0x7F:
            raise CorruptStream(f"snappy: unsupported chunk type {kind:#04x}")
        elif kind >= 0x80:  # skippable (including padding)
            available = min(size, len(buf) - 4)
            del buf[: 4 + available]
            self._skip = size - available
            return b""
        if len(buf) < 4 + size:
            return None
        body = bytes(buf[4 : 4 + size])
        del buf[: 4 + size]
        if kind == _CHUNK_STREAM_ID:
            if body != b"sNaPpY":
                raise CorruptStream("snappy: corrupt input (bad stream identifier)")
            self._seen_identifier = True
            return b""
        return self._chunk_data(kind, body)

    def _chunk_data(self, kind: int, body: bytes) -> bytes:
        if len(body) < 4:
            raise CorruptStream("snappy: corrupt input (chunk shorter than its checksum)")
        crc = int.from_bytes(body[:4], "little")
        payload = memoryview(body)[4:]
        if kind == _CHUNK_COMPRESSED:
            if _varint(payload) > MAX_BLOCK:
                raise CorruptStream("snappy: corrupt input (block larger than 64 KiB)")
            try:
                data = self.block.decompress(bytes(payload))
            except Exception as exc:  # the block codec's own error type
                raise CorruptStream(f"snappy: corrupt input ({exc})") from None
        else:
            data = bytes(payload)
        if masked_crc(data) != crc:
            raise CorruptStream("snappy: corrupt input (checksum mismatch)")
        return data


class DeflateEncoder:
    """Raw DEFLATE (RFC 1951, no zlib header), sync-flushed after each write batch."""

    def __init__(self, level: int) -> None:
        self._z = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)

    def encode(self, data: bytes) -> bytes:
        z = self._z
        return z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH)


class DeflateDecoder:
    """Raw DEFLATE reader that inflates at most ``limit`` bytes per ``read``."""

    def __init__(self) -> None:
        self._z = zlib.decompressobj(-zlib.MAX_WBITS)
        self._in = b""

    def feed(self, data: bytes) -> None:
        if self._z.eof:
            if data:
                raise CorruptStream("flate: data after the end of the DEFLATE stream")
            return
        self._in = self._in + data if self._in else data

    @property
    def finished(self) -> bool:
        """The peer ended the DEFLATE stream (a final block): nothing more can follow."""
        return self._z.eof

    def read(self, limit: int) -> bytes:
        if not self._in:
            return b""
        try:
            out = self._z.decompress(self._in, limit)
        except zlib.error as exc:
            raise CorruptStream(f"flate: corrupt input ({exc})") from None
        self._in = self._z.unconsumed_tail
        if self._z.eof and self._z.unused_data:
            raise CorruptStream("flate: data after the end of the DEFLATE stream")
        return out


class Passthrough:
    """The identity decoder: buffers bytes and hands them out ``limit`` at a time."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def read(self, limit: int) -> bytes:
        out = bytes(self._buf[:limit])
        del self._buf[:limit]
        return out
