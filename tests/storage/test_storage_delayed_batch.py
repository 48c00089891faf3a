"""``DelayedStore.add_new``: a burst of DPUB'd entries in one transaction, all or none."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsqpy.errors import StorageError
from nsqpy.storage import DelayedEntry, DelayedStore


def test_add_new_inserts_only_what_is_missing(tmp_path: Path) -> None:
    store = DelayedStore(tmp_path / "delayed.sqlite")
    store.put("c", 5, 900, 3)  # leased or requeued: it keeps its time and attempts
    assert store.add_new("c", [(4, 100), (5, 100), (6, 200)]) == 2
    assert store.get("c", 5) == DelayedEntry("c", 5, 900, 3)
    assert store.due("c", 1000, 10) == [
        DelayedEntry("c", 4, 100, 0),
        DelayedEntry("c", 6, 200, 0),
        DelayedEntry("c", 5, 900, 3),
    ]
    assert store.add_new("c", []) == 0


def test_a_failed_add_new_adds_nothing_and_leaves_the_store_usable(tmp_path: Path) -> None:
    store = DelayedStore(tmp_path / "delayed.sqlite")
    store._db.execute("PRAGMA query_only = 1")  # every write fails, as on a full disk
    with pytest.raises(StorageError):
        store.add_new("c", [(1, 100), (2, 100)])
    store._db.execute("PRAGMA query_only = 0")
    assert store.count("c") == 0
    assert store.add_new("c", [(1, 100)]) == 1  # no transaction was left open
    store.put("c", 2, 100, 0)
    assert store.count("c") == 2
