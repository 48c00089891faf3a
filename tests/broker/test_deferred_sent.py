"""What a leader sends followers of a channel's deferred set (``Deferred.sent``): its first
entries and the offsets of the rest. Sent with every CURSORS of the partition, so a durable
channel looks its rows up in the delayed store again only after they changed."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqpy.broker.deferred import Deferred, DurableDeferred, Entry, MemoryDeferred
from nsqpy.storage import DelayedStore

LIMIT = 3


def looked_up(d: Deferred) -> tuple[tuple[Entry, ...], tuple[int, ...]]:
    """The reference: read now, whatever was read before."""
    entries = tuple(d.entries(LIMIT))
    rest = tuple(o for o in d.offsets() if entries and o > entries[-1][0])
    return entries, rest if len(entries) == LIMIT else ()


offsets = st.integers(0, 7)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), offsets, st.integers(1, 9)),
        st.tuples(st.just("add_new"), st.lists(offsets, max_size=3), st.integers(1, 9)),
        st.tuples(st.just("remove"), offsets, st.just(0)),
        st.tuples(st.just("remove_from"), offsets, st.just(0)),
        st.tuples(
            st.just("replace"), st.lists(offsets, max_size=4, unique=True), st.integers(1, 9)
        ),
        st.tuples(st.just("clear"), st.just(0), st.just(0)),
        st.tuples(st.just("sent"), st.just(0), st.just(0)),
    ),
    max_size=30,
)


def apply(d: Deferred, op: str, arg: object, n: int) -> None:
    if op == "put":
        d.put(arg, 1_000 + n, n, 0, b"")  # type: ignore[arg-type]
    elif op == "add_new":
        d.add_new([(o, 2_000 + n, 0, b"") for o in arg])  # type: ignore[attr-defined]
    elif op == "remove":
        d.remove(arg)  # type: ignore[arg-type]
    elif op == "remove_from":
        d.remove_from(arg)  # type: ignore[arg-type]
    elif op == "replace":
        d.replace([(o, 3_000 + n, n) for o in arg])  # type: ignore[attr-defined]
    elif op == "clear":
        d.clear()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=operations)
def test_sent_is_always_what_the_set_holds_now(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, object, int]]
) -> None:
    store = DelayedStore(tmp_path_factory.mktemp("sent") / "delayed.db")
    try:
        for d in (DurableDeferred(store, "c"), MemoryDeferred()):
            for op, arg, n in ops:
                apply(d, op, arg, n)
                assert d.sent(LIMIT) == looked_up(d), op
    finally:
        store.close()


def test_an_unchanged_set_is_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DelayedStore(tmp_path / "delayed.db")
    reads: list[str] = []

    def counted(name: str) -> None:
        real = getattr(store, name)

        def read(*args: object) -> object:
            reads.append(name)
            return real(*args)

        monkeypatch.setattr(store, name, read)

    for name in ("entries", "offsets", "count"):
        counted(name)
    try:
        d = DurableDeferred(store, "c")
        for offset in range(5):
            d.put(offset, 1_000, 0, 0, b"")
        first = d.sent(LIMIT)
        assert first == (((0, 1_000, 0), (1, 1_000, 0), (2, 1_000, 0)), (3, 4))
        reads.clear()
        assert [d.sent(LIMIT) for _ in range(100)] == [first] * 100
        assert reads == [], "read again though nothing changed"
        d.remove(4)
        assert d.sent(LIMIT) == (first[0], (3,)) and "entries" in reads
    finally:
        store.close()
