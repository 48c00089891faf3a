"""The JSON forms of the cluster records: golden bytes, round trips, and garbage in -> a
ValueError that names the field."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from nsqpy.cluster.model import (
    CoordinatorInfo,
    Load,
    LookupdInfo,
    Move,
    NodeInfo,
    Replicas,
    Snapshot,
    TopicMeta,
    Versioned,
    partition_name,
)

NODE = NodeInfo(
    id="n1", hostname="h1", broadcast_address="10.0.0.1", tcp_port=4150, http_port=4151,
    rpc_address="10.0.0.1:4250", version="0.1.0", started_ns=123,
    load=Load(partitions=2, leaders=1, msgs_per_sec=12.5, bytes=4096),
    ends={"orders/0": (3, 1000), "orders/1": (1, 0)}, lagging={"orders/0": (3, ("n2",))},
    caught_up={"orders/1": (1, ("n3", "n4"))}, failing={"orders/0": 3},
    loads={"orders/0": (250.5, 1 << 20), "orders/1": (0.0, 0)},
)  # fmt: skip
META = TopicMeta(partition_num=4, replicator=2, syncdisk=100, retention_days=3, ordered=True,
                 ext=True, multipart=True, created_ns=99)  # fmt: skip
REPLICAS = Replicas(leader="n2", isr=("n2", "n1"), catchup=("n3",), epoch=7, leader_epoch=3)
MOVING = Replicas(leader="n2", isr=("n2",), epoch=2, leader_epoch=1, move=Move("n2", "n5"))
RECORDS: list[Any] = [NODE, META, REPLICAS, MOVING, LookupdInfo("l1", "10.0.0.9", 4160, 4161),
                      CoordinatorInfo("l1", "10.0.0.9:4161")]  # fmt: skip


def test_golden_bytes() -> None:
    assert REPLICAS.to_json() == (
        b'{"catchup":["n3"],"epoch":7,"isr":["n2","n1"],"leader":"n2","leader_epoch":3}'
    )
    assert TopicMeta(1, 1).to_json() == (
        b'{"created_ns":0,"ext":false,"multipart":false,"ordered":false,"partition_num":1,'
        b'"replicator":1,"retention_days":0,"syncdisk":0}'
    )
    assert json.loads(NODE.to_json())["ends"] == {"orders/0": [3, 1000], "orders/1": [1, 0]}
    assert json.loads(NODE.to_json())["lagging"] == {"orders/0": [3, ["n2"]]}
    assert json.loads(NODE.to_json())["failing"] == {"orders/0": 3}
    assert json.loads(NODE.to_json())["loads"] == {"orders/0": [250.5, 1 << 20],
                                                   "orders/1": [0.0, 0]}  # fmt: skip
    assert CoordinatorInfo("l1", "h:1").to_json() == b'{"http_address":"h:1","id":"l1"}'
    assert json.loads(MOVING.to_json())["move"] == {"from": "n2", "to": "n5", "leader": False}


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_round_trip(record: Any) -> None:
    data = record.to_json()
    back = type(record).from_json(data)
    assert back == record
    assert back.to_json() == data
    assert type(record).from_json(data.decode()) == record


def test_unknown_fields_are_ignored_and_optional_ones_default() -> None:
    assert TopicMeta.from_json(b'{"partition_num":2,"replicator":1,"new":1}') == TopicMeta(2, 1)
    drop = ("ends", "load", "lagging", "caught_up", "failing", "loads")
    minimal = {k: v for k, v in json.loads(NODE.to_json()).items() if k not in drop}
    node = NodeInfo.from_json(json.dumps(minimal).encode())
    assert node.ends == {} and node.load == Load() and node.lagging == node.caught_up == {}
    assert node.failing == {} and node.loads == {}
    assert (
        Replicas.from_json(b'{"leader":"a","isr":["a"],"epoch":1,"leader_epoch":1}').catchup == ()
    )


def test_node_ends_and_snapshot_helpers() -> None:
    assert NODE.end("orders", 0) == (3, 1000)
    assert NODE.end("orders", 5) is None
    assert partition_name("t", 2) == "t/2"
    with pytest.raises(TypeError):
        NODE.ends["x/0"] = (1, 1)  # type: ignore[index]
    snap = Snapshot(
        nodes={"n1": NODE},
        replicas={
            ("t", 1): Versioned(REPLICAS, 5),
            ("t", 0): Versioned(Replicas("n1", ("n1",)), 4),
        },
    )
    assert [p for p, _ in snap.partitions("t")] == [0, 1]
    leaders, held = snap.counts()
    assert leaders == {"n1": 1, "n2": 1, "n3": 0}
    assert held == {"n1": 2, "n2": 1, "n3": 1}
    assert REPLICAS.holders == ("n2", "n1", "n3") and REPLICAS.followers == ("n1",)


@pytest.mark.parametrize(
    ("cls", "data", "field"),
    [
        (Replicas, b"", "not JSON"),
        (Replicas, b"\xff\xfe", "not JSON"),
        (Replicas, b"[1]", "JSON object"),
        (Replicas, b'{"isr":["a"],"epoch":1,"leader_epoch":1}', "'leader'"),
        (Replicas, b'{"leader":"a","isr":"a","epoch":1,"leader_epoch":1}', "'isr'"),
        (Replicas, b'{"leader":"a","isr":["a",""],"epoch":1,"leader_epoch":1}', "'isr'"),
        (
            Replicas,
            b'{"leader":"a","isr":["a"],"catchup":[1],"epoch":1,"leader_epoch":1}',
            "'catchup'",
        ),
        (Replicas, b'{"leader":"a","isr":["a"],"epoch":"1","leader_epoch":1}', "'epoch'"),
        (Replicas, b'{"leader":"a","isr":["a"],"epoch":1.5,"leader_epoch":1}', "'epoch'"),
        (Replicas, b'{"leader":"a","isr":["a"],"epoch":-1,"leader_epoch":1}', "'epoch'"),
        (Replicas, b'{"leader":"a","isr":["a"],"epoch":1}', "'leader_epoch'"),
        (Replicas, b'{"leader":"a","isr":["a"],"epoch":true,"leader_epoch":1}', "'epoch'"),
        (Replicas, b'{"leader":"b","isr":["a"],"epoch":1,"leader_epoch":1}', "not in isr"),
        (
            Replicas,
            b'{"leader":"a","isr":["a"],"catchup":["a"],"epoch":1,"leader_epoch":1}',
            "twice",
        ),
        (Replicas, b'{"leader":"a","isr":["a","a"],"epoch":1,"leader_epoch":1}', "twice"),
        (Replicas, b'{"leader":"a","isr":["a"],"epoch":1,"leader_epoch":1,"move":1}', "'move'"),
        (
            Replicas,
            b'{"leader":"a","isr":["a"],"epoch":1,"leader_epoch":1,"move":{"from":"a"}}',
            "'to'",
        ),
        (
            Replicas,
            b'{"leader":"a","isr":["a"],"epoch":1,"leader_epoch":1,'
            b'"move":{"from":"a","to":"b","leader":"yes"}}',
            "'leader'",
        ),
        (
            Replicas,
            b'{"leader":"a","isr":["a"],"epoch":1,"leader_epoch":1,"move":{"from":"a","to":"a"}}',
            "same node",
        ),
        (TopicMeta, b'{"replicator":1}', "'partition_num'"),
        (TopicMeta, b'{"partition_num":0,"replicator":1}', "'partition_num'"),
        (TopicMeta, b'{"partition_num":1,"replicator":0}', "'replicator'"),
        (TopicMeta, b'{"partition_num":1,"replicator":1,"ordered":1}', "'ordered'"),
        (TopicMeta, b'{"partition_num":1,"replicator":1,"multipart":"true"}', "'multipart'"),
        (TopicMeta, b'{"partition_num":1,"replicator":1,"syncdisk":-1}', "'syncdisk'"),
        (NodeInfo, b'{"id":"n","hostname":"h"}', "'broadcast_address'"),
        (NodeInfo, b"null", "JSON object"),
        (
            LookupdInfo,
            b'{"id":"l","broadcast_address":"h","tcp_port":"1","http_port":2}',
            "'tcp_port'",
        ),
        (CoordinatorInfo, b'{"id":"l"}', "'http_address'"),
    ],
)
def test_garbage_is_a_value_error_naming_the_field(cls: Any, data: bytes, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        cls.from_json(data)


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"ends": []}, "'ends'"),
        ({"ends": {"noslash": [1, 2]}}, "'ends'"),
        ({"ends": {"t/0": [1]}}, "'ends'"),
        ({"ends": {"t/0": [1, -2]}}, "'ends'"),
        ({"ends": {"t/0": [True, 2]}}, "'ends'"),
        ({"lagging": []}, "'lagging'"),
        ({"lagging": {"t/0": [1, "n2"]}}, "'lagging'"),
        ({"lagging": {"t/0": [-1, ["n2"]]}}, "'lagging'"),
        ({"lagging": {"t/0": [1, [""]]}}, "'lagging'"),
        ({"caught_up": {"t/0": [1, "n2"]}}, "'caught_up'"),
        ({"caught_up": {"t0": [1, ["n2"]]}}, "'caught_up'"),
        ({"failing": []}, "'failing'"),
        ({"failing": {"t/0": -1}}, "'failing'"),
        ({"failing": {"t0": 1}}, "'failing'"),
        ({"failing": {"t/0": True}}, "'failing'"),
        ({"loads": []}, "'loads'"),
        ({"loads": {"t0": [1.0, 2]}}, "'loads'"),
        ({"loads": {"t/0": [1.0]}}, "'loads'"),
        ({"loads": {"t/0": [-1.0, 2]}}, "'loads'"),
        ({"loads": {"t/0": ["fast", 2]}}, "'loads'"),
        ({"loads": {"t/0": [1.0, 2.5]}}, "'loads'"),
        ({"loads": {"t/0": [1.0, True]}}, "'loads'"),
        ({"loads": {"t/0": [float("nan"), 2]}}, "'loads'"),
        ({"load": []}, "'load'"),
        ({"load": {"msgs_per_sec": "fast"}}, "'msgs_per_sec'"),
        ({"load": {"leaders": -1}}, "'leaders'"),
        ({"http_port": None}, "'http_port'"),
        ({"id": ""}, "'id'"),
    ],
)
def test_node_garbage(patch: dict[str, Any], field: str) -> None:
    obj = json.loads(NODE.to_json()) | patch
    with pytest.raises(ValueError, match=field):
        NodeInfo.from_json(json.dumps(obj).encode())


def test_a_report_is_worth_writing_again_when_its_state_or_load_moved() -> None:
    """What ``Member`` writes again: anything but the load figures at once (``without_load``
    differs); the load figures alone only once one moved by more than a fifth and the floor
    (5 msgs/s, 1 MiB), or a partition appeared or went."""

    def with_loads(rate: float, size: int, node_rate: float = 12.5) -> NodeInfo:
        load = Load(partitions=2, leaders=1, msgs_per_sec=node_rate, bytes=4096)
        return replace(NODE, load=load, loads={"orders/0": (rate, size), "orders/1": (0.0, 0)})

    base = with_loads(250.5, 1 << 20)
    assert base.without_load() == with_loads(900.0, 5 << 30).without_load()
    assert base.without_load() != replace(base, ends={"orders/0": (3, 1001)}).without_load()
    assert base.without_load() != replace(base, lagging={}).without_load()
    assert not with_loads(250.5, 1 << 20).load_moved(base)
    assert not with_loads(290.0, 1 << 20).load_moved(base), "16 %: jitter"
    assert with_loads(310.0, 1 << 20).load_moved(base), "24 % and above the floor"
    assert not with_loads(250.5, 2 << 20).load_moved(base), "1 MiB more: the floor"
    assert with_loads(250.5, 3 << 20).load_moved(base)
    idle = with_loads(3.0, 0, node_rate=3.0)
    assert not with_loads(0.1, 0, node_rate=0.0).load_moved(idle), "a rate decaying to 0"
    assert with_loads(250.5, 1 << 20, node_rate=40.0).load_moved(base), "the node's own rate"
    assert replace(base, loads={"orders/0": (250.5, 1 << 20)}).load_moved(base)
