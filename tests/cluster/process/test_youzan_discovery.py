"""Youzan's clients accept what our lookupds answer (issue 18: "Youzan's Go and Java
clients' discovery requests must get answers they accept").

Neither youzan/go-nsq nor youzan/nsqJavaSDK is on PyPI, so each test sends the request the
client sends (URL, ``Accept`` header) to a real lookupd and reads the answer with the rules
that client's parser applies, as read in its sources (notes in the docstrings): a field it
requires missing, of the wrong type or case, fails the test.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.http import http_request

from .conftest import CREATED, create

# Topics are created through lookupd 1 and read there (a lookupd reads its own writes).
V1_ACCEPT = "application/vnd.nsq; version=1.0"  # what both clients send


def youzan_get(cluster: LocalCluster, path: str) -> tuple[int, Any, dict[str, str]]:
    req = urllib.request.Request(
        f"http://{cluster.lookupd_http(1)}{path}", headers={"Accept": V1_ACCEPT}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}"), dict(resp.headers)
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read(), dict(err.headers)


def java_node(node: Any) -> tuple[str, int, bool]:
    """nsqJavaSDK's Address from a lookup node entry: broadcast_address, tcp_port and
    version are read with JsonNode.get (case-sensitive; a missing one is an NPE); a node
    is partition-aware when its version contains "-HA."."""
    assert isinstance(node["broadcast_address"], str) and node["broadcast_address"]
    assert isinstance(node["tcp_port"], int) and 0 < node["tcp_port"] < 65536
    version = node["version"]
    assert isinstance(version, str)
    return node["broadcast_address"], node["tcp_port"], "-HA." in version


def test_java_sdk_lookup_for_writing_and_reading(shared: LocalCluster, topic_name: str) -> None:
    """NSQLookupdAddresses.lookup: ``/lookup?topic=T&access=w|r&metainfo=true``; the bare
    V1 body (no status_code/data wrapper); ``producers`` present and non-empty; for writing
    ``meta.partition_num`` present; ``partitions`` keys parsed by Integer.valueOf."""
    assert create(shared, topic_name, 1, partition_num=3, replicator=2, multipart="true") == CREATED
    for access in ("w", "r"):
        status, doc, headers = youzan_get(
            shared, f"/lookup?topic={topic_name}&access={access}&metainfo=true"
        )
        assert status == 200 and "data" not in doc and "status_code" not in doc
        assert headers.get("X-NSQ-Content-Type") == "nsq; version=1.0"
        assert doc["producers"], "the Java SDK throws NSQProducerNotFoundException on []"
        assert all(java_node(p)[2] for p in doc["producers"])
        if access == "w":
            assert isinstance(doc["meta"]["partition_num"], int)
            assert doc["meta"]["partition_num"] == 3
        assert isinstance(doc["meta"]["extend_support"], bool)
        parts = {int(p): java_node(node) for p, node in doc["partitions"].items()}
        assert sorted(parts) == [0, 1, 2]


def test_java_sdk_unknown_topic_is_not_found(shared: LocalCluster, topic_name: str) -> None:
    """A 404 becomes NSQTopicNotFoundException (FileNotFoundException on the stream)."""
    status, _body, _h = youzan_get(shared, f"/lookup?topic={topic_name}&access=w&metainfo=true")
    assert status == 404


def test_go_nsq_producer_and_consumer_lookup(shared: LocalCluster, topic_name: str) -> None:
    """youzan/go-nsq: producers ask ``access=w&metainfo=true`` and index ``partitions`` by
    key (an int in [0, 1024]) into a slice of ``meta.partition_num`` (<= 0: meta invalid,
    ordered publishing fails); consumers ask ``access=r`` and SUB each partition at
    ``broadcast_address:tcp_port``."""
    assert create(shared, topic_name, 1, partition_num=2, replicator=1) == CREATED
    status, doc, _h = youzan_get(shared, f"/lookup?topic={topic_name}&access=w&metainfo=true")
    assert status == 200
    count = doc["meta"]["partition_num"]
    assert count == 2
    slots: list[Any] = [None] * count
    for key, node in doc["partitions"].items():
        index = int(key)
        assert 0 <= index <= 1024
        slots[index] = f"{node['broadcast_address']}:{node['tcp_port']}"
    assert all(slots), "every partition has a leader to publish to"
    leaders = {f"127.0.0.1:{shared.nodes[i].ports['TCP']}" for i in range(3)}
    assert set(slots) <= leaders
    status, doc, _h = youzan_get(shared, f"/lookup?topic={topic_name}&access=r&metainfo=true")
    assert status == 200 and sorted(doc["partitions"]) == ["0", "1"]


def test_listlookup_as_java_and_go_read_it(shared: LocalCluster) -> None:
    """SeedLookupdAddress.listLookup reads lookupdnodes[*].NodeIP and .HttpPort (exact case;
    HttpPort as a string of digits); go-nsq connects to NodeIp:HttpPort of each."""
    status, doc, _h = youzan_get(shared, "/listlookup")
    assert status == 200
    nodes = doc["lookupdnodes"]
    assert len(nodes) == 2
    addresses = {f"{n['NodeIP']}:{int(n['HttpPort'])}" for n in nodes}
    assert addresses == {shared.lookupd_http(0), shared.lookupd_http(1)}
    leader = doc["lookupdleader"]
    assert f"{leader['NodeIP']}:{int(leader['HttpPort'])}" in addresses
    # and every address listed answers lookups (go-nsq adds them to its poll list)
    for address in addresses:
        assert http_request("GET", f"http://{address}/ping")[0] == 200
