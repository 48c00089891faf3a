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
