"""The C batch encoder (nsqpy.storage._speedups) against the Python reference encoder.

Both must give the very same bytes for every batch of plain records, so a log written by
one reads back through the other's parser; the C module's CRC32C must be the standard one.
"""

from __future__ import annotations

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.errors import StorageError
from nsqpy.storage import _speedups, encode
from nsqpy.storage.records import parse_batch_header, walk_batch

U64 = st.integers(0, (1 << 64) - 1)
BODIES = st.lists(st.binary(max_size=600), min_size=1, max_size=300)


def python_bytes(bodies: list[bytes], base: int, epoch: int, ts: int, da: int) -> bytes:
    return b"".join(bytes(b) for b in encode.encode_bodies_py(bodies, base, epoch, ts, da))


def test_the_extension_is_built_here() -> None:
    # The project builds it wherever gcc is present (this machine, CI); a silent build
    # failure would otherwise only show as a slower log.
    assert _speedups.crc_impl in ("sse4.2", "table")


@settings(max_examples=300, deadline=None)
@given(BODIES, U64, st.integers(0, (1 << 32) - 1), U64, U64)
def test_c_and_python_encoders_write_the_same_bytes(
    bodies: list[bytes], base: int, epoch: int, ts: int, da: int
) -> None:
    base = min(base, (1 << 64) - 1 - len(bodies))
    c = b"".join(encode.encode_bodies(bodies, base, epoch, ts, da))
    assert c == python_bytes(bodies, base, epoch, ts, da)
    head = parse_batch_header(c, 0)
    assert head is not None and head.n_records == len(bodies) and head.base == base
    assert walk_batch(c, 40, head, check_crcs=True) == ts


def test_uniform_batches_and_buffer_types_agree() -> None:
    bodies = [bytes([i % 256]) * 200 for i in range(200)]
    for same in (bodies, [bytearray(b) for b in bodies], [memoryview(b) for b in bodies]):
        got = b"".join(encode.encode_bodies(same, 7, 1, 10**18, 0))
        assert got == python_bytes(bodies, 7, 1, 10**18, 0)


@given(st.binary(max_size=5000))
def test_crc32c_is_the_standard_one(data: bytes) -> None:
    assert _speedups.crc32c(data) == crc32c(data)


def test_known_crc32c_vector() -> None:
    assert _speedups.crc32c(b"123456789") == 0xE3069283


@pytest.mark.parametrize(
    ("base", "epoch", "ts"), [(1 << 64, 0, 0), (0, 1 << 32, 0), (0, 0, -1), (-1, 0, 0)]
)
def test_out_of_range_fields_are_a_storage_error(base: int, epoch: int, ts: int) -> None:
    with pytest.raises(StorageError):
        encode.encode_bodies([b"x", b"y"], base, epoch, ts, 0)


def test_garbage_bodies_are_refused_not_written() -> None:
    for bad in ([1, 2], [None], "text", [b"ok", "str"]):
        with pytest.raises(TypeError):
            encode.encode_bodies(bad, 0, 0, 0, 0)  # type: ignore[arg-type]
