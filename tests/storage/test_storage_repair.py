"""Salvage: the records in damaged bytes whose own CRC32C holds, in order, nothing else."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nsqpy.storage.encode import encode_bodies
from nsqpy.storage.records import BATCH_SIZE
from nsqpy.storage.repair import salvage


def records(base: int, bodies: list[bytes]) -> list[bytes]:
    """The stored bytes of each record of a batch of ``bodies`` at ``base``."""
    data = b"".join(encode_bodies(bodies, base, 0, 1_000, 0))[BATCH_SIZE:]
    out, at = [], 0
    while at < len(data):
        size = 4 + int.from_bytes(data[at : at + 4], "little")
        out.append(data[at : at + size])
        at += size
    return out


def test_records_between_garbage_are_found_in_runs_of_consecutive_offsets() -> None:
    recs = records(10, [b"a" * 5, b"bb", b"ccc", b"dddd"])
    data = b"\xff" * 7 + recs[0] + recs[1] + b"junk!" + recs[3] + b"\x00" * 4096
    runs = salvage(data, 10, 14)
    assert [(run.base, run.records) for run in runs] == [(10, recs[:2]), (13, [recs[3]])]


def test_offsets_outside_the_range_asked_for_are_not_taken() -> None:
    recs = records(10, [b"x", b"y", b"z"])
    assert salvage(b"".join(recs), 11, 12)[0].records == [recs[1]]
    assert salvage(b"".join(recs), 20, None) == []


def test_a_flipped_byte_loses_only_its_record() -> None:
    recs = records(0, [b"%d" % i * 30 for i in range(5)])
    data = bytearray(b"".join(recs))
    data[len(recs[0]) + len(recs[1]) + 20] ^= 1  # inside record 2
    runs = salvage(bytes(data), 0, 5)
    assert [(run.base, len(run.records)) for run in runs] == [(0, 2), (3, 2)]


def test_a_long_run_of_zeros_is_skipped_quickly() -> None:
    recs = records(5, [b"after the zeros"])
    assert salvage(b"\x00" * (8 << 20) + recs[0], 5, None)[0].records == recs


@given(st.lists(st.binary(max_size=60), min_size=1, max_size=12), st.data())
def test_property_garbage_between_records_never_hides_or_invents_one(
    bodies: list[bytes], data: st.DataObject
) -> None:
    recs = records(100, [b"m" + body for body in bodies])
    parts = []
    for rec in recs:
        parts.append(data.draw(st.binary(max_size=40)))
        parts.append(rec)
    found = [r for run in salvage(b"".join(parts), 100, None) for r in run.records]
    assert found == recs
