"""fsync bookkeeping: a concurrent sync() never calls unsynced bytes durable."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nsqpy.storage import PartitionLog
from nsqpy.storage import log as log_module
from nsqpy.storage.segment import Segment


class HookedSegment(Segment):
    """A segment that runs ``hook`` each time its ``end`` is assigned: the moment a sync
    thread could run between two statements of the loop thread's write."""

    hook: Callable[[], None] | None = None

    @property
    def end(self) -> int:
        return int(self.__dict__.get("_end", 0))

    @end.setter
    def end(self, value: int) -> None:
        self.__dict__["_end"] = value
        hook = self.__dict__.get("hook")
        if hook is not None:
            hook()


def test_sync_between_the_write_and_its_bookkeeping_fsyncs_what_it_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []

    def spy(fd: int) -> None:
        synced.append(fd)

    monkeypatch.setattr(log_module, "fsync_segment", spy)
    log = PartitionLog(tmp_path)
    try:
        old = log._segments[-1]
        fields: dict[str, Any] = {k: getattr(old, k) for k in Segment.__slots__}
        hooked = HookedSegment(**fields)
        log._segments[-1] = hooked
        seen: list[tuple[int, int]] = []

        def concurrent_sync() -> None:
            before = len(synced)
            seen.append((log.sync(), len(synced) - before))

        hooked.__dict__["hook"] = concurrent_sync
        log.append_bodies([b"acknowledged only after its fsync"] * 3)
        log.flush()
        hooked.__dict__["hook"] = None
        ((durable, fsyncs),) = seen
        # Whatever the concurrent sync calls durable, it has fsynced.
        assert durable == 0 or fsyncs == 1, (durable, fsyncs)
    finally:
        log.close()
