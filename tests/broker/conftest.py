"""An in-process ``Broker`` on the ``clock`` fixture of ``nsqpy.testing``, and consumers that
record what they get."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.broker.broker import Broker
from nsqpy.broker.channel import Channel
from nsqpy.broker.client import Client
from nsqpy.broker.partition import Partition
from nsqpy.broker.topic import Topic
from nsqpy.protocol.state import SUBSCRIBED
from nsqpy.testing import FakeClock, nsqd_options
from nsqpy.testing import FrameSink as Sink

HOUR_NS = 3_600_000_000_000


@pytest.fixture
def broker(tmp_path: Path, clock: FakeClock) -> Iterator[Broker]:
    b = Broker(nsqd_options(tmp_path), clock=clock)
    yield b
    b.close()


def commit(broker: Broker) -> None:
    """What the server does at the end of a loop turn: flush, then let channels read."""
    flushed, failed = broker.flush()
    assert not failed
    broker.pump(flushed)


def consumer(broker: Broker, topic: str, channel: str, rdy: int) -> tuple[Client, Sink]:
    sink = Sink()
    client = Client(sink)
    client.state = SUBSCRIBED
    client.ready_count = rdy
    broker.client_connected(client)
    broker.subscribe(client, topic, channel).pump(broker.clock())  # (the server's RDY)
    return client, sink


def finish_all(group: Channel, client: Client, clock: FakeClock) -> None:
    part = group.parts[0]
    for offset, item in list(part.in_flight.items()):
        if item.client is client:
            part.finish(client, offset, b"%016x" % offset, clock())


def make_channel(broker: Broker, topic: str = "t", channel: str = "c") -> tuple[Topic, Channel]:
    t = broker.topic(topic)
    return t, broker.channel(t, channel)


def as_sole_replica(broker: Broker) -> Broker:
    """Cluster mode without the cluster: every role change is followed by what nsqd's
    replication publishes for a partition whose ISR is this node alone (a led partition
    writable and read to its log's end; a followed one closed). A partition held in a
    cluster is created closed, and only that side opens it."""
    broker.cluster_mode = True
    real = broker.set_role

    def set_role(topic: str, number: int, role: str, leader_epoch: int) -> Partition:
        part = real(topic, number, role, leader_epoch)
        part.writable = part.leading
        part.commit_bound = part.ack_bound = None if part.leading else 0
        if part.leading:
            broker.pump([part])
        return part

    broker.set_role = set_role  # type: ignore[method-assign,assignment]
    return broker
