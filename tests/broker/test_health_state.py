"""The pure parts behind /ping and deferred_count: ``Health`` and ``PublishedDeferred``."""

from __future__ import annotations

import errno
import logging
import os
import sys

import pytest

from nsqpy.broker.dpubs import MAX_NOTES, NoteBudget, PublishedDeferred
from nsqpy.broker.health import Health

FULL = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
METADATA = "failed to persist metadata"
CURSOR = "failed to save cursor /d/channel-c.cursor"


def levels(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.levelname for r in caplog.records]


def test_two_paths_failing_in_turn_log_once_each(caplog: pytest.LogCaptureFixture) -> None:
    health = Health()
    assert health.error == ""
    with caplog.at_level(logging.INFO, logger="nsqpy.broker"):
        for _ in range(100):  # both retried every loop turn, in turn: one line each
            health.failed(METADATA, FULL)
            health.failed(CURSOR, FULL)
        assert levels(caplog) == ["ERROR", "ERROR"]
        assert health.error == f"{CURSOR}: {FULL}"  # the most recent still failing
        health.failed(METADATA, FULL)
        assert health.error == f"{METADATA}: {FULL}"
    assert health.failing() == [f"{CURSOR}: {FULL}", f"{METADATA}: {FULL}"]


def test_a_success_clears_only_its_own_failure(caplog: pytest.LogCaptureFixture) -> None:
    health = Health()
    health.failed(METADATA, FULL)
    health.failed(CURSOR, FULL)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="nsqpy.broker"):
        health.ok()  # a write of something else works: nsqd.dat and the cursor are unsaved
        health.ok("failed to save cursor /d/other.cursor")
        assert health.error == f"{CURSOR}: {FULL}"
        health.ok(CURSOR)
        assert health.error == f"{METADATA}: {FULL}"  # still NOK: the metadata is unsaved
        health.ok(METADATA)
    assert health.error == ""
    assert [r.getMessage() for r in caplog.records] == [
        f"resolved: {CURSOR}",
        f"resolved: {METADATA}; health is OK again",
    ]


def test_a_failure_nothing_retries_is_cleared_by_the_next_good_write() -> None:
    health = Health()
    health.failed(METADATA, FULL)
    health.failed_once("failed to create topic t", FULL)
    assert health.error.startswith("failed to create topic t: ")
    health.ok()  # a publish was written
    assert health.error == f"{METADATA}: {FULL}"
    health.failed_once("failed to create topic t", FULL)
    health.ok(METADATA)  # any write that works clears it too
    assert health.error == ""


def test_forget_drops_the_failure_of_something_deleted() -> None:
    health = Health()
    health.failed(CURSOR, FULL)
    health.forget("failed to save cursor /d/unknown.cursor")
    assert health.error
    health.forget(CURSOR)  # its channel was deleted: the cursor will never be saved
    assert health.error == ""


def test_published_deferred_notes_one_entry_per_publish() -> None:
    notes = PublishedDeferred()
    assert not notes
    notes.note(3, 3, 1000)
    notes.note(7, 9, 2000)  # an MPUB with a delay: one note for the three
    assert len(notes) == 2
    assert notes.between(0, 3) == []
    assert notes.between(3, 8) == [(3, 1000), (7, 2000)]
    assert notes.between(9, 100) == [(9, 2000)]
    notes.forget_from(8)  # the write of 8.. failed
    assert notes.between(0, 100) == [(3, 1000), (7, 2000)]
    notes.forget_below(4)  # every channel has taken 3
    assert notes.between(0, 100) == [(7, 2000)]
    notes.forget_below(100)
    assert not notes


def test_published_deferred_is_bounded_per_partition_and_per_broker() -> None:
    budget = NoteBudget(MAX_NOTES + 5)
    one, two = PublishedDeferred(budget), PublishedDeferred(budget)
    for offset in range(MAX_NOTES + 10):
        one.note(offset, offset, 1)
    assert len(one) == MAX_NOTES  # the rest is deferred when read
    for offset in range(10):
        two.note(offset, offset, 1)
    assert len(two) == 5 and budget.left == 0  # the broker's budget is spent
    one.forget_below(100)
    two.note(10, 10, 1)
    assert len(two) == 6 and budget.left == 99
    one.clear()  # its topic is deleted
    assert budget.left == MAX_NOTES + 5 - 6


def test_published_deferred_stays_compact() -> None:
    notes = PublishedDeferred()
    for i in range(MAX_NOTES):
        notes.note(2 * i, 2 * i, 10 + i)  # alternating PUB and DPUB
    arrays = notes._first, notes._last, notes._at
    assert sum(sys.getsizeof(a) for a in arrays) < 2 * 1024 * 1024  # (was 6.6 MB)
    taken = 0
    for start in range(0, 2 * MAX_NOTES, 1000):  # channels take them as they arrive
        taken += len(notes.between(start, start + 1000))
        notes.forget_below(start + 1000)
    assert taken == MAX_NOTES
    assert not notes and len(notes._first) == 0
