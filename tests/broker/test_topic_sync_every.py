"""A topic's own fsync count (a cluster topic's ``syncdisk``): ``Topic.set_sync_every``
replaces the node's ``--sync-every`` count in the logs of the partitions held now and of
those opened later, keeps the node's time bound, never weakens ``always``, leaves the
channel cursors' pace, and None goes back to the node's setting."""

from __future__ import annotations

from pathlib import Path

from nsqpy.broker.partition import LogSettings
from nsqpy.broker.topic import Topic
from nsqpy.storage import PartitionLog, SyncPolicy


def topic_with(tmp_path: Path, policy: str, partitions: int = 2) -> Topic:
    settings = LogSettings(sync=SyncPolicy.parse(policy), segment_bytes=1 << 20, mem_queue_size=9)
    return Topic("t", tmp_path / "t", settings, partitions=partitions)


def due_after_one(topic: Topic, number: int) -> bool:
    """Whether one message written to partition ``number`` makes its fsync due now."""
    part = topic.partitions[number]
    part.publish([b"m"], timestamp=1)
    assert isinstance(part.log, PartitionLog)
    part.log.flush()
    due = part.log.sync_due(0)  # (a time before any write: only the count can make it due)
    part.log.sync()
    return due


def test_syncdisk_replaces_the_nodes_count_in_every_partition(tmp_path: Path) -> None:
    topic = topic_with(tmp_path, "every:2500,interval:2s")
    try:
        assert topic.sync_every == 2500
        assert not due_after_one(topic, 0)
        topic.set_sync_every(1)
        assert topic.sync_every == 1
        assert due_after_one(topic, 0) and due_after_one(topic, 1)
        for part in topic.partitions:
            assert isinstance(part.log, PartitionLog)
            assert part.log.policy == SyncPolicy(every_messages=1, every_ms=2000)
            assert part.sync.every_messages == 2500  # (channel cursors keep the node's pace)
        topic.set_sync_every(None)  # (syncdisk 0: the node's setting again)
        assert topic.sync_every == 2500
        assert not due_after_one(topic, 1)
    finally:
        topic.close()


def test_partitions_opened_later_take_the_topics_count(tmp_path: Path) -> None:
    topic = topic_with(tmp_path, "every:2500", partitions=1)
    try:
        topic.set_sync_every(3)
        (added,) = topic.expand(2, hold=True)
        assert isinstance(added.log, PartitionLog)
        assert added.log.policy.every_messages == 3
        assert added.sync.every_messages == 2500
    finally:
        topic.close()


def test_always_is_never_weakened_by_a_topic(tmp_path: Path) -> None:
    topic = topic_with(tmp_path, "always")
    try:
        topic.set_sync_every(4000)
        for part in topic.partitions:
            assert isinstance(part.log, PartitionLog)
            assert part.log.policy.always
    finally:
        topic.close()
