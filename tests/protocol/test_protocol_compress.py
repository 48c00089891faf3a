"""Snappy framing and raw DEFLATE codecs: golden bytes, python-snappy and zlib as the other
side, any split of the input, garbage and decompression bombs."""

from __future__ import annotations

import os
import zlib

import pytest
import snappy  # python-snappy: what pynsq and gnsq use on the other end of the wire
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.codecs import SNAPPY_BLOCK, stream_codec
from nsqpy.protocol.compress import (
    STREAM_IDENTIFIER,
    CorruptStream,
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
    masked_crc,
)

TEXT = b"PUB events\n" + b"hello world " * 9000 + os.urandom(3000)


def drain(decoder: SnappyDecoder | DeflateDecoder, limit: int = 65536) -> bytes:
    out = bytearray()
    while chunk := decoder.read(limit):
        assert len(chunk) <= limit + 65536
        out += chunk
    return bytes(out)


def decode_in_pieces(
    decoder: SnappyDecoder | DeflateDecoder, data: bytes, cuts: list[int], limit: int
) -> bytes:
    """``data`` fed cut at ``cuts`` (each taken modulo its length + 1), drained in reads of
    ``limit`` bytes after each piece: everything decoded."""
    out = bytearray()
    last = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        decoder.feed(data[last:cut])
        last = cut
        out += drain(decoder, limit)
    return bytes(out)


def test_snappy_stream_starts_with_the_identifier_and_checksums_each_chunk() -> None:
    data = SnappyEncoder(SNAPPY_BLOCK).encode(b"OK" * 10)
    assert data.startswith(STREAM_IDENTIFIER)
    chunk = data[len(STREAM_IDENTIFIER) :]
    size = int.from_bytes(chunk[1:4], "little")
    assert len(chunk) == 4 + size
    assert int.from_bytes(chunk[4:8], "little") == masked_crc(b"OK" * 10)
    # The framing format's mask: CRC32C rotated right by 15 plus 0xa282ead8 (crc32c(b"") = 0).
    assert masked_crc(b"") == 0xA282EAD8


def test_snappy_identifier_is_written_once_per_stream() -> None:
    enc = SnappyEncoder(SNAPPY_BLOCK)
    assert enc.encode(b"a").startswith(STREAM_IDENTIFIER)
    assert not enc.encode(b"b").startswith(STREAM_IDENTIFIER)


def test_python_snappy_reads_our_stream_and_we_read_its_stream() -> None:
    enc = SnappyEncoder(SNAPPY_BLOCK)
    theirs = snappy.StreamDecompressor()
    assert theirs.decompress(enc.encode(TEXT)) + theirs.decompress(enc.encode(b"x")) == TEXT + b"x"
    ours = SnappyDecoder(SNAPPY_BLOCK)
    compressor = snappy.StreamCompressor()
    ours.feed(compressor.add_chunk(TEXT[:70000]) + compressor.add_chunk(TEXT[70000:]))
    assert drain(ours) == TEXT


def test_snappy_accepts_a_new_identifier_per_write_as_pynsq_sends() -> None:
    ours = SnappyDecoder(SNAPPY_BLOCK)
    for part in (b"NOP\n", b"RDY 1\n"):
        ours.feed(snappy.StreamCompressor().compress(part))
    assert drain(ours) == b"NOP\nRDY 1\n"


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(TEXT)), max_size=12))
def test_snappy_decodes_any_split_of_the_stream(cuts: list[int]) -> None:
    data = SnappyEncoder(SNAPPY_BLOCK).encode(TEXT)
    assert decode_in_pieces(SnappyDecoder(SNAPPY_BLOCK), data, cuts, 1000) == TEXT


def test_snappy_skips_padding_and_skippable_chunks_split_across_feeds() -> None:
    enc = SnappyEncoder(SNAPPY_BLOCK)
    head = enc.encode(b"one")
    skippable = bytes((0x80, 0x10, 0, 0)) + b"s" * 16
    padding = bytes((0xFE, 3, 0, 0)) + b"\0\0\0"
    stream = head + skippable + padding + enc.encode(b"two")
    dec = SnappyDecoder(SNAPPY_BLOCK)
    for i in range(len(stream)):
        dec.feed(stream[i : i + 1])
    assert drain(dec) == b"onetwo"


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [
        (b"\x00\x05\x00\x00abcde", "missing stream identifier"),
        (STREAM_IDENTIFIER + bytes((0x02, 1, 0, 0, 0)), "unsupported chunk type"),
        (STREAM_IDENTIFIER + bytes((0x01, 2, 0, 0)) + b"ab", "shorter than its checksum"),
        (STREAM_IDENTIFIER + bytes((0x01, 7, 0, 0)) + b"\0\0\0\0abc", "checksum mismatch"),
        (STREAM_IDENTIFIER + bytes((0x00, 0xFF, 0xFF, 0xFF)), "too large"),
        (STREAM_IDENTIFIER + bytes((0x01, 0xFF, 0xFF, 0x01)), "too large"),
        (b"\xff\x07\x00\x00sNaPpYY", "bad stream identifier"),
        (b"\xff\x06\x00\x00sNaPpX", "bad stream identifier"),
    ],
)
def test_snappy_garbage_is_a_clear_error(garbage: bytes, reason: str) -> None:
    dec = SnappyDecoder(SNAPPY_BLOCK)
    dec.feed(garbage)
    with pytest.raises(CorruptStream, match=reason):
        drain(dec)


def test_snappy_corrupt_compressed_block_and_bomb_are_refused() -> None:
    block = SNAPPY_BLOCK.compress(b"a" * 1000)
    bad = bytearray(block)
    bad[-1] ^= 0xFF
    crc = masked_crc(b"a" * 1000).to_bytes(4, "little")
    for payload, reason in [
        (bytes(bad), "corrupt input|checksum"),
        (b"\x80\x80\x80\x80\x10" + block[2:], "larger than 64 KiB|bad block length"),
    ]:
        dec = SnappyDecoder(SNAPPY_BLOCK)
        size = len(payload) + 4
        dec.feed(STREAM_IDENTIFIER + bytes((0, size & 0xFF, size >> 8, 0)) + crc + payload)
        with pytest.raises(CorruptStream, match=reason):
            drain(dec)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_snappy_random_bytes_never_crash(data: bytes) -> None:
    dec = SnappyDecoder(SNAPPY_BLOCK)
    dec.feed(STREAM_IDENTIFIER + data)
    try:
        drain(dec)
    except CorruptStream:
        pass


def test_deflate_is_raw_and_sync_flushed_per_batch() -> None:
    enc = DeflateEncoder(6)
    first = enc.encode(b"OK")
    assert first.endswith(b"\x00\x00\xff\xff"), "a sync flush ends every batch"
    theirs = zlib.decompressobj(-15)
    assert theirs.decompress(first) == b"OK"
    assert theirs.decompress(enc.encode(TEXT)) == TEXT


@settings(max_examples=30, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_deflate_decodes_any_split(cuts: list[int]) -> None:
    other = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = other.compress(TEXT) + other.flush(zlib.Z_SYNC_FLUSH)
    assert decode_in_pieces(DeflateDecoder(), data, cuts, 4096) == TEXT


def test_deflate_bomb_is_read_in_bounded_pieces() -> None:
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = bomb.compress(b"\0" * (64 << 20)) + bomb.flush(zlib.Z_SYNC_FLUSH)
    assert len(data) < 100_000
    dec = DeflateDecoder()
    dec.feed(data)
    piece = dec.read(65536)
    assert len(piece) == 65536, "no more than asked for, however much the input inflates"


def test_deflate_garbage_and_data_after_the_end_are_errors() -> None:
    dec = DeflateDecoder()
    dec.feed(b"\xff\xff\xff\xff garbage")
    with pytest.raises(CorruptStream, match="flate"):
        drain(dec)
    ended = zlib.compressobj(6, zlib.DEFLATED, -15)
    dec = DeflateDecoder()
    dec.feed(ended.compress(b"bye") + ended.flush() + b"more")
    with pytest.raises(CorruptStream, match="after the end"):
        drain(dec)
    dec = DeflateDecoder()
    ended = zlib.compressobj(6, zlib.DEFLATED, -15)
    dec.feed(ended.compress(b"bye") + ended.flush())
    assert drain(dec) == b"bye" and dec.finished


def test_stream_codec_factory() -> None:
    for kind in ("snappy", "deflate"):
        enc, dec = stream_codec(kind, 3)
        dec.feed(enc.encode(b"abc"))
        assert dec.read(10) == b"abc"
    with pytest.raises(ValueError, match="unknown"):
        stream_codec("lz4")
