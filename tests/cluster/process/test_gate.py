"""What an nsqd of a cluster does with a topic it does not lead: a PUB of an unknown topic
creates it through the coordinator with this nsqd leading partition 0 (unless
``--disable-auto-create``: ``E_TOPIC_NOT_EXIST``, as Youzan); a publish of a topic led only
elsewhere, or naming a partition led elsewhere, is forwarded to the leader (TCP and HTTP),
and a forwarded one that finds no leader is refused with ``E_FAILED_ON_NOT_LEADER``."""

from __future__ import annotations

import json
import threading
import zlib
from typing import Any
from urllib.parse import quote

from nsqpy.nsqd.gate import FORWARD_AGENT
from nsqpy.protocol.logread import decode_columns
from nsqpy.testing import consume, dpub, http_request, identify, mpub, pub, wait_for
from nsqpy.testing.cluster import LocalCluster

from .conftest import CREATED, OwnCluster, create, leaders, stats_partitions, wire

NOT_LEADER = (1, b"E_FAILED_ON_NOT_LEADER")


def test_pub_of_an_unknown_topic_creates_it_led_by_the_node_it_reached(
    shared: LocalCluster, topic_name: str
) -> None:
    for i in range(3):
        topic = f"{topic_name}_{i}"
        client = wire(shared, i)
        client.send(pub(topic, b"first"))
        assert client.read_frame() == (0, b"OK")
        # (the node waited for its own view; lookupd 0's follows a watch of its own)
        shared.wait_for(lambda t=topic: 0 in leaders(shared, t), 10, "lookupd 0 lists it")  # type: ignore[misc]
        assert leaders(shared, topic)[0] == i
        meta = shared.lookupd_json(f"/lookup?topic={topic}&metainfo=true")["meta"]
        assert meta["partition_num"] == 1, "the cluster default"
        held = stats_partitions(shared, i, topic)
        assert held[0]["role"] == "leader" and held[0]["message_count"] == 1
        client.send(pub(topic, b"second"))  # the same connection goes on publishing
        assert client.read_frame() == (0, b"OK")


def test_pub_where_the_topic_is_led_elsewhere_goes_to_its_leader(
    shared: LocalCluster, topic_name: str
) -> None:
    """CLUSTER.md "Publish to any node": PUB, MPUB, DPUB and HTTP /pub, /mpub on a node
    that leads no partition of the topic are forwarded to the leader and answered after
    it; nothing of the topic is created on the forwarding node."""
    assert create(shared, topic_name, partition_num=1, replicator=1) == CREATED
    leader = leaders(shared, topic_name)[0]
    other = (leader + 1) % 3
    wait_for(lambda: stats_partitions(shared, leader, topic_name))
    client = wire(shared, other)
    client.send(pub(topic_name, b"pub"))
    assert client.read_frame() == (0, b"OK")
    client.send(mpub(topic_name, [b"mpub-a", b"mpub-b"]))
    client.send(dpub(topic_name, 50, b"dpub"))
    assert client.read_frame() == (0, b"OK")
    assert client.read_frame() == (0, b"OK")
    client.send(pub(f"{topic_name}_mine", b"y"))  # in order with what it leads itself
    assert client.read_frame() == (0, b"OK")
    for path, body in (("/pub", b"http-pub"), ("/mpub", b"http-m1\nhttp-m2")):
        status, answer, _ = http_request(
            "POST", f"http://{shared.nsqd_http(other)}{path}?topic={topic_name}", body
        )
        assert (status, answer) == (200, b"OK")
    assert stats_partitions(shared, other, topic_name) == {}, "nothing of it was created here"
    assert stats_partitions(shared, leader, topic_name)[0]["message_count"] == 7
    got = consume(shared.nodes[leader].ports["TCP"], topic_name, "all", 7)
    assert sorted(got) == sorted(
        [b"pub", b"mpub-a", b"mpub-b", b"dpub", b"http-pub", b"http-m1", b"http-m2"]
    )
    (entry,) = [c for c in shared.nsqd_json(other, "/stats?format=json")["topics"]
                if c["topic_name"] == f"{topic_name}_mine"]  # fmt: skip
    assert entry["message_count"] == 1
    info = shared.nsqd_json(other, "/info")
    assert info["forwarded_messages"] >= 7 and info["forward_failures"] == 0


def test_a_partitioned_pub_goes_to_that_partitions_leader(
    shared: LocalCluster, topic_name: str
) -> None:
    """``PUB <topic> <partition>`` (Youzan's form) on a node leading another partition of
    the topic goes to the named partition's leader; a key over HTTP picks the partition."""
    assert create(shared, topic_name, partition_num=3, replicator=1) == CREATED
    led = leaders(shared, topic_name)
    for node in set(led.values()):
        wait_for(lambda node=node: stats_partitions(shared, node, topic_name))  # type: ignore[misc]
    first_node = led[0]
    target = next(p for p, node in led.items() if node != first_node)
    client = wire(shared, first_node)
    client.send(
        b"PUB %s %d\n" % (topic_name.encode(), target) + len(b"x").to_bytes(4, "big") + b"x"
    )
    assert client.read_frame() == (0, b"OK")
    held = stats_partitions(shared, led[target], topic_name)
    assert held[target]["message_count"] == 1
    assert stats_partitions(shared, first_node, topic_name)[0]["message_count"] == 0
    # over HTTP on the same node: a partition named, and a key hashing to it
    key = next(k for k in (f"k{i}" for i in range(100)) if zlib.crc32(k.encode()) % 3 == target)
    at = f"http://{shared.nsqd_http(first_node)}"
    for query in (f"partition={target}", f"partition_key={key}"):
        status, answer, _ = http_request("POST", f"{at}/pub?topic={topic_name}&{query}", b"y")
        assert (status, answer) == (200, b"OK"), query
    held = stats_partitions(shared, led[target], topic_name)
    assert held[target]["message_count"] == 3
    assert stats_partitions(shared, first_node, topic_name)[0]["message_count"] == 0


def test_http_publishes_with_headers_or_trace_ids_go_to_the_leader(
    shared: LocalCluster, topic_name: str
) -> None:
    """/pub_ext, /pubtrace and /pub?trace_id on a node that does not lead go to the leader
    with their headers and trace ids; the traced forms answer with the leader's message
    id and offset. Deferred and traced at once has no form to go in: refused."""
    assert create(shared, topic_name, partition_num=1, replicator=1) == CREATED
    leader = leaders(shared, topic_name)[0]
    other = (leader + 1) % 3
    wait_for(lambda: stats_partitions(shared, leader, topic_name))
    at = f"http://{shared.nsqd_http(other)}"
    ext = quote('{"k":"v"}')
    status, answer, _ = http_request("POST", f"{at}/pub_ext?topic={topic_name}&ext={ext}", b"e")
    assert (status, answer) == (200, b"OK")
    traced_ext = quote('{"##trace_id":"41","k":"w"}')
    url = f"{at}/pub_ext?topic={topic_name}&ext={traced_ext}"
    status, answer, _ = http_request("POST", url, b"te")
    doc = json.loads(answer)
    assert status == 200 and doc["trace_id"] == "41" and doc["queue_offset"] == 1, doc
    status, answer, _ = http_request("POST", f"{at}/pubtrace?topic={topic_name}&trace_id=42", b"t")
    doc = json.loads(answer)
    assert status == 200 and doc["trace_id"] == "42" and doc["queue_offset"] == 2, doc
    assert doc["id"] == 2, "partition 0, offset 2"
    status, answer, _ = http_request("POST", f"{at}/pub?topic={topic_name}&trace_id=43", b"p")
    assert (status, answer) == (200, b"OK")
    url = f"{at}/pub?topic={topic_name}&trace_id=44&defer=1000"
    status, answer, _ = http_request("POST", url, b"d")
    assert (status, json.loads(answer)) == (400, {"message": "E_FAILED_ON_NOT_LEADER"})
    assert stats_partitions(shared, other, topic_name) == {}, "nothing of it was created here"
    url = f"http://{shared.nsqd_http(leader)}/log/read?topic={topic_name}&offset=0"
    status, body, _ = http_request("GET", url)
    assert status == 200
    records = decode_columns(body)
    assert [(r.body, r.trace_id) for r in records] == [
        (b"e", 0), (b"te", 41), (b"t", 42), (b"p", 43)
    ]  # fmt: skip
    assert json.loads(records[0].headers) == {"k": "v"}
    assert json.loads(records[1].headers)["k"] == "w"


def test_a_forwarded_publish_is_never_forwarded_again(
    shared: LocalCluster, topic_name: str
) -> None:
    """A publish from another nsqd's forwarder (its user agent) to a node that does not
    lead either is refused with E_FAILED_ON_NOT_LEADER (not fatal), so none can loop."""
    assert create(shared, topic_name, partition_num=1, replicator=1) == CREATED
    leader = leaders(shared, topic_name)[0]
    other = (leader + 1) % 3
    client = wire(shared, other)
    client.send(identify({"user_agent": FORWARD_AGENT, "feature_negotiation": False}))
    assert client.read_frame() == (0, b"OK")
    client.send(pub(topic_name, b"x"))
    assert client.read_frame() == NOT_LEADER
    client.send(b"NOP\n")  # not fatal: the connection still publishes what it may
    client.send(pub(f"{topic_name}_mine", b"y"))
    assert client.read_frame() == (0, b"OK")


def test_nsqds_topic_routes_act_on_the_clusters_topic(
    shared: LocalCluster, topic_name: str
) -> None:
    """In a cluster a topic is etcd's: nsqd's /topic/create creates it through the
    coordinator (the cluster's defaults, or at least ``partition_num`` partitions) as a PUB
    of a new topic would, and /topic/delete and /topic/partition/expand, which would change
    only this node's copy, are refused: they go through nsqlookupd."""

    def meta(topic: str) -> Any:  # (each lookupd follows etcd within moments)
        return shared.wait_for(
            lambda: shared.lookupd_json(f"/lookup?topic={topic}&metainfo=true")["meta"],
            10,
            f"{topic} in lookupd",
        )

    node = shared.nsqd_http(1)
    assert shared.request("POST", node, f"/topic/create?topic={topic_name}")[0] == 200
    assert meta(topic_name)["partition_num"] == 1, "the cluster default"
    assert leaders(shared, topic_name)[0] == 1, "this node leads its first partition"
    wider = f"{topic_name}_wide"
    path = f"/topic/create?topic={wider}&partition_num=2"
    assert shared.request("POST", node, path)[0] == 200
    assert meta(wider)["partition_num"] == 2
    assert shared.request("POST", node, path)[0] == 200, "exists: answered as created"
    for path, code in ((f"/topic/delete?topic={topic_name}", "E_DELETE_THROUGH_NSQLOOKUPD"),
                       (f"/topic/partition/expand?topic={topic_name}&partition_num=3",
                        "E_EXPAND_THROUGH_NSQLOOKUPD")):  # fmt: skip
        assert shared.request("POST", node, path) == (400, {"message": code}), path
    assert leaders(shared, topic_name)[0] == 1, "nothing deleted"


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
    assert create(cluster, "made", partition_num=1, replicator=1) == CREATED
    leader = leaders(cluster, "made")[0]
    wait_for(lambda: stats_partitions(cluster, leader, "made"))
    client = wire(cluster, leader)
    client.send(pub("made", b"x"))
    assert client.read_frame() == (0, b"OK")


def test_an_ordered_topic_has_ordered_channels_on_its_leader(
    shared: LocalCluster, topic_name: str
) -> None:
    """orderedmulti=true reaches the nsqd: the channels of the topic deliver in order."""
    assert create(shared, topic_name, partition_num=2, replicator=1, orderedmulti="true") == CREATED
    leader = leaders(shared, topic_name)[0]
    wait_for(lambda: stats_partitions(shared, leader, topic_name))
    client = wire(shared, leader)
    client.send(f"SUB {topic_name} c\n".encode())
    assert client.read_frame() == (0, b"OK")
    doc = shared.nsqd_json(leader, f"/stats?format=json&topic={topic_name}")
    (topic,) = [t for t in doc["topics"] if t["topic_name"] == topic_name]
    (channel,) = topic["channels"]
    assert channel.get("ordered") is True


def test_publishes_waiting_for_a_stalled_leader_throttle_the_client(
    own_cluster: OwnCluster,
) -> None:
    """The bodies of forwarded publishes wait in the forwarding node's memory: once they
    pass the connection's reply bound, the node stops reading the client (it cannot be
    made to hold more while the leader is stalled); once the leader answers, every
    publish is answered OK."""
    cluster = own_cluster(lease_ttl="10s")  # (a 2 s pause must not be a failover here)
    assert create(cluster, "stalled", partition_num=1, replicator=1) == CREATED
    leader = leaders(cluster, "stalled")[0]
    other = (leader + 1) % 3
    wait_for(lambda: stats_partitions(cluster, leader, "stalled"))
    client = wire(cluster, other)
    body = b"z" * 60_000
    count = 400  # 24 MB: far more than the socket buffers and the reply bound
    sent = threading.Event()

    def send_all() -> None:
        for _ in range(count):
            client.send(pub("stalled", body))
        sent.set()

    cluster.pause_nsqd(leader)
    sender = threading.Thread(target=send_all, daemon=True)
    try:
        sender.start()
        assert not sent.wait(2.0), "the node went on reading while nothing was answered"
    finally:
        cluster.resume_nsqd(leader)
    assert sent.wait(30), "read again once the leader answered"
    assert [client.read_frame() for _ in range(count)] == [(0, b"OK")] * count
    assert stats_partitions(cluster, leader, "stalled")[0]["message_count"] == count
