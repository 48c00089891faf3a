"""Every partition keeps its channel cursors in ``p<N>/cursors``; a data path written when
partition 0 kept them in ``<topic dir>/cursors`` is moved to that layout at start."""

from __future__ import annotations

import shutil
from pathlib import Path

from nsqpy.broker.broker import Broker
from nsqpy.testing import FakeClock, nsqd_options

from .conftest import commit, consumer, finish_all


def test_partition_0s_cursors_from_the_old_layout_are_moved_and_kept(
    tmp_path: Path, clock: FakeClock
) -> None:
    first = Broker(nsqd_options(tmp_path), clock=clock)
    topic = first.topic("t", partitions=2)
    first.append(topic, [b"a", b"b", b"c"], 0, partition=0)
    commit(first)
    client, sink = consumer(first, "t", "c", 10)
    assert sorted(sink.bodies()) == [b"a", b"b", b"c"]
    finish_all(first.topics["t"].channels["c"], client, clock)
    first.close()
    topic_dir = tmp_path / "data" / "topics" / "topic-t"
    new = topic_dir / "p0" / "cursors"
    assert sorted(p.name for p in new.iterdir()) == ["channel-c.cursor"]
    assert (topic_dir / "p1" / "cursors" / "channel-c.cursor").exists()
    shutil.move(new, topic_dir / "cursors")  # as an older nsqpy left it

    again = Broker(nsqd_options(tmp_path), clock=clock)
    again.load_metadata()
    assert not (topic_dir / "cursors").exists()
    assert sorted(p.name for p in new.iterdir()) == ["channel-c.cursor"]
    channel = again.topics["t"].channels["c"]
    assert channel.parts[0].cursor.confirmed == 3  # nothing delivered again
    again.close()
