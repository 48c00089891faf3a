"""What a leader's CURSORS say is done: its cursor's confirmed offsets less those its
delayed store holds (``nsqd.replicas.without``): a follower that takes over reads those
records again instead of skipping messages it has no deferred entry for."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from nsqpy.nsqd.replicas import MAX_PIECES, without


def as_set(confirmed: int, ranges: tuple[tuple[int, int], ...] | list[tuple[int, int]]) -> set[int]:
    done = set(range(confirmed))
    for start, end in ranges:
        done.update(range(start, end))
    return done


def test_no_deferred_offsets_leave_the_cursor_as_it_is() -> None:
    assert without(10, [(12, 15)], []) == (10, ((12, 15),))


def test_deferred_offsets_are_holes_in_what_is_done() -> None:
    assert without(10, [(12, 15)], [3, 13, 20]) == (3, ((4, 10), (12, 13), (14, 15)))
    assert without(10, [], [0]) == (0, ((1, 10),))
    assert without(10, [], [9]) == (9, ())
    assert without(0, [(5, 6)], [5]) == (0, ())


@given(
    st.integers(0, 60),
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 10)), max_size=5),
    st.lists(st.integers(0, 120), max_size=12),
)
def test_what_is_done_is_exactly_the_confirmed_less_the_deferred(
    confirmed: int, raw: list[tuple[int, int]], deferred: list[int]
) -> None:
    ranges: list[tuple[int, int]] = []  # sorted, disjoint, never adjacent, above confirmed
    at = confirmed + 1
    for gap, length in raw:
        ranges.append((at + gap, at + gap + length))
        at += gap + length + 1
    first, pieces = without(confirmed, ranges, deferred)
    assert as_set(first, pieces) == as_set(confirmed, ranges) - set(deferred)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(pieces))
    assert all(first < start for start, _ in pieces)


def test_at_most_max_pieces_ranges_the_rest_is_delivered_again() -> None:
    deferred = list(range(0, 4 * MAX_PIECES, 2))
    first, pieces = without(4 * MAX_PIECES, [], deferred)
    assert first == 0 and len(pieces) == MAX_PIECES
    assert pieces[0] == (1, 2)
