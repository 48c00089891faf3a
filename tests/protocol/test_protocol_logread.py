"""The log-read API's body (docs/logread.md): golden bytes, round trips, damage and garbage.

``format=columns`` is written by ``encode_columns`` and read by ``decode_columns``;
``format=batches`` is written by the storage engine and read by ``decode_batches``, so the
layout restated in ``nsqpy.protocol.logread`` is pinned to ``nsqpy.storage.records`` here.
"""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from nsqpy.protocol import logread
from nsqpy.protocol.logread import (
    BadLogReply,
    LogRecord,
    columns_layout,
    columns_size,
    decode_batches,
    decode_columns,
    encode_columns,
)
from nsqpy.storage import Entry, RawBatch, Record
from nsqpy.storage import records as layout
from nsqpy.storage.encode import encode_entries

# -- format=columns ---------------------------------------------------------------------------

GOLDEN_RECORD = LogRecord(7, 1000, 2000, 3, b"hi", trace_id=9, partition_key=b"k", headers=b"{}")
GOLDEN_COLUMNS = b"".join(
    [
        b"NQLR",  # magic
        b"\x01\x00",  # version 1
        b"\x00\x00",  # reserved
        b"\x01\x00\x00\x00",  # one record
        b"\x00\x00\x00\x00",  # reserved
        struct.pack("<Q", 7),  # offset
        struct.pack("<q", 1000),  # timestamp ns
        struct.pack("<q", 2000),  # deliver_at ns
        struct.pack("<Q", 9),  # trace id
        struct.pack("<II", 0, 1),  # key positions
        struct.pack("<II", 0, 2),  # header positions
        struct.pack("<II", 0, 2),  # body positions
        struct.pack("<H", 3),  # flags
        b"k",  # keys
        b"{}",  # headers
        b"hi",  # bodies
    ]
)
EMPTY_COLUMNS = b"NQLR\x01\x00\x00\x00" + bytes(8) + bytes(12)  # n = 0: three positions of 0


def test_encode_columns_golden_bytes() -> None:
    assert encode_columns([GOLDEN_RECORD]) == GOLDEN_COLUMNS
    as_stored = Record(7, 1000, 2000, 3, b"hi", trace_id=9, partition_key=b"k", headers=b"{}")
    assert encode_columns([as_stored]) == GOLDEN_COLUMNS  # storage's records encode the same
    assert encode_columns([]) == EMPTY_COLUMNS


def test_decode_columns_golden_bytes() -> None:
    assert decode_columns(GOLDEN_COLUMNS) == [GOLDEN_RECORD]
    assert decode_columns(EMPTY_COLUMNS) == []


def test_columns_layout_places_every_part() -> None:
    lay = columns_layout(GOLDEN_COLUMNS)
    assert lay.count == 1 and lay.end == len(GOLDEN_COLUMNS)
    assert lay.values == {"offset": 16, "timestamp": 24, "deliver_at": 32, "trace_id": 40}
    assert lay.positions == {"key": 48, "headers": 56, "body": 64}
    assert lay.flags == 72
    assert lay.data == {"key": 74, "headers": 75, "body": 77}
    for n in (0, 1, 5):  # the docs' formula: 16 + 32n + 12(n+1) + 2n
        assert columns_size(n) == 16 + 32 * n + 12 * (n + 1) + 2 * n


records_strategy = st.lists(
    st.builds(
        LogRecord,
        offset=st.integers(0, (1 << 54) - 1),
        timestamp=st.integers(0, (1 << 63) - 1),
        deliver_at=st.integers(0, (1 << 63) - 1),
        flags=st.integers(0, 0xFFFF),
        body=st.binary(max_size=40),
        trace_id=st.integers(0, (1 << 64) - 1),
        partition_key=st.binary(max_size=8),
        headers=st.sampled_from([b"", b"{}", b'{"a": "x"}']),
    ),
    max_size=8,
)


@given(records_strategy)
def test_columns_round_trip(records: list[LogRecord]) -> None:
    assert decode_columns(encode_columns(records)) == records


@given(records_strategy, st.data())
def test_truncated_or_extended_columns_are_rejected(
    records: list[LogRecord], data: st.DataObject
) -> None:
    body = encode_columns(records)
    cut = data.draw(st.integers(0, len(body) - 1))
    with pytest.raises(BadLogReply):
        decode_columns(body[:cut])
    with pytest.raises(BadLogReply):
        decode_columns(body + b"x")  # trailing bytes


def test_columns_cut_at_every_byte_are_rejected() -> None:
    for cut in range(len(GOLDEN_COLUMNS)):
        with pytest.raises(BadLogReply):
            decode_columns(GOLDEN_COLUMNS[:cut])


@pytest.mark.parametrize(
    ("at", "value"),
    [
        (0, b"NQLX"),  # magic
        (4, b"\x02\x00"),  # version
        (8, b"\x02\x00\x00\x00"),  # n
        (48, b"\x01\x00\x00\x00"),  # a position column that does not start at 0
        (56, b"\x00\x00\x00\x00\x03\x00\x00\x00"),  # headers run into the bodies
    ],
)
def test_columns_with_a_wrong_field_are_rejected(at: int, value: bytes) -> None:
    damaged = GOLDEN_COLUMNS[:at] + value + GOLDEN_COLUMNS[at + len(value) :]
    with pytest.raises(BadLogReply):
        decode_columns(damaged)


def test_decreasing_positions_are_rejected() -> None:
    two = encode_columns([LogRecord(1, 0, 0, 0, b"ab"), LogRecord(2, 0, 0, 0, b"c")])
    at = columns_layout(two).positions["body"]  # body positions 0, 2, 3 become 0, 4, 3
    damaged = two[: at + 4] + struct.pack("<I", 4) + two[at + 8 :]
    with pytest.raises(BadLogReply):
        decode_columns(damaged)


@given(st.binary(max_size=300))
def test_garbage_columns_give_records_or_bad_log_reply(data: bytes) -> None:
    try:
        records = decode_columns(b"NQLR\x01\x00\x00\x00" + data)
    except BadLogReply:
        return
    assert all(isinstance(r, LogRecord) for r in records)


# -- format=batches ---------------------------------------------------------------------------


def storage_batch(entries: list[Entry], base: int = 0, now: int = 100) -> bytes:
    parts, _ = encode_entries(entries, base, 1, now)
    return b"".join(bytes(p) for p in parts)


def golden_batch() -> bytes:
    """One batch at base offset 5, epoch 1: a record with an extension and a plain one."""
    ext = b"".join(
        [
            struct.pack("<Q", 9),  # trace id
            struct.pack("<H", 1),  # partition key length
            b"k",  # partition key
            b"{}",  # headers (the rest of the extension)
        ]
    )

    def record(offset: int, ts: int, deliver_at: int, flags: int, ext: bytes, body: bytes) -> bytes:
        tail = b"".join(
            [
                struct.pack("<Q", offset),  # offset
                struct.pack("<q", ts),  # timestamp ns
                struct.pack("<q", deliver_at),  # deliver_at ns
                struct.pack("<H", flags),  # flags
                struct.pack("<I", len(ext)),  # extension length
                ext,
                body,
            ]
        )
        length = struct.pack("<I", 4 + len(tail))  # bytes after the length field
        return length + struct.pack("<I", crc32c(tail)) + tail  # crc of what follows it

    records = record(5, 100, 0, 0, ext, b"hi") + record(6, 100, 2000, 1, b"", b"")
    fields = b"".join(
        [
            struct.pack("<Q", 5),  # base offset
            struct.pack("<I", 1),  # epoch
            struct.pack("<I", 2),  # count
            struct.pack("<I", len(records)),  # length of the records
            struct.pack("<I", crc32c(records)),  # records crc
            struct.pack("<Q", 100),  # max timestamp
        ]
    )
    return b"NQB2" + struct.pack("<I", crc32c(fields)) + fields + records  # magic, header crc


GOLDEN_BATCH_RECORDS = [
    LogRecord(5, 100, 0, 0, b"hi", trace_id=9, partition_key=b"k", headers=b"{}"),
    LogRecord(6, 100, 2000, 1, b""),
]


def test_batches_golden_bytes() -> None:
    data = golden_batch()
    assert decode_batches(data) == GOLDEN_BATCH_RECORDS
    entries = [
        Entry(b"hi", trace_id=9, partition_key=b"k", headers=b"{}"),
        Entry(b"", deliver_at=2000, flags=1),
    ]
    assert storage_batch(entries, base=5, now=100) == data  # what the log writes
    assert decode_batches(b"") == []


def test_the_layout_is_the_storage_engines() -> None:
    assert logread.BATCH.format == layout.BATCH.format
    assert (logread.BATCH_SIZE, logread.BATCH_MAGIC, logread.BATCH_CRC_FROM) == (
        layout.BATCH_SIZE,
        layout.BATCH_MAGIC,
        layout.BATCH_CRC_FROM,
    )
    assert (logread.RECORD_SIZE, logread.RECORD_TAIL) == (layout.RECORD_SIZE, layout.RECORD_TAIL)
    # the same fields at the same places (timestamps read as i64, as in format=columns)
    assert logread.RECORD.format.lower() == layout.RECORD.format.lower()
    assert logread.EXT.format == layout.EXT.format and logread.EXT_SIZE == layout.EXT_SIZE
    assert logread.RECORD_FIELDS["ext_length"][0] == layout.RECORD_SIZE - 4
    assert LogRecord._fields == Record._fields[:8]


entries_strategy = st.lists(
    st.builds(
        Entry,
        body=st.binary(max_size=40),
        timestamp=st.integers(1, (1 << 62)),
        deliver_at=st.integers(0, (1 << 62)),
        flags=st.integers(0, 0xFFFF),
        trace_id=st.integers(0, (1 << 64) - 1),
        partition_key=st.binary(max_size=8),
        headers=st.sampled_from([b"", b"{}", b'{"a": 1}']),
    ),
    min_size=1,
    max_size=6,
)


@given(st.lists(entries_strategy, min_size=1, max_size=3), st.integers(0, 1 << 40))
def test_batches_decode_what_the_log_wrote(batches: list[list[Entry]], base: int) -> None:
    data = b""
    offset = base
    for entries in batches:
        data += storage_batch(entries, offset)
        offset += len(entries)
    stored = RawBatch(base, offset - base, data).records()  # every CRC checked by storage
    assert decode_batches(data) == [LogRecord(*r[:8]) for r in stored]


@given(entries_strategy, st.data())
def test_damaged_batches_are_rejected(entries: list[Entry], data: st.DataObject) -> None:
    body = storage_batch(entries)
    cut = data.draw(st.integers(1, len(body) - 1))  # (0: an empty body, which is valid)
    with pytest.raises(BadLogReply):
        decode_batches(body[:cut])
    with pytest.raises(BadLogReply):
        decode_batches(body + data.draw(st.binary(min_size=1, max_size=60)))  # trailing bytes
    flip = data.draw(st.integers(0, len(body) - 1))
    damaged = bytearray(body)
    damaged[flip] ^= 0x40
    with pytest.raises(BadLogReply):  # every byte is under a CRC
        decode_batches(bytes(damaged))


def sealed(records: bytes, n: int, base: int = 0) -> bytes:
    """A batch whose header and CRCs are right around whatever ``records`` holds."""
    return bytes(layout.batch_header(base, 1, n, len(records), crc32c(records), 0)) + records


def test_well_sealed_nonsense_is_rejected() -> None:
    good = storage_batch([Entry(b"abc", trace_id=1, partition_key=b"k"), Entry(b"de")])
    first = good[layout.BATCH_SIZE :]
    one = layout.RECORD.unpack_from(first, 0)
    cases = [
        sealed(first, 3),  # says three records, holds two
        sealed(first, 2, base=5),  # offsets do not follow the base
        sealed(b"\x01\x00\x00\x00" * 9, 9),  # records too short for their fields
        sealed(b"\xff\xff\x00\x00" + first[4:], 2),  # a length past the end
        sealed(first[:34] + struct.pack("<I", one[0]) + first[38:], 2),  # extension too long
        sealed(first[:46] + b"\xff\xff" + first[48:], 2),  # a key longer than its extension
        sealed(first[:34] + struct.pack("<I", 3) + first[38:], 2),  # extension < its fields
    ]
    for i, data in enumerate(cases):
        with pytest.raises(BadLogReply):
            decode_batches(data)
            pytest.fail(f"case {i} decoded")


@given(st.binary(max_size=300))
def test_garbage_batches_give_records_or_bad_log_reply(data: bytes) -> None:
    try:
        records = decode_batches(data)
    except BadLogReply:
        return
    assert all(isinstance(r, LogRecord) for r in records)
