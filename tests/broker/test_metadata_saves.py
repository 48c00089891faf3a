"""``nsqd.dat`` is written once per timer tick for every creation meanwhile, and the start
finds on disk what a crash kept it from naming (or from forgetting)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsqpy.broker import metadata
from nsqpy.broker.broker import Broker
from nsqpy.testing import FakeClock, nsqd_options

from .conftest import commit


def test_creations_are_written_once_by_the_next_tick(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[int] = []
    real = metadata.write

    def counting(data_path: Path, doc: dict[str, object]) -> None:
        writes.append(len(doc["topics"]))  # type: ignore[arg-type]
        real(data_path, doc)

    monkeypatch.setattr(metadata, "write", counting)
    for i in range(300):
        broker.channel(broker.topic(f"t{i}"), "c")
    assert writes == []  # creating N topics no longer writes the whole file N times
    broker.retry_saves()  # the server's ticker
    broker.retry_saves()
    assert writes == [300]


def test_topics_and_channels_nsqd_dat_does_not_name_are_found_on_disk(
    tmp_path: Path, clock: FakeClock
) -> None:
    first = Broker(nsqd_options(tmp_path), clock=clock)
    first.channel(first.topic("named"), "c")
    first.persistence.write_metadata()
    fresh = first.topic("fresh", partitions=3)  # created, then the process died
    first.channel(fresh, "late")
    first.channel(first.topics["named"], "late")
    first.append(fresh, [b"kept"], 0, partition=2)
    commit(first)
    first.persistence.unlock()  # (no close: nothing more is written)

    again = Broker(nsqd_options(tmp_path), clock=clock)
    again.load_metadata()
    assert sorted(again.topics) == ["fresh", "named"]
    assert again.topics["fresh"].partition_count == 3
    assert sorted(again.topics["named"].channels) == ["c", "late"]
    assert again.topics["fresh"].partitions[2].log.high_watermark == 1
    assert "fresh" in json.loads((tmp_path / "data" / "nsqd.dat").read_text())["topics"][1]["name"]
    again.close()


def test_a_topic_deleted_just_before_a_crash_is_not_loaded_again(
    tmp_path: Path, clock: FakeClock
) -> None:
    first = Broker(nsqd_options(tmp_path), clock=clock)
    first.append(first.topic("gone"), [b"m"], 0)
    commit(first)
    first.persistence.write_metadata()
    saved = (tmp_path / "data" / "nsqd.dat").read_bytes()
    first.delete_topic("gone")
    (tmp_path / "data" / "nsqd.dat").write_bytes(saved)  # as if it died before the write
    first.persistence.unlock()

    again = Broker(nsqd_options(tmp_path), clock=clock)
    again.load_metadata()
    assert again.topics == {}
    again.close()


def test_a_document_taken_earlier_never_replaces_a_later_one(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server writes ``nsqd.dat`` in a worker thread (``metadata_write``) while the
    event loop may write it at once (a deleted topic): whichever comes last on disk, the
    file holds the later document, and an older write that failed meanwhile does not turn
    the health NOK."""
    path = broker.data_path / metadata.METADATA_FILE
    broker.topic("first")
    early = broker.metadata_write()
    assert early is not None
    assert broker.metadata_write() is None  # (one write in flight)
    broker.topic("second")
    broker.save_metadata()  # the loop's own write, while the thread's has not run yet
    early()
    broker.metadata_written(None)
    assert [t["name"] for t in json.loads(path.read_bytes())["topics"]] == ["first", "second"]

    broker.topic("third")
    late = broker.metadata_write()
    assert late is not None
    broker.save_metadata()
    monkeypatch.setattr(metadata, "write", refuse)
    late()  # (skipped: the file holds a later document)
    broker.metadata_written(None)
    assert broker.healthy and broker.metadata_write() is None
    broker.metadata_written(OSError(5, "an older write failed"))  # (the file is current)
    assert broker.healthy and broker.metadata_write() is None

    broker.topic("fourth")
    failing = broker.metadata_write()
    assert failing is not None
    with pytest.raises(OSError) as failed:
        failing()
    broker.metadata_written(failed.value)
    assert broker.health.startswith("NOK - failed to persist metadata: ")
    monkeypatch.undo()
    retry = broker.metadata_write()  # owed again
    assert retry is not None
    retry()
    broker.metadata_written(None)
    assert broker.healthy
    assert [t["name"] for t in json.loads(path.read_bytes())["topics"]][-1] == "fourth"


def refuse(data_path: Path, doc: dict[str, object]) -> None:
    raise OSError(28, "No space left on device")


def test_a_write_that_could_not_start_leaves_the_next_one_free(broker: Broker) -> None:
    broker.topic("t")
    assert broker.metadata_write() is not None
    broker.metadata_written(RuntimeError("cannot schedule new futures after shutdown"))
    again = broker.metadata_write()  # (owed still, and no write is taken for running)
    assert again is not None
    again()
    broker.metadata_written(None)
    assert broker.healthy and broker.metadata_write() is None


def test_no_write_lands_once_the_data_path_is_let_go(tmp_path: Path, clock: FakeClock) -> None:
    """A write taken before the stop and run after it would replace the file of whoever
    took the data path since: it writes nothing."""
    first = Broker(nsqd_options(tmp_path), clock=clock)
    first.topic("old")
    queued = first.metadata_write()
    assert queued is not None
    first.persistence.unlock()
    again = Broker(nsqd_options(tmp_path), clock=clock)
    again.topic("new")
    again.save_metadata()
    queued()
    saved = json.loads((tmp_path / "data" / "nsqd.dat").read_bytes())
    assert [t["name"] for t in saved["topics"]] == ["new"]
    again.close()
