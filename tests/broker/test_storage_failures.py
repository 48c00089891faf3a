"""Writes the disk refuses (a full disk): nothing escapes, nothing is inherited, all is retried.

Each test makes one store refuse its writes (monkeypatched to raise as it does on a full
disk), checks what the broker did meanwhile, gives the space back and checks that the
broker's timers (``scan``, ``retry_saves``) put everything right and the health is OK.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import NoReturn

import pytest

from nsqpy.broker import metadata
from nsqpy.broker.broker import Broker
from nsqpy.broker.health import StorageFailed
from nsqpy.broker.policy import PolicyFile
from nsqpy.errors import StorageError
from nsqpy.storage import DelayedStore
from nsqpy.testing import FakeClock, nsqd_options

from .conftest import HOUR_NS, commit, consumer, make_channel

FULL = "database or disk is full"


def refuse_store(*args: object) -> NoReturn:
    raise StorageError(f"delayed store: {FULL}")


def refuse_file(*args: object) -> NoReturn:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_dead_letter_whose_deferred_entry_cannot_be_removed_stays_leased(
    broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    t, group = make_channel(broker)
    broker.features.set_max_attempts(t, "c", 1, "")
    broker.publish(t, [b"poison"], clock() + 100_000_000)
    commit(broker)
    client, sink = consumer(broker, "t", "c", 1)
    client.msg_timeout_ns = 1_000_000_000
    clock.advance_ms(200)
    broker.scan()  # due: delivered from the deferred set, its lease stored
    assert len(sink.frames) == 1
    part = group.parts[0]

    monkeypatch.setattr(DelayedStore, "remove", refuse_store)  # the disk is full
    monkeypatch.setattr(DelayedStore, "put", refuse_store)
    clock.advance_ms(1500)
    broker.scan()  # timed out on its last attempt: dead-lettered; the entry stays leased
    failing = "\n".join(broker.health_state.failing())
    assert "failed to remove a dead-lettered deferred message of channel t/c" in failing
    assert "failed to deliver a deferred message of channel t/c" in failing  # its new lease
    assert broker.topics["t.dead"].message_count == 1
    assert part.deferred.offsets() == [0] and not part.in_flight
    broker.client_gone(client)  # nothing escapes that path either

    monkeypatch.undo()
    _, sink = consumer(broker, "t", "c", 1)
    broker.scan()  # its lease ended: due again (at least once)
    assert sink.bodies() == [b"poison"]
    assert broker.healthy  # the store took the new lease: it works again


@pytest.mark.parametrize("when", ["created again", "retried", "after a restart"])
def test_a_channel_deleted_on_a_full_disk_leaves_nothing_to_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    clock = FakeClock()
    broker = Broker(nsqd_options(tmp_path), clock=clock)
    t, group = make_channel(broker)
    broker.publish(t, [b"later"], clock() + HOUR_NS)
    commit(broker)
    assert group.deferred_count == 1
    store = t.partitions[0].delayed
    assert store is not None

    monkeypatch.setattr(DelayedStore, "clear", refuse_store)
    assert broker.delete_channel(t, "c")
    assert "failed to clear the deferred messages of channel t/c" in broker.health
    monkeypatch.undo()

    if when == "retried":
        broker.retry_saves()
        assert store.count("c") == 0 and broker.healthy
    elif when == "after a restart":
        broker.close()
        broker = Broker(nsqd_options(tmp_path), clock=clock)
        broker.load_metadata()
        t = broker.topics["t"]
    try:
        group = broker.channel(t, "c")
        assert (group.deferred_count, group.depth) == (0, 0)  # nothing of the old one
        store = t.partitions[0].delayed
        assert store is not None and store.count("c") == 0
        assert broker.healthy
    finally:
        broker.close()


def test_a_setting_that_failed_to_be_saved_is_saved_by_the_timer(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    t, _ = make_channel(broker)
    path = broker.data_path / "features.json"
    monkeypatch.setattr(PolicyFile, "save", refuse_file)
    with pytest.raises(StorageFailed):
        broker.features.set_ttl(t, 5000)
    assert "failed to save features.json" in broker.health
    broker.retry_saves()  # still full: still NOK, not logged again
    monkeypatch.undo()

    broker.retry_saves()
    assert json.loads(path.read_bytes())["topics"]["t"]["ttl_ms"] == 5000
    assert broker.healthy

    monkeypatch.setattr(PolicyFile, "save", refuse_file)
    broker.delete_topic("t")  # its settings must not outlive it in the file
    assert not broker.healthy
    monkeypatch.undo()
    broker.retry_saves()
    assert "t" not in json.loads(path.read_bytes())["topics"]
    assert broker.healthy


def test_unsaved_metadata_keeps_the_health_nok_whatever_else_is_written(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    t, _ = make_channel(broker)
    monkeypatch.setattr(metadata, "write", refuse_file)
    t.pause()
    broker.save_metadata()
    broker.publish(t, [b"m"])
    commit(broker)  # the log takes a write; nsqd.dat is still unsaved
    assert broker.health.startswith("NOK - failed to persist metadata: ")
    monkeypatch.undo()
    broker.retry_saves()
    assert broker.healthy
    saved = json.loads((broker.data_path / metadata.METADATA_FILE).read_bytes())
    assert saved["topics"][0]["paused"] is True
