"""A follower's channels and its leader's CURSORS (``Replication._adopt_cursors``): a full
set deletes the channels the leader no longer has, but not one made on this node (a SUB,
``/channel/create``) that no CURSORS named yet, since the leader may have built that set
before it had the channel too (nsqadmin creates a channel on every node, one after the
other)."""

from __future__ import annotations

from pathlib import Path

from nsqpy.broker.broker import Broker
from nsqpy.nsqd.replicas import Replication
from nsqpy.protocol.replication import ChannelCursor, Cursors
from nsqpy.testing import FakeClock, nsqd_options

TOPIC = "t"


def full(*names: str) -> Cursors:
    return Cursors(1, TOPIC, 0, tuple(ChannelCursor(n, 0) for n in names), True, 1)


def test_a_channel_made_here_outlives_a_full_cursors_that_never_named_it(
    tmp_path: Path, clock: FakeClock
) -> None:
    broker = Broker(nsqd_options(tmp_path), clock=clock)
    broker.cluster_mode = True
    try:
        broker.hold_partition(TOPIC, 1, 0, role="follower", leader_epoch=1)
        replication = Replication(broker, "F", "c1", lambda t, p: None, lambda part: None)
        topic = broker.topics[TOPIC]
        replication._adopt_cursors(full("old"))  # (a channel the leader has: made here)
        broker.channel(topic, "c")  # (/channel/create here, before the leader has it)
        replication._adopt_cursors(full("old"))  # (built before the leader had "c")
        assert sorted(topic.channels) == ["c", "old"], "made here, never named: kept"
        replication._adopt_cursors(full("c"))
        assert sorted(topic.channels) == ["c"], "one the leader no longer has: deleted"
        replication._adopt_cursors(full())
        assert sorted(topic.channels) == [], "named once, then gone from the leader: deleted"
    finally:
        broker.close()
