"""A partition this node followed and now leads: what it took as a follower and had not
fsynced is synced on the node's --sync-timeout, though nothing is published to it (the
follower's own schedule ended with its link; a failover is when that matters)."""

from __future__ import annotations

from pathlib import Path

from nsqpy.broker.partition import FOLLOWER, LEADER
from nsqpy.nsqd.server import NsqdServer
from nsqpy.storage import PartitionLog
from nsqpy.testing import eventually, nsqd_options


async def test_a_promoted_partition_is_fsynced_by_the_time_bound(tmp_path: Path) -> None:
    server = NsqdServer(nsqd_options(tmp_path, sync_every=1_000_000, sync_timeout_ms=200))
    await server.start()
    try:
        broker = server.broker
        part = broker.hold_partition("t", 1, 0, role=FOLLOWER, leader_epoch=1)
        log = part.log
        assert isinstance(log, PartitionLog)
        log.begin_epoch(1)  # (what a follower takes: records of the leader's epoch)
        log.append_bodies([b"a", b"b", b"c"])
        log.flush()
        assert (log.flushed_offset, log.durable_offset) == (3, 0)
        broker.set_role("t", 0, LEADER, 2)  # (promoted: nothing published since)
        await eventually(lambda: log.durable_offset == 3, 5)
    finally:
        await server.stop()
