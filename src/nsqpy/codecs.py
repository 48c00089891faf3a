"""The stream codecs nsqd and the client negotiate, built on ``nsqpy.protocol.compress``.

Binds snappy's block format to cramjam (the only module that imports it) and offers one
factory per negotiated compression, so nsqd and the client build identical codecs. Imports
no server or client code.
"""

from __future__ import annotations

import cramjam

from nsqpy.protocol.compress import (
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
    StreamDecoder,
    StreamEncoder,
)


class CramjamSnappy:
    """Snappy's raw block format through cramjam."""

    @staticmethod
    def compress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.compress_raw(data))

    @staticmethod
    def decompress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.decompress_raw(data))


SNAPPY_BLOCK = CramjamSnappy()


def stream_codec(kind: str, level: int = 6) -> tuple[StreamEncoder, StreamDecoder]:
    """(encoder, decoder) for ``"snappy"`` or ``"deflate"`` (raw DEFLATE at ``level``)."""
    if kind == "snappy":
        return SnappyEncoder(SNAPPY_BLOCK), SnappyDecoder(SNAPPY_BLOCK)
    if kind == "deflate":
        return DeflateEncoder(level), DeflateDecoder()
    raise ValueError(f"unknown compression {kind!r}")
