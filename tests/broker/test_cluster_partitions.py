"""A node that holds some partitions of a topic and leads some of those (cluster mode).

Topic ``t`` has 4 partitions in the cluster; this node holds 1 and 3. Writes go to led
partitions only (``NotLeader`` otherwise), a follower's channel parts deliver nothing, a
message ID of a partition not held is "not in flight", SUB to a partition not held is
``TopicNotExist``; released partitions keep their offset reservation, and what is held
survives a restart (as followers, in cluster mode, until the cluster layer says more).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.broker.broker import Broker, PartitionCountMismatch
from nsqpy.broker.client import Client
from nsqpy.broker.stats import stats
from nsqpy.broker.topic import Topic
from nsqpy.errors import (
    FinFailed,
    NotLeader,
    NotWritable,
    ReqFailed,
    StorageError,
    TopicNotExist,
    TouchFailed,
)
from nsqpy.protocol.message import OFFSET_BITS
from nsqpy.protocol.state import SUBSCRIBED
from nsqpy.storage import Entry, PartitionLog
from nsqpy.testing import FakeClock, FrameSink, nsqd_options

from .conftest import as_sole_replica, commit


def hold_t(broker: Broker, roles: dict[int, str], epoch: int = 1) -> Topic:
    """Topic ``t`` of 4 partitions, holding ``roles`` (partition -> role) here."""
    for number, role in roles.items():
        broker.hold_partition("t", 4, number, role=role, leader_epoch=epoch)
    return broker.topics["t"]


def key_for(partition: int, count: int = 4) -> bytes:
    """A partition key that hashes to ``partition`` (CRC-32 modulo the count)."""
    return next(k for i in range(1000) if zlib.crc32(k := b"k%d" % i) % count == partition)


def subscriber(broker: Broker, partition: int = -1, rdy: int = 100) -> tuple[Client, FrameSink]:
    sink = FrameSink()
    client = Client(sink)
    client.state = SUBSCRIBED
    client.ready_count = rdy
    broker.client_connected(client)
    broker.subscribe(client, "t", "c", partition=partition).pump(broker.clock())
    return client, sink


def partitions_of(sink: FrameSink) -> list[int]:
    return [int(frame[8 + 10 : 8 + 26], 16) >> OFFSET_BITS for frame in sink.frames]


@pytest.fixture
def cluster_broker(tmp_path: Path, clock: FakeClock) -> Iterator[Broker]:
    b = as_sole_replica(Broker(nsqd_options(tmp_path), clock=clock))
    yield b
    b.close()


def test_a_topic_held_in_part_has_only_those_partitions(cluster_broker: Broker) -> None:
    topic = hold_t(cluster_broker, {3: "leader", 1: "leader"})
    assert topic.partition_count == 4
    assert [p.number for p in topic.partitions] == [1, 3]
    assert topic.partition(0) is None and topic.partition(3) is topic.partitions[1]
    folder = cluster_broker.data_path / "topics" / "topic-t"
    assert sorted(p.name for p in folder.iterdir()) == ["p1", "p3"]
    with pytest.raises(PartitionCountMismatch):
        cluster_broker.hold_partition("t", 2, 0, role="leader", leader_epoch=1)
    with pytest.raises(ValueError):
        cluster_broker.hold_partition("t", 4, 4, role="leader", leader_epoch=1)
    with pytest.raises(ValueError):
        cluster_broker.hold_partition("t", 4, 2, role="boss", leader_epoch=1)
    assert [p.number for p in topic.partitions] == [1, 3]


def test_publishes_go_round_robin_over_the_led_partitions_only(cluster_broker: Broker) -> None:
    topic = hold_t(cluster_broker, {0: "follower", 1: "leader", 2: "follower", 3: "leader"})
    placed = [cluster_broker.append(topic, [b"m%d" % i]).partition.number for i in range(6)]
    assert sorted(placed) == [1, 1, 1, 3, 3, 3] and placed[0] != placed[1]
    assert topic.partition(0).log.high_watermark == 0  # type: ignore[union-attr]
    cluster_broker.set_role("t", 3, "follower", 1)
    assert {cluster_broker.append(topic, [b"x"]).partition.number for _ in range(3)} == {1}
    cluster_broker.set_role("t", 1, "follower", 1)
    with pytest.raises(NotLeader) as refused:
        cluster_broker.append(topic, [b"none led"])
    assert refused.value.code == "E_FAILED_ON_NOT_LEADER" and not refused.value.fatal


def test_a_write_to_a_partition_not_led_here_is_not_leader(cluster_broker: Broker) -> None:
    topic = hold_t(cluster_broker, {1: "leader", 3: "follower"})
    assert cluster_broker.append(topic, [b"a"], partition=1).partition.number == 1
    for partition in (3, 0):  # followed; not held
        with pytest.raises(NotLeader):
            cluster_broker.append(topic, [b"b"], partition=partition)
    with pytest.raises(IndexError):  # (no such partition at all: as on a single node)
        cluster_broker.append(topic, [b"c"], partition=4)
    # a key hashes over all 4 partitions: onto the led one it goes, else NotLeader
    assert cluster_broker.append(topic, [b"k"], key=key_for(1)).partition.number == 1
    for partition in (3, 2):
        with pytest.raises(NotLeader):
            cluster_broker.append(topic, [b"k"], key=key_for(partition))
    ends = [p.log.high_watermark for p in topic.partitions]
    batch = [Entry(b"led", partition_key=key_for(1)), Entry(b"followed", partition_key=key_for(3))]
    with pytest.raises(NotLeader):  # refused whole: nothing of it is appended
        cluster_broker.append_entries(topic, batch)
    assert [p.log.high_watermark for p in topic.partitions] == ends


def test_an_mpub_ext_one_of_whose_partitions_is_not_writable_is_refused_whole(
    cluster_broker: Broker,
) -> None:
    """Keys over two led partitions, one of which takes no write (its ISR is a minority):
    E_FAILED_ON_NOT_WRITABLE, and nothing of the batch is appended to the other either (a
    client told it failed publishes it again: a stored half would be a duplicate)."""
    topic = hold_t(cluster_broker, {1: "leader", 3: "leader"})
    part3 = topic.partition(3)
    assert part3 is not None
    part3.writable = False
    batch = [Entry(b"one", partition_key=key_for(1)), Entry(b"three", partition_key=key_for(3))]
    with pytest.raises(NotWritable):
        cluster_broker.append_entries(topic, batch)
    commit(cluster_broker)
    assert [p.log.high_watermark for p in topic.partitions] == [0, 0]


def test_ids_of_partitions_not_held_fail_as_unknown_ids(cluster_broker: Broker) -> None:
    hold_t(cluster_broker, {1: "leader", 3: "leader"})
    topic = cluster_broker.topics["t"]
    client, sink = subscriber(cluster_broker)
    for _ in range(4):
        cluster_broker.append(topic, [b"m"])
    commit(cluster_broker)
    assert sorted(partitions_of(sink)) == [1, 1, 3, 3]
    channel = topic.channels["c"]
    assert [p.number for p in channel.parts] == [1, 3]
    now = cluster_broker.clock()
    foreign = b"%016x" % (2 << OFFSET_BITS)
    with pytest.raises(FinFailed, match="not in flight"):
        channel.finish(client, 2, 0, foreign, now)
    with pytest.raises(ReqFailed, match="not in flight"):
        channel.requeue(client, 2, 0, foreign, 0, now)
    with pytest.raises(TouchFailed, match="not in flight"):
        channel.touch(client, 2, 0, foreign, now, 10**12)
    ours = [frame[8 + 10 : 8 + 26] for frame in sink.frames]
    errors = channel.finish_ids(client, [foreign, *ours], now)
    assert [e.code for e in errors] == ["E_FIN_FAILED"]
    assert channel.in_flight_count == 0 and client.in_flight_count == 0


def test_sub_to_a_partition_not_held_is_topic_not_exist(cluster_broker: Broker) -> None:
    """As youzan's nsqd, which has no such partition: E_TOPIC_NOT_EXIST, on which youzan's
    consumer looks the partition's node up again."""
    hold_t(cluster_broker, {1: "leader", 3: "follower"})
    for partition in (0, 2, 4):
        with pytest.raises(TopicNotExist):
            subscriber(cluster_broker, partition)
    client, _ = subscriber(cluster_broker, 3)
    channel = cluster_broker.topics["t"].channels["c"]
    assert [p.consumers for p in channel.parts] == [[], [client]]


def test_a_follower_delivers_nothing_whatever_its_log_holds(
    cluster_broker: Broker, clock: FakeClock
) -> None:
    topic = hold_t(cluster_broker, {1: "follower"})
    _, sink = subscriber(cluster_broker)
    part = topic.partitions[0]
    part.publish([b"a", b"b"], clock())  # (what replication will append)
    part.publish([b"later"], clock(), deliver_at=clock() + 1_000_000)
    part.dpubs.note(2, 2, clock() + 1_000_000)
    part.log.flush()
    cluster_broker.pump([topic])
    clock.advance_ms(10)
    cluster_broker.scan()
    cluster_broker.pump([topic])
    # (a follower is bound by the committed offset its leader sent: none here)
    assert sink.frames == [] and part.committed_offset == 0
    cluster_broker.set_role("t", 1, "leader", 2)  # delivered at once
    cluster_broker.scan()
    assert sorted(sink.bodies()) == [b"a", b"b", b"later"]


def test_a_follower_takes_its_leaders_cursor_and_delivers_from_it_once_it_leads(
    cluster_broker: Broker, clock: FakeClock
) -> None:
    """``ChannelPartition.adopt_cursor`` (what CURSORS from the leader do): below the
    confirmed offset and in the ranges is done; deferred entries a past leadership left go
    (the read meets their records again); the new leader delivers only the rest."""
    topic = hold_t(cluster_broker, {1: "follower"})
    part = topic.partitions[0]
    part.publish([b"m%d" % i for i in range(10)], clock())  # (what replication appends)
    part.log.flush()
    channel = cluster_broker.channel(topic, "c")
    cpart = channel.part(1)
    assert cpart is not None
    assert cpart.adopt_cursor(4, [(6, 8)])
    assert not cpart.adopt_cursor(4, [(6, 8)]), "the same cursor again changes nothing"
    assert (cpart.cursor.confirmed, cpart.cursor.ranges) == (4, [(6, 8)])
    _, sink = subscriber(cluster_broker)
    cluster_broker.set_role("t", 1, "leader", 2)
    cluster_broker.scan()
    assert sorted(sink.bodies()) == [b"m4", b"m5", b"m8", b"m9"]


def test_a_follower_takes_its_leaders_delayed_store_and_keeps_the_delays_once_it_leads(
    cluster_broker: Broker, clock: FakeClock
) -> None:
    """The leader's delayed store goes along with its cursor (CURSORS): a message REQ'd with
    a delay (its offset confirmed in the cursor) and a DPUB the leader's read has not
    reached (not confirmed) are delivered by the new leader at their times, each once,
    and not before."""
    topic = hold_t(cluster_broker, {1: "follower"})
    part = topic.partitions[0]
    now = clock()
    part.publish([b"m%d" % i for i in range(9)], now)
    part.publish([b"dpub"], now, deliver_at=now + 3_000_000_000)  # offset 9
    part.log.flush()
    cpart = cluster_broker.channel(topic, "c").part(1)
    assert cpart is not None
    deferred = [(2, now + 5_000_000_000, 1), (9, now + 3_000_000_000, 0)]
    assert cpart.adopt_cursor(4, [(6, 8)], deferred)
    assert not cpart.adopt_cursor(4, [(6, 8)], deferred), "the same again changes nothing"
    assert cpart.deferred_count == 2 and cpart.deferred.entries(10) == deferred
    assert cpart.adopt_cursor(4, [(6, 8)], deferred[:1]), "a changed delayed store is taken"
    assert cpart.adopt_cursor(4, [(6, 8)], deferred)
    client, sink = subscriber(cluster_broker)
    cluster_broker.set_role("t", 1, "leader", 2)
    cluster_broker.scan()
    assert sorted(sink.bodies()) == [b"m4", b"m5", b"m8"], "nothing deferred comes early"
    clock.advance_ms(3_000)
    cluster_broker.scan()
    assert sink.bodies()[3:] == [b"dpub"]
    clock.advance_ms(2_000)
    cluster_broker.scan()
    assert sink.bodies()[4:] == [b"m2"]
    attempts = int.from_bytes(sink.frames[-1][8 + 8 : 8 + 10], "big")
    assert attempts == 2, "the REQ'd message's attempts carry over"
    channel = topic.channels["c"]
    ids = [frame[8 + 10 : 8 + 26] for frame in sink.frames]
    assert channel.finish_ids(client, ids, clock()) == []
    clock.advance_ms(60_000)
    cluster_broker.scan()
    assert len(sink.frames) == 5, "the read never delivers the DPUB again"
    assert (channel.in_flight_count, channel.deferred_count, channel.depth) == (0, 0, 0)


def test_a_taken_over_dpub_finished_before_the_read_reaches_it_is_not_delivered_again(
    cluster_broker: Broker, clock: FakeClock
) -> None:
    """A DPUB in the adopted delayed store that comes due, is delivered and finished while
    the new leader's read is still behind its record: the read skips the record."""
    topic = hold_t(cluster_broker, {1: "follower"})
    part = topic.partitions[0]
    now = clock()
    part.publish([b"m0", b"m1"], now)
    part.publish([b"dpub"], now, deliver_at=now + 1_000_000_000)  # offset 2
    part.log.flush()
    cpart = cluster_broker.channel(topic, "c").part(1)
    assert cpart is not None
    assert cpart.adopt_cursor(0, [], [(2, now + 1_000_000_000, 0)])
    client, sink = subscriber(cluster_broker, rdy=1)
    cluster_broker.set_role("t", 1, "leader", 2)
    channel = topic.channels["c"]
    finished = 0
    for _ in range(6):  # one at a time (RDY 1): the scan's due messages, then the read's
        clock.advance_ms(1_000)
        cluster_broker.scan()
        channel.pump(clock())
        ids = [frame[8 + 10 : 8 + 26] for frame in sink.frames[finished:]]
        assert channel.finish_ids(client, ids, clock()) == []
        finished += len(ids)
    assert sink.bodies()[:3] == [b"m0", b"dpub", b"m1"], "due before the read reached it"
    assert len(sink.frames) == 3, "each once"


def test_stepping_down_drops_the_window_and_closes_consumers_of_a_topic_led_no_more(
    cluster_broker: Broker, clock: FakeClock
) -> None:
    topic = hold_t(cluster_broker, {1: "leader", 3: "leader"})
    client, sink = subscriber(cluster_broker)
    for number in (1, 3):
        cluster_broker.append(topic, [b"x"], partition=number)
    commit(cluster_broker)
    channel = topic.channels["c"]
    assert channel.in_flight_count == 2 and client.in_flight_count == 2
    cluster_broker.set_role("t", 1, "follower", 2)
    assert channel.in_flight_count == 1, "partition 1's message is the new leader's now"
    assert not sink.closed, "partition 3 is still led here"
    cluster_broker.set_role("t", 3, "follower", 2)
    assert channel.in_flight_count == 0 and client.in_flight_count == 0
    assert sink.closed, "no partition of the topic is led here: the consumer reconnects"


def test_leading_begins_the_epoch_in_the_log(cluster_broker: Broker) -> None:
    topic = hold_t(cluster_broker, {1: "leader"}, epoch=1)
    part = topic.partitions[0]
    log = part.log
    assert isinstance(log, PartitionLog)
    assert (part.role, part.leader_epoch, log.epoch, log.epochs()) == ("leader", 1, 1, [(1, 0)])
    cluster_broker.append(topic, [b"a", b"b", b"c"])
    commit(cluster_broker)
    cluster_broker.set_role("t", 1, "follower", 2)
    assert (part.role, part.leader_epoch, log.epoch) == ("follower", 2, 1)
    cluster_broker.set_role("t", 1, "leader", 3)
    assert log.epoch == 3 and log.epochs() == [(1, 0), (3, 3)]  # recorded before any write
    with pytest.raises(StorageError):
        cluster_broker.set_role("t", 1, "leader", 2)  # epochs never go back
    cluster_broker.append(topic, [b"d"])
    commit(cluster_broker)
    assert [r.epoch for r in log.read(0, 10)] == [1, 1, 1, 3]
    with pytest.raises(KeyError):
        cluster_broker.set_role("t", 0, "leader", 3)


def test_released_partitions_keep_their_offsets_reserved(
    cluster_broker: Broker, clock: FakeClock
) -> None:
    topic = hold_t(cluster_broker, {1: "leader", 3: "leader"})
    pinned, pinned_sink = subscriber(cluster_broker, 3)
    for _ in range(5):
        cluster_broker.append(topic, [b"m"], partition=3)
    commit(cluster_broker)
    assert pinned.in_flight_count == 5
    assert cluster_broker.release_partition("t", 3)
    assert not cluster_broker.release_partition("t", 3)
    assert pinned_sink.closed and pinned.in_flight_count == 0
    folder = cluster_broker.data_path / "topics" / "topic-t" / "p3"
    assert [p.name for p in folder.iterdir()] == ["reserved"]
    channel = topic.channels["c"]
    assert [p.number for p in topic.partitions] == [1] and [p.number for p in channel.parts] == [1]
    cluster_broker.hold_partition("t", 4, 3, role="leader", leader_epoch=2)
    assert cluster_broker.append(topic, [b"again"], partition=3).first == 5  # never reused
    assert [p.number for p in channel.parts] == [1, 3]
    deleted: list[str] = []
    cluster_broker.on_topic_deleted.append(lambda t: deleted.append(t.name))
    assert cluster_broker.release_partition("t", 1)
    assert cluster_broker.release_partition("t", 3)  # the last one: the topic goes here
    assert "t" not in cluster_broker.topics and deleted == ["t"]
    assert (cluster_broker.data_path / "topics" / "topic-t" / "p3" / "reserved").exists()


def test_held_partitions_survive_a_restart_as_followers(tmp_path: Path, clock: FakeClock) -> None:
    broker = as_sole_replica(Broker(nsqd_options(tmp_path), clock=clock))
    topic = hold_t(broker, {1: "leader", 3: "leader"}, epoch=4)
    broker.channel(topic, "c")
    broker.append(topic, [b"m"], partition=1)
    broker.close()
    entry = json.loads((broker.data_path / "nsqd.dat").read_bytes())["topics"][0]
    assert [p["partition"] for p in entry["partitions"]] == [1, 3]
    for cluster_mode, role in ((True, "follower"), (False, "leader")):
        again = Broker(nsqd_options(tmp_path), clock=clock)
        again.cluster_mode = cluster_mode
        again.load_metadata()
        restored = again.topics["t"]
        assert restored.partition_count == 4
        assert [(p.number, p.role) for p in restored.partitions] == [(1, role), (3, role)]
        assert [p.leader_epoch for p in restored.partitions] == [4, 4]  # (the logs' epochs)
        assert [p.log.epochs() for p in restored.partitions] == [[(4, 0)], [(4, 0)]]
        assert [p.number for p in restored.channels["c"].parts] == [1, 3]
        assert restored.partition(1).log.high_watermark == 1  # type: ignore[union-attr]
        again.close()
    (broker.data_path / "nsqd.dat").unlink()  # found on disk instead: the same partitions
    again = Broker(nsqd_options(tmp_path), clock=clock)
    again.load_metadata()
    assert [p.number for p in again.topics["t"].partitions] == [1, 3]
    assert again.topics["t"].partition_count == 4
    again.close()


def test_stats_show_roles_in_cluster_mode_only(cluster_broker: Broker) -> None:
    topic = hold_t(cluster_broker, {1: "leader", 3: "follower"}, epoch=2)
    cluster_broker.channel(topic, "c")
    cluster_broker.append(topic, [b"m"])
    commit(cluster_broker)
    cluster_broker.partition_info = lambda t, p: {"leader": f"node-{p}", "isr": ["a", "b"]}
    doc = stats(cluster_broker)["topics"][0]  # type: ignore[index]
    assert doc["partition_num"] == 4
    assert [
        (p["partition"], p["role"], p["leader_epoch"], p["committed_offset"], p["leader"])
        for p in doc["partitions"]
    ] == [(1, "leader", 2, 1, "node-1"), (3, "follower", 2, 0, "node-3")]
    assert [p["partition"] for p in doc["channels"][0]["partitions"]] == [1, 3]
    cluster_broker.cluster_mode = False
    doc = stats(cluster_broker)["topics"][0]  # type: ignore[index]
    assert "role" not in doc["partitions"][0] and "leader" not in doc["partitions"][0]


def test_an_ordered_channel_gives_owners_to_led_partitions_only(cluster_broker: Broker) -> None:
    hold_t(cluster_broker, {1: "follower", 3: "leader"})
    cluster_broker.topics["t"].ordered = True
    client, _ = subscriber(cluster_broker)
    channel = cluster_broker.topics["t"].channels["c"]
    assert channel.delivery is not None
    assert channel.delivery.owners == {3: client}
    cluster_broker.set_role("t", 1, "leader", 2)
    assert channel.delivery.owners == {1: client, 3: client}


def test_an_ordered_channel_delivers_the_next_only_once_the_followers_have_the_cursor(
    cluster_broker: Broker,
) -> None:
    """``Partition.cursor_bound`` (replication: the confirmed offset every ISR follower has
    taken): after a FIN an ordered partition waits until the bound reaches its cursor."""
    topic = hold_t(cluster_broker, {1: "leader"})
    topic.ordered = True
    client, sink = subscriber(cluster_broker)
    part = topic.partitions[0]
    taken = {"c": 0}
    part.cursor_bound = lambda channel: taken.get(channel, -1)
    cluster_broker.append(topic, [b"m0", b"m1", b"m2"], partition=1)
    commit(cluster_broker)
    assert sink.bodies() == [b"m0"], "cursor 0 is on the followers: the first goes"
    channel = topic.channels["c"]
    now = cluster_broker.clock()
    assert channel.finish_ids(client, [sink.frames[0][8 + 10 : 8 + 26]], now) == []
    assert cluster_broker.pump_ordered(part) == 0
    assert sink.bodies() == [b"m0"], "finished, but the followers do not know it yet"
    taken["c"] = 1  # (what a CURSORS_ACK brings: nsqd pumps that partition only)
    assert cluster_broker.pump_ordered(part) == 1
    assert sink.bodies() == [b"m0", b"m1"]
    part.cursor_bound = None  # alone in the ISR again
    assert channel.finish_ids(client, [sink.frames[1][8 + 10 : 8 + 26]], now) == []
    channel.pump(now)
    assert sink.bodies() == [b"m0", b"m1", b"m2"]
