"""The pure parts of nsqadmin's cluster view, on hand-made reports: merging each node's
partitions into one row per partition (silent and stale leaders, lag, garbage), the node
list's leases, and that a plain NSQ document gains nothing."""

from __future__ import annotations

from typing import Any

from nsqpy.nsqadmin.cluster_state import ClusterState, _merge, with_leases
from nsqpy.nsqadmin.partitions import is_cluster_topic, merge, node_partitions
from nsqpy.nsqadmin.render import Links
from nsqpy.nsqadmin.stats import Producer
from nsqpy.nsqadmin.views_cluster import cluster_summary, partitions_section

ADDR = {"A": "h:1", "B": "h:2", "C": "h:3"}


def entry(role: str, **kw: Any) -> dict[str, Any]:
    doc = {
        "partition": 0,
        "depth": 5,
        "message_count": 9,
        "high_watermark": 9,
        "role": role,
        "leader": "A",
        "isr": ["A", "B"],
        "catchup": ["C"],
        "epoch": 3,
        "leader_epoch": 2,
        "committed_offset": 9,
    }
    return {**doc, **kw}


def report(node: str, *entries: dict[str, Any]) -> dict[str, Any]:
    raw = {"topic_name": "t", "partition_num": 1, "partitions": list(entries)}
    return {"node": node, "partitions": node_partitions(node, raw)}


def test_single_node_documents_have_no_cluster_fields() -> None:
    plain = {"topic_name": "t", "partitions": [{"partition": 0, "depth": 1}]}
    assert node_partitions("h:1", plain) is None
    assert node_partitions("h:1", {"topic_name": "t"}) is None
    assert not is_cluster_topic([{"node": "h:1"}])
    assert "node_id" not in Producer("h", 1).to_json()


def test_the_leaders_report_wins_and_followers_show_their_lag() -> None:
    rows = merge(
        [
            report("h:1", entry("leader")),
            report("h:2", entry("follower", high_watermark=4, depth=0)),
            report("h:3", entry("follower", high_watermark=12)),  # ahead: lag is 0, not < 0
        ],
        ADDR,
    )
    assert len(rows) == 1
    row = rows[0]
    assert (row["leader"], row["leader_node"], row["leader_reported"]) == ("A", "h:1", True)
    assert (row["depth"], row["committed_offset"], row["epoch"]) == (5, 9, 3)
    lags = {r["id"]: (r["role"], r["end"], r["lag"]) for r in row["replicas"]}
    assert lags == {"A": ("leader", 9, 0), "B": ("isr", 4, 5), "C": ("catchup", 12, 0)}


def test_a_stale_leader_loses_to_the_newer_epoch() -> None:
    new = entry("leader", leader="B", isr=["B"], catchup=[], leader_epoch=3, epoch=4)
    rows = merge([report("h:1", entry("leader")), report("h:2", new)], ADDR)
    assert (rows[0]["leader"], rows[0]["isr"], rows[0]["epoch"]) == ("B", ["B"], 4)


def test_a_silent_leader_is_shown_from_its_followers() -> None:
    rows = merge([report("h:2", entry("follower", high_watermark=4))], ADDR)
    row = rows[0]
    assert row["leader"] == "A" and row["leader_reported"] is False
    assert row["depth"] is None and row["committed_offset"] is None
    assert {r["id"]: (r["end"], r["lag"]) for r in row["replicas"]} == {
        "A": (None, None),
        "B": (4, None),
        "C": (None, None),
    }
    html = partitions_section(Links("/"), rows)
    assert "leader not reporting" in html and "not reporting" in html


def test_garbage_in_reports_is_read_as_empty() -> None:
    raw = {"partitions": [{"role": "leader", "isr": "A", "leader": 7, "epoch": "x"}, 3]}
    held = node_partitions("h:1", raw)
    assert held is not None and len(held) == 1
    assert held[0]["isr"] == [] and held[0]["leader"] == "" and held[0]["epoch"] == 0
    rows = merge([{"node": "h:1", "partitions": held}], ADDR)
    # The leader named no leader: it is the node that reported leading (h:1 is A).
    assert rows[0]["leader"] == "A" and [r["id"] for r in rows[0]["replicas"]] == ["A"]
    unknown = node_partitions("h:9", raw)
    assert merge([{"node": "h:9", "partitions": unknown}], ADDR)[0]["replicas"] == []
    partitions_section(Links("/"), rows)  # renders


def test_node_list_marks_leases_and_adds_nodes_only_etcd_knows() -> None:
    state = ClusterState(
        nodes={
            "A": {"id": "A", "hostname": "a", "broadcast_address": "h", "tcp_port": 10,
                  "http_port": 1, "leaders": 2, "replicas": 3},
            "C": {"id": "C", "hostname": "c", "broadcast_address": "h", "tcp_port": 30,
                  "http_port": 3, "leaders": 0, "replicas": 1},
        }
    )  # fmt: skip
    listed = [Producer("h", 1, 10, "a").to_json(), Producer("h", 2, 20, "b").to_json()]
    nodes = {n["hostname"]: n for n in with_leases(listed, state)}
    assert {
        k: (n["node_id"], n["lease"], n["leaders"], n["replicas"]) for k, n in nodes.items()
    } == {
        "a": ("A", True, 2, 3),
        "b": ("", False, 0, 0),
        "c": ("C", True, 0, 1),
    }
    assert nodes["c"]["http_port"] == 3 and nodes["c"]["topics"] == []


def test_the_cluster_is_secure_only_when_every_lookupd_says_so() -> None:
    """A lookupd's ``/cluster/stats`` says ``secure`` when it and every node it lists run
    with mutual TLS; one that says otherwise, or nothing (an older version), makes the view
    insecure, and the node list's summary warns."""
    for answers, secure in (
        ([True, True], True),
        ([True, False], False),
        ([True, None], False),
    ):
        state = ClusterState()
        for said in answers:
            stats = {} if said is None else {"secure": said}
            _merge(state, stats, {})
        assert state.secure is secure and state.to_json()["secure"] is secure
        page = cluster_summary(Links("/"), state.to_json())
        assert ("insecure cluster" in page) is not secure


def test_offline_and_under_replicated_partitions_are_red_at_the_top() -> None:
    """What each lookupd's ``/cluster/stats`` lists as offline or under-replicated is
    merged and shown in red above the node list (offline with the way to force a
    recovery); other degraded partitions stay a warning, each partition named once."""
    state = ClusterState()
    _merge(
        state,
        {
            "offline_partitions": ["t/0"],
            "under_replicated_partitions": ["t/0", "t/1"],
            "degraded_partitions": ["t/0", "t/1", "u/3"],
            "secure": True,
        },
        {},
    )
    _merge(state, {"offline_partitions": ["t/0"], "under_replicated_partitions": ["t/1"],
                   "secure": True}, {})  # fmt: skip
    doc = state.to_json()
    assert doc["offline_partitions"] == ["t/0"]
    assert doc["under_replicated_partitions"] == ["t/0", "t/1"]
    page = cluster_summary(Links("/"), doc)
    errors = page.split('<div class="alert error" role="alert">')[1:]
    assert len(errors) == 2
    assert errors[0].startswith("offline partitions") and "t/0" in errors[0]
    assert "/topic/partition/recover" in errors[0]
    assert errors[1].startswith("under-replicated partitions") and "t/0, t/1" in errors[1]
    warning = page.split('<div class="alert warning" role="alert">')[1]
    assert warning.startswith("degraded partitions: u/3<")
    healthy = cluster_summary(Links("/"), ClusterState(secure=True).to_json())
    assert "alert error" not in healthy and "alert warning" not in healthy
