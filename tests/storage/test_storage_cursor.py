"""Channel cursors: range merging, persistence, corruption."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqpy.errors import CorruptRecord
from nsqpy.storage import CursorFile, CursorState
from nsqpy.testing import FakeClock


def test_in_order_confirms_advance_confirmed_and_next_read() -> None:
    c = CursorState(5)
    assert (c.confirmed, c.next_read, c.ranges) == (5, 5, [])
    assert c.confirm(5) and c.confirm(6)
    assert (c.confirmed, c.next_read) == (7, 7)
    assert not c.confirm(5)


def test_out_of_order_confirms_merge_ranges() -> None:
    c = CursorState(0, 10)
    assert c.confirm(3) and c.ranges == [(3, 4)]
    assert c.confirm(5) and c.ranges == [(3, 4), (5, 6)]
    assert c.confirm(4) and c.ranges == [(3, 6)]
    assert not c.confirm(4) and not c.confirm(3)
    assert c.confirm(7) and c.confirm(1) and c.ranges == [(1, 2), (3, 6), (7, 8)]
    assert c.is_confirmed(4) and not c.is_confirmed(6) and not c.is_confirmed(0)
    assert c.confirm(0) and (c.confirmed, c.ranges) == (2, [(3, 6), (7, 8)])
    assert c.confirm(2) and (c.confirmed, c.ranges) == (6, [(7, 8)])
    assert c.confirm(6) and (c.confirmed, c.ranges) == (8, [])
    assert c.next_read == 10


def test_confirm_many_counts_new_ones_and_reset_clears() -> None:
    c = CursorState(0, 20)
    assert c.confirm_many([3, 4, 4, 0, 9, 3]) == 4
    assert c.confirmed == 1 and c.ranges == [(3, 5), (9, 10)]
    c.reset(100)
    assert (c.confirmed, c.next_read, c.ranges) == (100, 100, [])


def test_constructor_normalises_ranges() -> None:
    c = CursorState(5, 20, [(8, 10), (4, 6), (10, 12), (15, 16)])
    assert (c.confirmed, c.ranges) == (6, [(8, 12), (15, 16)])


@given(st.integers(0, 1000), st.lists(st.integers(0, 1200), max_size=200))
def test_property_cursor_matches_a_set_model(start: int, offsets: list[int]) -> None:
    c = CursorState(start)
    model = set(range(start))
    for off in offsets:
        assert c.confirm(off) == (off not in model)
        model.add(off)
    confirmed = 0
    while confirmed in model:
        confirmed += 1
    assert c.confirmed == confirmed
    above = sorted(o for o in model if o > confirmed)
    flat = [o for s, e in c.ranges for o in range(s, e)]
    assert flat == above
    for (_, e1), (s2, _) in zip(c.ranges, c.ranges[1:], strict=False):
        assert e1 < s2  # disjoint and not adjacent
    for off in range(0, 1300, 13):
        assert c.is_confirmed(off) == (off in model)
    assert CursorState.from_bytes(c.to_bytes()) == c


@given(
    st.lists(st.integers(0, 300), max_size=60),
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)), max_size=8),
)
def test_property_confirm_range_is_confirming_each_offset(
    offsets: list[int], gaps: list[tuple[int, int]]
) -> None:
    ranged, single = CursorState(), CursorState()
    for o in offsets:
        ranged.confirm(o)
        single.confirm(o)
    for start, length in gaps:
        new = ranged.confirm_range(start, start + length)
        assert new == sum(1 for o in range(start, start + length) if single.confirm(o))
    assert ranged == single


def test_from_bytes_rejects_junk() -> None:
    data = CursorState(3, 9, [(5, 7)]).to_bytes()
    for bad in [
        b"",
        b"junk",
        data[:-1],
        data[:10] + bytes([data[10] ^ 1]) + data[11:],
        data + b"x",
    ]:
        with pytest.raises(CorruptRecord):
            CursorState.from_bytes(bad)


def test_cursor_file_save_load_and_remove(tmp_path: Path) -> None:
    f = CursorFile(tmp_path / "cursors" / "ch.cursor")
    assert f.load() is None
    state = CursorState(10, 15, [(12, 14)])
    f.save(state)
    assert f.load() == state
    assert not list((tmp_path / "cursors").glob("*.tmp"))
    f.remove()
    assert f.load() is None


def test_corrupt_cursor_file_is_renamed_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "ch.cursor"
    path.write_bytes(b"garbage garbage garbage garbage")
    with caplog.at_level(logging.ERROR, "nsqpy.storage"):
        assert CursorFile(path).load() is None
    assert not path.exists()
    assert len(list(tmp_path.glob("ch.cursor.corrupt-*"))) == 1
    assert "corrupt" in caplog.text


def test_note_says_when_a_save_is_due(tmp_path: Path) -> None:
    clock = FakeClock()
    f = CursorFile(tmp_path / "c", every_confirmations=10, every_ms=500, clock=clock)
    assert not f.note(0)
    assert not f.note(9)
    assert f.note(1)
    f.save(CursorState())
    assert not f.note(1)
    clock.advance_ms(499)
    assert not f.note(0)
    clock.advance_ms(1)
    assert f.note(0)
    f.save(CursorState())
    clock.advance_ms(10_000)
    assert not f.note(0)  # nothing unsaved: no save due however long it has been
