"""The etcd key layout: every key built parses back to what built it; nothing else does."""

from __future__ import annotations

import pytest

from nsqpy.cluster.keys import Keys

K = Keys("prod")


def test_layout() -> None:
    assert K.root == "/nsqpy/prod/"
    assert K.node("n1") == "/nsqpy/prod/nodes/n1"
    assert K.nodes_prefix == "/nsqpy/prod/nodes/"
    assert K.lookupd("l1") == "/nsqpy/prod/lookupds/l1"
    assert K.lookupds_prefix == "/nsqpy/prod/lookupds/"
    assert K.coordinator == "/nsqpy/prod/coordinator"
    assert K.removing("n1") == "/nsqpy/prod/removing/n1"
    assert K.topics_prefix == "/nsqpy/prod/topics/"
    assert K.topic_prefix("orders") == "/nsqpy/prod/topics/orders/"
    assert K.topic_meta("orders") == "/nsqpy/prod/topics/orders/meta"
    assert K.replicas("orders", 3) == "/nsqpy/prod/topics/orders/3/replicas"
    assert K.leader_session("orders", 0) == "/nsqpy/prod/topics/orders/0/leader-session"
    # every key of a topic is under its prefix, and no other topic's key is
    assert K.replicas("orders", 0).startswith(K.topic_prefix("orders"))
    assert not K.topic_meta("orders2").startswith(K.topic_prefix("orders"))


def test_parse_inverts_every_builder() -> None:
    assert K.parse(K.node("n1")) == ("node", "n1")
    assert K.parse(K.lookupd("l-2")) == ("lookupd", "l-2")
    assert K.parse(K.coordinator) == ("coordinator",)
    assert K.parse(K.removing("n1")) == ("removing", "n1")
    assert K.parse(K.topic_meta("a.b_c-d#ephemeral")) == ("meta", "a.b_c-d#ephemeral")
    assert K.parse(K.replicas("t", 254)) == ("replicas", "t", 254)
    assert K.parse(K.leader_session("t", 0)) == ("leader_session", "t", 0)


@pytest.mark.parametrize(
    "key",
    [
        "/nsqpy/other/nodes/n1",  # another cluster
        "/nsqpy/prod",
        "/nsqpy/prod/",
        "/nsqpy/prod/nodes/",
        "/nsqpy/prod/nodes/a/b",
        "/nsqpy/prod/topics/t",
        "/nsqpy/prod/topics/t/",
        "/nsqpy/prod/topics/t/metadata",
        "/nsqpy/prod/topics/t/01/replicas",  # not canonical
        "/nsqpy/prod/topics/t/-1/replicas",
        "/nsqpy/prod/topics/t/x/replicas",
        "/nsqpy/prod/topics/t/٣/replicas",  # a non-ASCII digit
        "/nsqpy/prod/topics/t/0/replica",
        "/nsqpy/prod/topics//meta",
        "/nsqpy/prod/coordinator/x",
        "/nsqpy/prod/removing/",
        "/nsqpy/prod/removing/a/b",
        "/nsqpy/prod/unknown",
        "",
    ],
)
def test_parse_garbage_is_none(key: str) -> None:
    assert K.parse(key) is None


@pytest.mark.parametrize("bad", ["", "a/b", "a b", "a\nb", ".", "..", "x" * 256, "\x00"])
def test_bad_segments_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        Keys(bad)
    with pytest.raises(ValueError, match="topic"):
        K.topic_meta(bad)
    with pytest.raises(ValueError, match="node id"):
        K.node(bad)


@pytest.mark.parametrize("bad", [-1, True, 1.0, "1"])
def test_bad_partitions_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="partition"):
        K.replicas("t", bad)  # type: ignore[arg-type]
