"""Topic create and discovery on a real cluster (etcd, 2 nsqlookupd, 3 nsqd): Youzan's
``/topic/create`` forms and codes, where the replicas land and what every nsqd's /stats
then says, NSQ's and Youzan's ``/lookup``, ``/listlookup``, ``/cluster/stats``, and two
lookupds creating one topic at the same moment."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from nsqpy.cluster.tls import INSECURE
from nsqpy.testing import http_request, wait_for
from nsqpy.testing.cluster import LocalCluster

from .conftest import CREATED, create, leaders, stats_partitions

NODE_COUNT_ERROR = "ErrType:9 ErrCode:1 : No node is available for topic"
PEER_KEYS = {"remote_address", "hostname", "broadcast_address", "tcp_port", "http_port", "version"}


def non_coordinator(cluster: LocalCluster) -> int:
    return 1 - cluster.coordinator_index()


def test_create_places_eight_replicas_spread_and_every_nsqd_holds_its_own(
    shared: LocalCluster, topic_name: str
) -> None:
    # through the lookupd that does not coordinate: it forwards the create
    assert create(shared, topic_name, non_coordinator(shared), partition_num=4,
                  replicator=2, multipart="true") == CREATED  # fmt: skip
    parts = shared.partitions(topic_name)
    assert sorted(parts) == [0, 1, 2, 3]
    ids = {shared.node_id(i) for i in range(3)}
    for info in parts.values():
        assert len(info["isr"]) == 2 and len(set(info["isr"])) == 2, info
        assert set(info["isr"]) <= ids and info["id"] in info["isr"]
        assert (info["catchup"], info["epoch"], info["leader_epoch"]) == ([], 1, 1)
    assert sum(len(info["isr"]) for info in parts.values()) == 8
    assert sorted(Counter(leaders(shared, topic_name).values()).values()) == [1, 1, 2]

    for i in range(3):
        me = shared.node_id(i)
        mine = {p: info for p, info in parts.items() if me in info["isr"]}
        # (an nsqd takes its partitions when its view has the topic: a moment after the create)
        held = wait_for(lambda i=i, mine=mine: _stats_match(shared, i, topic_name, mine))  # type: ignore[misc]
        for p, entry in held.items():
            info = parts[p]
            role = "leader" if info["id"] == me else "follower"
            assert (entry["role"], entry["leader"], entry["isr"], entry["catchup"]) == (
                role, info["id"], info["isr"], []), (i, p, entry)  # fmt: skip
            assert (entry["epoch"], entry["leader_epoch"]) == (1, 1)
        doc = shared.nsqd_json(i, "/info")
        assert (doc["node_id"], doc["cluster_id"]) == (me, shared.cluster_id)


def _stats_match(
    cluster: LocalCluster, i: int, topic: str, mine: dict[int, Any]
) -> dict[int, dict[str, Any]]:
    """nsqd ``i``'s /stats partitions of ``topic`` once they are ``mine`` ({} before)."""
    held = stats_partitions(cluster, i, topic)
    return held if set(held) == set(mine) else {}


def test_create_without_multipart_needs_a_node_per_replica(
    shared: LocalCluster, topic_name: str
) -> None:
    # Youzan's code as the message its clients read, and why beside it
    live = len(shared.live_nodes())
    assert create(shared, topic_name, partition_num=4, replicator=2) == (400, {
        "message": NODE_COUNT_ERROR,
        "detail": f"partition_num 4 * replicator 2 > {live} live nodes "
                  "(multipart=true allows several partitions per node)",
    })  # fmt: skip
    assert create(shared, topic_name, partition_num=1, replicator=4, multipart="true") == (
        400, {"message": NODE_COUNT_ERROR, "detail": f"replicator 4 > {live} live nodes"})  # fmt: skip
    status, _ = shared.request("GET", shared.lookupd_http(0), f"/lookup?topic={topic_name}")
    assert status == 404, "a refused create leaves nothing behind"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({}, "MISSING_ARG_TOPIC_PARTITION_NUM"),
        ({"replicator": "1"}, "MISSING_ARG_TOPIC_PARTITION_NUM"),
        ({"partition_num": "x", "replicator": "1"}, "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ({"partition_num": "", "replicator": "1"}, "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ({"partition_num": "0", "replicator": "1"}, "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ({"partition_num": "-1", "replicator": "1"}, "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ({"partition_num": "256", "replicator": "1"}, "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ({"partition_num": "1.5", "replicator": "1"}, "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ({"partition_num": " 2", "replicator": "1"}, "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ({"partition_num": "1_0", "replicator": "1"}, "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ({"partition_num": "\uff14", "replicator": "1"}, "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ({"partition_num": "9" * 40, "replicator": "1"}, "INVALID_ARG_TOPIC_PARTITION_NUM"),
        ({"partition_num": "1"}, "MISSING_ARG_TOPIC_REPLICATOR"),
        ({"partition_num": "1", "replicator": "two"}, "INVALID_ARG_TOPIC_REPLICATOR"),
        ({"partition_num": "1", "replicator": "0"}, "INVALID_ARG_TOPIC_REPLICATOR"),
        ({"partition_num": "1", "replicator": "6"}, "INVALID_ARG_TOPIC_REPLICATOR"),
        ({"partition_num": "1", "replicator": "1", "syncdisk": "often"}, "INVALID_ARG_TOPIC_SYNC_DISK"),
    ],
)  # fmt: skip
def test_create_argument_errors_are_youzans_codes(
    shared: LocalCluster, topic_name: str, args: dict[str, str], code: str
) -> None:
    for via in (0, 1):  # the coordinator checks, and so does the one that would forward
        assert create(shared, topic_name, via, **args) == (400, {"message": code})


def test_create_again_same_meta_is_ok_other_meta_is_refused(
    shared: LocalCluster, topic_name: str
) -> None:
    assert create(shared, topic_name, partition_num=2, replicator=1) == CREATED
    before = shared.partitions(topic_name)
    for via in (0, 1):
        assert create(shared, topic_name, via, partition_num=2, replicator=1) == CREATED
        exists = f"topic {topic_name} exists with 2 partitions x 1 replicas"
        assert create(shared, topic_name, via, partition_num=3, replicator=1) == (
            400, {"message": "TOPIC_ALREADY_EXIST", "detail": exists})  # fmt: skip
        assert create(shared, topic_name, via, partition_num=2, replicator=2) == (
            400, {"message": "TOPIC_ALREADY_EXIST", "detail": exists})  # fmt: skip
    assert shared.partitions(topic_name) == before, "nothing changed"


def test_plain_lookup_lists_the_leaders_as_nsq_producers(
    shared: LocalCluster, topic_name: str
) -> None:
    assert create(shared, topic_name, partition_num=4, replicator=2,
                  multipart="true") == CREATED  # fmt: skip
    parts = shared.partitions(topic_name)
    leader_ids = {info["id"] for info in parts.values()}
    for via in (0, 1):
        # (each lookupd answers from its own view of etcd: the one that did not take the
        # create sees it a moment later)
        doc = shared.wait_for(
            lambda via=via: (d := shared.lookupd_json(f"/lookup?topic={topic_name}", via))
            and len(d["partitions"]) == 4 and d,  # type: ignore[misc]
            5, f"lookupd {via} sees the topic",
        )  # fmt: skip
        assert set(doc) == {"channels", "producers", "partitions"}
        assert doc["channels"] == []
        assert {p["id"] for p in doc["producers"]} == leader_ids
        assert len(doc["producers"]) == len(leader_ids), "one entry per node"
        for producer in doc["producers"]:
            assert set(producer) >= PEER_KEYS
            i = shared.node_index(producer["id"])
            assert (producer["broadcast_address"], producer["tcp_port"],
                    producer["http_port"]) == ("127.0.0.1", shared.nodes[i].ports["TCP"],
                                               shared.nodes[i].ports["HTTP"])  # fmt: skip
            assert "-HA." in producer["version"], "Youzan's clients look for -HA."
        assert {int(p): v["id"] for p, v in doc["partitions"].items()} == {
            p: info["id"] for p, info in parts.items()}  # fmt: skip


def test_lookup_with_metainfo_partition_and_access(shared: LocalCluster, topic_name: str) -> None:
    assert create(shared, topic_name, partition_num=3, replicator=2,
                  multipart="true") == CREATED  # fmt: skip
    doc = shared.lookupd_json(f"/lookup?topic={topic_name}&metainfo=true&access=w", 1)
    assert doc["meta"] == {"partition_num": 3, "replica": 2, "extend_support": False,
                           "ordered": False, "multi_part": True,
                           "disable_channel_auto_create": False}  # fmt: skip
    assert sorted(doc["partitions"]) == ["0", "1", "2"]
    for info in doc["partitions"].values():
        assert set(info) >= PEER_KEYS and info["distributed_id"] == info["id"]
        assert len(info["isr"]) == 2 and info["id"] in info["isr"]
        assert (info["catchup"], info["epoch"]) == ([], 1)
    one = shared.lookupd_json(f"/lookup?topic={topic_name}&partition=1&metainfo=true")
    assert list(one["partitions"]) == ["1"]
    assert [p["id"] for p in one["producers"]] == [doc["partitions"]["1"]["id"]]
    assert one["meta"]["partition_num"] == 3, "meta is the topic's, whatever the partition"
    # Youzan: metainfo is on for any non-empty value (go-nsq sends metainfo=false)
    assert "meta" in shared.lookupd_json(f"/lookup?topic={topic_name}&metainfo=false")
    assert "meta" not in shared.lookupd_json(f"/lookup?topic={topic_name}&metainfo=")


def test_lookup_of_an_unknown_topic(shared: LocalCluster, topic_name: str) -> None:
    for via in (0, 1):
        address = shared.lookupd_http(via)
        assert shared.request("GET", address, f"/lookup?topic={topic_name}") == (
            404, {"message": "TOPIC_NOT_FOUND"})  # fmt: skip
        assert shared.request("GET", address, f"/lookup?topic={topic_name}&access=r") == (
            200, {"channels": [], "producers": [], "partitions": {}})  # fmt: skip
        assert shared.request("GET", address, f"/lookup?topic={topic_name}&access=w") == (
            404, {"message": "Key not found"})  # fmt: skip
        status, doc = shared.request(
            "GET", address, f"/lookup?topic={topic_name}&access=r&metainfo=true"
        )
        assert status == 200 and doc["meta"]["partition_num"] == 0, doc


def test_lookup_answers_v1_with_the_accept_header(shared: LocalCluster, topic_name: str) -> None:
    """nsqJavaSDK and go-nsq send Youzan's Accept header and read the bare body."""
    assert create(shared, topic_name, partition_num=1, replicator=1) == CREATED
    url = f"http://{shared.lookupd_http(0)}/lookup?topic={topic_name}&metainfo=true"
    status, body, headers = http_request("GET", url)
    assert status == 200 and headers.get("X-NSQ-Content-Type") == "nsq; version=1.0"
    assert body.startswith(b'{"channels"')


def test_listlookup_names_both_lookupds_and_the_coordinator(shared: LocalCluster) -> None:
    for via in (0, 1):
        doc = shared.lookupd_json("/listlookup", via)
        assert set(doc) == {"lookupdnodes", "lookupdleader"}
        nodes = doc["lookupdnodes"]
        assert {(n["NodeIP"], n["TcpPort"], n["HttpPort"]) for n in nodes} == {
            ("127.0.0.1", str(p.ports["TCP"]), str(p.ports["HTTP"])) for p in shared.lookupds
        }
        for node in nodes:
            assert set(node) == {"ID", "NodeIP", "TcpPort", "HttpPort", "RpcPort", "Epoch"}
            assert node["ID"].endswith(":nsqlookup")
        assert doc["lookupdleader"] in nodes
        coordinator = shared.lookupds[shared.coordinator_index()]
        assert doc["lookupdleader"]["HttpPort"] == str(coordinator.ports["HTTP"])


def test_cluster_stats_lists_the_three_nodes(shared: LocalCluster) -> None:
    for via in (0, 1):
        doc = shared.lookupd_json("/cluster/stats", via)
        assert {"stable", "node_stat_list", "topn_topics"} <= set(doc)
        nodes = doc["node_stat_list"]
        assert {n["id"] for n in nodes} == {shared.node_id(i) for i in range(3)}
        for node in nodes:
            i = shared.node_index(node["id"])
            assert (node["broadcast_address"], node["tcp_port"], node["http_port"]) == (
                "127.0.0.1", shared.nodes[i].ports["TCP"], shared.nodes[i].ports["HTTP"])  # fmt: skip
            assert isinstance(node["leader_load_factor"], float)
            assert isinstance(node["node_load_factor"], float)
            assert node["secure"] is shared.secure  # (--cluster-tls-* or not)
        assert doc["secure"] is shared.secure


def test_an_insecure_cluster_warns_once_per_daemon_at_start(shared: LocalCluster) -> None:
    for proc in [*shared.nodes, *shared.lookupds]:
        warned = [line for line in proc.log_lines if INSECURE in line]
        starts = [line for line in proc.log_lines if "TCP: listening on" in line]
        assert len(starts) >= 1
        if shared.secure:  # ($NSQPY_TEST_CLUSTER_TLS=1: a secure cluster warns of nothing)
            assert warned == []
            continue
        assert len(warned) == len(starts), proc.log_lines[:20]  # (a restart warns again)
        assert all("WARNING" in line for line in warned)


@pytest.mark.parametrize("same_meta", [True, False])
def test_create_racing_on_both_lookupds_creates_one_topic(
    shared: LocalCluster, topic_name: str, same_meta: bool
) -> None:
    replicators = (1, 1) if same_meta else (1, 2)
    barrier = threading.Barrier(2)
    answers: list[Any] = [None, None]

    def race(via: int) -> None:
        barrier.wait(5)
        answers[via] = create(shared, topic_name, via, partition_num=3,
                              replicator=replicators[via], multipart="true")  # fmt: skip

    threads = [threading.Thread(target=race, args=(via,)) for via in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    if same_meta:
        assert answers == [(200, None), (200, None)]
    else:
        won = replicators[0] if answers[0][0] == 200 else replicators[1]
        exists = f"topic {topic_name} exists with 3 partitions x {won} replicas"
        assert sorted(answers, key=lambda a: a[0]) == [
            (200, None), (400, {"message": "TOPIC_ALREADY_EXIST", "detail": exists})]  # fmt: skip
    coordinator = shared.lookupds[shared.coordinator_index()]

    def created() -> list[str]:  # (the log is read by a thread of its own: it may lag)
        return [line for line in coordinator.log_lines if f"topic {topic_name} created" in line]

    shared.wait_for(lambda: bool(created()), 10, "the create logged")
    time.sleep(0.5)  # a second line, which would have been written before its answer
    assert len(created()) == 1, created()
    meta = shared.lookupd_json(f"/lookup?topic={topic_name}&metainfo=true")["meta"]
    winner = 0 if answers[0] == (200, None) else 1
    assert (meta["partition_num"], meta["replica"]) == (3, replicators[winner])
    assert sorted(shared.partitions(topic_name)) == [0, 1, 2]


def forgotten(cluster: LocalCluster, lookupd: str, topic: str) -> bool:
    topics = cluster.request("GET", lookupd, "/topics")[1]["topics"]
    channels = cluster.request("GET", lookupd, f"/channels?topic={topic}")[1]["channels"]
    return topic not in topics and channels == []


def test_a_deleted_topic_leaves_every_lookupds_listing(
    shared: LocalCluster, topic_name: str
) -> None:
    """Channels created on each lookupd (nsqadmin's create form posts /channel/create to
    every one) are registrations of that lookupd alone; deleting the topic through one
    lookupd removes it from etcd, and every lookupd forgets it as its view sees that."""
    assert create(shared, topic_name, partition_num=1, replicator=2) == CREATED
    lookupds = [shared.lookupd_http(i) for i in range(len(shared.lookupds))]
    for address in lookupds:
        path = f"/channel/create?topic={topic_name}&channel=c"
        assert shared.request("POST", address, path)[0] == 200
        assert topic_name in shared.request("GET", address, "/topics")[1]["topics"]
    for via in (0, 1):  # (whichever coordinates, the other lookupd forgets it too)
        if via:
            assert create(shared, topic_name, partition_num=1, replicator=2) == CREATED
            for address in lookupds:
                shared.request("POST", address, f"/channel/create?topic={topic_name}&channel=c")
        assert shared.request("POST", lookupds[via], f"/topic/delete?topic={topic_name}")[0] == 200
        for address in lookupds:  # (nsqd unregister what they held within moments)
            wait_for(lambda a=address: forgotten(shared, a, topic_name))  # type: ignore[misc]


def test_a_channel_is_created_on_each_holder_right_after_the_topic(
    shared: LocalCluster, topic_name: str
) -> None:
    """``/channel/create`` on the nsqd that hold a topic created a moment ago through
    lookupd: a node that has not taken the topic up yet takes it up then (200, as a SUB
    would), not 404 TOPIC_NOT_FOUND; a topic the cluster lacks is still 404."""
    for n in range(4):
        topic = f"{topic_name}_{n}"
        assert create(shared, topic, partition_num=1, replicator=3) == CREATED
        for i in range(3):
            path = f"/channel/create?topic={topic}&channel=c"
            assert shared.request("POST", shared.nsqd_http(i), path)[0] == 200, (n, i)
        for i in range(3):
            doc = shared.nsqd_json(i, f"/stats?format=json&topic={topic}")
            assert [c["channel_name"] for t in doc["topics"] or [] if t["topic_name"] == topic
                    for c in t["channels"]] == ["c"]  # fmt: skip
    missing = f"/channel/create?topic={topic_name}_none&channel=c"
    assert shared.request("POST", shared.nsqd_http(0), missing)[0] == 404
