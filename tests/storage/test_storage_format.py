"""Log format 2: golden bytes, every encoder road against a plain reference, format 1 refused."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.errors import StorageError
from nsqpy.storage import Entry, PartitionLog, Record
from nsqpy.storage.encode import encode_bodies, encode_entries
from nsqpy.storage.records import BATCH_SIZE, parse_batch_header, walk_batch

from .helpers import segments

TS = 0x0102030405060708

GOLDEN = bytes.fromhex(
    # batch header
    "4e514232"  # magic "NQB2"
    "44444f69"  # header CRC32C of the 32 bytes after it
    "0500000000000000"  # base offset 5
    "02000000"  # epoch 2
    "02000000"  # 2 records
    "51000000"  # 81 bytes of records follow
    "6985a98b"  # records CRC32C of those 81 bytes
    "0807060504030201"  # max timestamp
    # record 5
    "24000000"  # length 36: the bytes after this field
    "742a8f6f"  # CRC32C from the offset field to the record's end
    "0500000000000000"  # offset 5
    "0807060504030201"  # publish timestamp (ns)
    "0000000000000000"  # deliver_at 0: immediate
    "0000"  # flags
    "00000000"  # extension length 0
    "6869"  # body b"hi"
    # record 6
    "25000000"  # length 37
    "d6418ddd"  # CRC32C
    "0600000000000000"  # offset 6
    "0807060504030201"  # publish timestamp
    "0000000000000000"  # deliver_at
    "0000"  # flags
    "00000000"  # extension length
    "6e7371"  # body b"nsq"
)


def reference_batch(entries: list[Entry], base: int, epoch: int, now: int) -> bytes:
    """The format written out the obvious way, one field at a time (no shortcuts)."""
    records = b""
    max_ts = 0
    for i, e in enumerate(entries):
        ts = e.timestamp or now
        max_ts = max(max_ts, ts)
        ext = b""
        if e.trace_id or e.partition_key or e.headers:
            ext = struct.pack("<QH", e.trace_id, len(e.partition_key)) + e.partition_key + e.headers
        covered = (
            struct.pack("<QQQHI", base + i, ts, e.deliver_at, e.flags, len(ext)) + ext + e.body
        )
        records += struct.pack("<II", len(covered) + 4, crc32c(covered)) + covered
    after_crc = struct.pack(
        "<QIIIIQ", base, epoch, len(entries), len(records), crc32c(records), max_ts
    )
    return struct.pack("<II", 0x3242514E, crc32c(after_crc)) + after_crc + records


def test_golden_batch_bytes() -> None:
    assert b"".join(encode_bodies([b"hi", b"nsq"], 5, 2, TS, 0)) == GOLDEN
    assert reference_batch([Entry(b"hi"), Entry(b"nsq")], 5, 2, TS) == GOLDEN
    head = parse_batch_header(GOLDEN, 0)
    assert head is not None and (head.base, head.epoch, head.n_records) == (5, 2, 2)
    assert walk_batch(GOLDEN, BATCH_SIZE, head, check_crcs=True) == TS


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 200, 600])
@pytest.mark.parametrize("mixed", [False, True])
def test_every_body_encoder_road_writes_the_reference_bytes(n: int, mixed: bool) -> None:
    bodies = [bytes([65 + i % 26]) * ((i * 37) % 90 if mixed else 20) for i in range(n)]
    want = reference_batch([Entry(b, deliver_at=9) for b in bodies], 1000, 7, TS)
    assert b"".join(encode_bodies(bodies, 1000, 7, TS, 9)) == want


def test_memoryview_bodies_take_the_general_road() -> None:
    bodies = [memoryview(b"abcd" * 3)] * 6  # struct's "s" refuses a memoryview
    want = reference_batch([Entry(b"abcd" * 3)] * 6, 0, 0, TS)
    assert b"".join(encode_bodies(bodies, 0, 0, TS, 0)) == want


@settings(max_examples=150, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=64), min_size=1, max_size=40),
    uniform=st.booleans(),
    base=st.integers(0, 2**63),
    ts=st.integers(1, 2**63),
    deliver_at=st.integers(0, 2**63),
)
def test_property_body_encoders_match_the_reference(
    bodies: list[bytes], uniform: bool, base: int, ts: int, deliver_at: int
) -> None:
    if uniform:
        bodies = [bodies[0]] * len(bodies)
    want = reference_batch([Entry(b, deliver_at=deliver_at) for b in bodies], base, 3, ts)
    assert b"".join(encode_bodies(bodies, base, 3, ts, deliver_at)) == want


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.builds(
            Entry,
            body=st.binary(max_size=40),
            timestamp=st.integers(0, 2**64 - 1),
            deliver_at=st.integers(0, 2**64 - 1),
            flags=st.integers(0, 0xFFFF),
            trace_id=st.integers(0, 2**64 - 1),
            partition_key=st.binary(max_size=10),
            headers=st.binary(max_size=20),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_property_entry_encoder_matches_the_reference(entries: list[Entry]) -> None:
    parts, max_ts = encode_entries(entries, 42, 1, 99)
    assert b"".join(parts) == reference_batch(entries, 42, 1, 99)
    assert max_ts == max(e.timestamp or 99 for e in entries)


def test_out_of_range_fields_and_oversized_keys_are_storage_errors(tmp_path: Path) -> None:
    with PartitionLog(tmp_path) as log:
        with pytest.raises(StorageError, match="out of range"):
            log.append([Entry(b"x", flags=0x10000)])
        with pytest.raises(StorageError, match="partition key"):
            log.append([Entry(b"x", partition_key=b"k" * 65536)])
        assert log.high_watermark == 0 and not log.pending()


def test_records_come_back_as_named_tuples(tmp_path: Path) -> None:
    with PartitionLog(tmp_path) as log:
        log.append([Entry(b"b", timestamp=3, trace_id=9, partition_key=b"k", headers=b"{}")])
        log.flush()
        (rec,) = log.read(0, 1)
    assert rec == Record(0, 3, 0, 0, b"b", 9, b"k", b"{}", 0)
    assert (rec.offset, rec.body, rec.partition_key) == (0, b"b", b"k")
    with pytest.raises(AttributeError):
        rec.body = b"other"  # type: ignore[misc]


def test_a_format_1_segment_is_refused_and_left_untouched(tmp_path: Path) -> None:
    old = tmp_path / "00000000000000000000.log"
    content = struct.pack("<IIQIII", 0x3142514E, 0, 0, 0, 1, 0) + b"old records"
    old.write_bytes(content)
    with pytest.raises(StorageError, match="format 1"):
        PartitionLog(tmp_path)
    assert old.read_bytes() == content
    assert segments(tmp_path) == [old] and not list(tmp_path.glob("*.corrupt"))


def test_recovery_checks_record_structure_behind_good_crcs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = reference_batch([Entry(b"a"), Entry(b"b")], 0, 0, TS)
    records = reference_batch([Entry(b"c")], 2, 0, TS)[BATCH_SIZE:]
    # a header whose CRCs hold but whose max timestamp is not its records' (a writer bug)
    after_crc = struct.pack("<QIIIIQ", 2, 0, 1, len(records), crc32c(records), TS + 1)
    lying = struct.pack("<II", 0x3242514E, crc32c(after_crc)) + after_crc + records
    (tmp_path / "00000000000000000000.log").write_bytes(good + lying)
    with caplog.at_level("WARNING", "nsqpy.storage"), PartitionLog(tmp_path) as log:
        # the batch is refused; its one record, whose own CRC holds, is kept in a new batch
        assert log.high_watermark == 3 and log.quarantined == 1
        assert [r.body for r in log.read(0, 10)] == [b"a", b"b", b"c"]
    assert "max timestamp mismatch" in caplog.text
