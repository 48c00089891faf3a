"""What an nsqd of a cluster does with a topic it does not lead: a PUB of an unknown topic
creates it through the coordinator with this nsqd leading partition 0 (unless
``--disable-auto-create``: ``E_TOPIC_NOT_EXIST``, as Youzan); a PUB of a topic led only
elsewhere is refused with Youzan's ``E_FAILED_ON_NOT_LEADER`` (TCP: not fatal; HTTP: 400)."""

from __future__ import annotations

import json

from nsqpy.testing import http_request, mpub, pub, wait_for
from nsqpy.testing.cluster import LocalCluster

from .conftest import OwnCluster, create, leaders, stats_partitions, wire

NOT_LEADER = (1, b"E_FAILED_ON_NOT_LEADER")


def test_pub_of_an_unknown_topic_creates_it_led_by_the_node_it_reached(
    shared: LocalCluster, topic_name: str
) -> None:
    for i in range(3):
        topic = f"{topic_name}_{i}"
        client = wire(shared, i)
        client.send(pub(topic, b"first"))
        assert client.read_frame() == (0, b"OK")
        assert leaders(shared, topic)[0] == i
        meta = shared.lookupd_json(f"/lookup?topic={topic}&metainfo=true")["meta"]
        assert meta["partition_num"] == 1, "the cluster default"
        held = stats_partitions(shared, i, topic)
        assert held[0]["role"] == "leader" and held[0]["message_count"] == 1
        client.send(pub(topic, b"second"))  # the same connection goes on publishing
        assert client.read_frame() == (0, b"OK")


def test_pub_where_the_topic_is_led_elsewhere_is_refused_and_the_connection_lives(
    shared: LocalCluster, topic_name: str
) -> None:
    assert create(shared, topic_name, partition_num=1, replicator=1) == (200, None)
    leader = leaders(shared, topic_name)[0]
    other = (leader + 1) % 3
    wait_for(lambda: stats_partitions(shared, leader, topic_name))
    client = wire(shared, other)
    client.send(pub(topic_name, b"x"))
    assert client.read_frame() == NOT_LEADER
    client.send(mpub(topic_name, [b"a", b"b"]))
    assert client.read_frame() == NOT_LEADER
    client.send(b"NOP\n")  # not fatal: the connection still publishes what it may
    client.send(pub(f"{topic_name}_mine", b"y"))
    assert client.read_frame() == (0, b"OK")
    assert stats_partitions(shared, other, topic_name) == {}, "nothing of it was created here"

    status, body, headers = http_request(
        "POST", f"http://{shared.nsqd_http(other)}/pub?topic={topic_name}", b"x"
    )
    assert (status, json.loads(body)) == (400, {"message": "E_FAILED_ON_NOT_LEADER"})
    assert headers.get("X-NSQ-Content-Type") == "nsq; version=1.0"
    status, body, _ = http_request(
        "POST", f"http://{shared.nsqd_http(leader)}/pub?topic={topic_name}", b"x"
    )
    assert (status, body) == (200, b"OK")
    assert stats_partitions(shared, leader, topic_name)[0]["message_count"] == 1


def test_disable_auto_create_answers_topic_not_exist(own_cluster: OwnCluster) -> None:
    cluster = own_cluster(nsqd_flags=["--disable-auto-create"])
    client = wire(cluster, 0)
    client.send(pub("never_created", b"x"))
    assert client.read_frame() == (1, b"E_TOPIC_NOT_EXIST")
    assert client.closed(), "fatal, as Youzan's nsqd"
    status, _ = cluster.request("GET", cluster.lookupd_http(0), "/lookup?topic=never_created")
    assert status == 404
    status, body, _ = http_request(
        "POST", f"http://{cluster.nsqd_http(1)}/pub?topic=never_created", b"x"
    )
    assert (status, json.loads(body)) == (404, {"message": "E_TOPIC_NOT_EXIST"})
    # a topic created through lookupd is served as usual
    assert create(cluster, "made", partition_num=1, replicator=1) == (200, None)
    leader = leaders(cluster, "made")[0]
    wait_for(lambda: stats_partitions(cluster, leader, "made"))
    client = wire(cluster, leader)
    client.send(pub("made", b"x"))
    assert client.read_frame() == (0, b"OK")


def test_an_ordered_topic_has_ordered_channels_on_its_leader(
    shared: LocalCluster, topic_name: str
) -> None:
    """orderedmulti=true reaches the nsqd: the channels of the topic deliver in order."""
    assert create(shared, topic_name, partition_num=2, replicator=1, orderedmulti="true")[0] == 200
    leader = leaders(shared, topic_name)[0]
    wait_for(lambda: stats_partitions(shared, leader, topic_name))
    client = wire(shared, leader)
    client.send(f"SUB {topic_name} c\n".encode())
    assert client.read_frame() == (0, b"OK")
    doc = shared.nsqd_json(leader, f"/stats?format=json&topic={topic_name}")
    (topic,) = [t for t in doc["topics"] if t["topic_name"] == topic_name]
    (channel,) = topic["channels"]
    assert channel.get("ordered") is True
