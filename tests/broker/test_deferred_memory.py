"""The in-memory deferred set of ephemeral channels: lazy deletion stays bounded."""

from __future__ import annotations

from nsqpy.broker.deferred import STALE_SLACK, MemoryDeferred


def test_removed_entries_do_not_pile_up_and_due_order_holds() -> None:
    d = MemoryDeferred()
    n = 3 * STALE_SLACK
    for offset in range(n):
        d.put(offset, 1_000 + offset, 0, 0, b"m%d" % offset)
        if offset % 10:
            assert d.remove(offset)  # finished: its heap entry is now stale
    assert d.count() == n // 10 + (1 if n % 10 else 0)
    assert len(d._heap) <= 2 * d.count() + STALE_SLACK + 1
    d.put(0, 10, 1, 0, b"again")  # re-put earlier: its first heap entry is now stale
    due = d.due(now=1_000 + n, limit=n)
    assert [x.offset for x in due] == [0, *range(10, n, 10)]
    assert (due[0].attempts, due[0].body) == (1, b"again")
    assert d.count() == 0 and d.next_due() is None
