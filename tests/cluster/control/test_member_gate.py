"""An in-process nsqd of a cluster (real etcd) between the moment its watch brings a topic
this node is to lead and the moment its member's round applies it: a client that asks in
that moment (another client created the topic an instant before) is served here, not sent
away with ``E_FAILED_ON_NOT_LEADER``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nsqpy.cluster.etcd import Etcd, PutOp
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import Replicas, TopicMeta
from nsqpy.nsqd.gate import HERE
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing.clock import FakeClock
from nsqpy.testing.etcd import EtcdCluster
from nsqpy.testing.inprocess import nsqd_options

from .conftest import bounded


async def test_a_topic_the_watch_brought_is_led_here_before_the_member_round_runs(
    tmp_path: Path, etcd_single: EtcdCluster, etcd: Etcd, keys: Keys
) -> None:
    opts = nsqd_options(
        tmp_path,
        etcd_endpoints=",".join(etcd_single.endpoints),
        cluster_id=keys.cluster_id,
        rpc_address="127.0.0.1:0",
    )
    server = NsqdServer(opts, clock=FakeClock())
    await server.start()
    try:
        cluster = server.cluster
        assert cluster is not None and cluster.view is not None
        topic = "raced"
        seen: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def on_change() -> None:
            # Called by the view as the watch delivers, before the member's round (which
            # only wakes up here) has applied anything: what a SUB arriving now is told.
            snap = cluster.view.snapshot() if cluster.view else None
            if snap and topic in snap.topics and snap.partitions(topic) and not seen.done():
                seen.set_result(cluster.where(topic))

        cluster.view.listeners.append(on_change)
        me = cluster.node_id
        await etcd.txn(
            [],
            [
                PutOp(keys.topic_meta(topic), TopicMeta(partition_num=1, replicator=1).to_json()),
                PutOp(keys.replicas(topic, 0), Replicas(me, (me,)).to_json()),
            ],
        )
        assert await asyncio.wait_for(seen, 10) == HERE
        broker_topic = server.broker.get_topic(topic)
        assert broker_topic is not None and broker_topic.partitions[0].leading
    finally:
        await bounded(server.stop())
