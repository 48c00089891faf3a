"""Where a new topic's partitions live: a pure function of the topic's meta and a Snapshot.

Owns placement only (no I/O, no clock); imports the standard library and ``model``.

Rules, as Youzan's nsqlookupd (``nsqlookupd/http.go`` doCreateTopic, ``consistence``
CreateTopic and DataPlacement.allocTopicLeaderAndISR):

- partition_num in 1..255 else ``INVALID_ARG_TOPIC_PARTITION_NUM``; replicator in 1..5 else
  ``INVALID_ARG_TOPIC_REPLICATOR``;
- fewer live nodes than replicator: ``ErrNodeUnavailable``; unless the topic allows several
  partitions per node (``multipart`` or ``ordered``, Youzan's AllowMulti), also fewer live
  nodes than partition_num or than partition_num * replicator;
- each partition gets ``replicator`` distinct live nodes, all in the ISR, epoch 1,
  leader_epoch 1; the leader is the live node with the fewest leaders of this topic, then
  the fewest replicas of this topic, then the fewest leaders and replicas overall, then a
  stable order (node ids sorted, rotated by a CRC32 of the topic name so topics do not all
  start on the same node); followers are the other nodes with the fewest replicas (this
  topic's, then overall), same stable order last;
- ``leader_hint`` (a node id), when live, leads the first partition placed (auto-create:
  the node where the PUB or SUB arrived).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from .model import Replicas, Snapshot, TopicMeta

__all__ = [
    "MAX_PARTITION_NUM",
    "MAX_REPLICATOR",
    "PlacementError",
    "place_topic",
]

MAX_PARTITION_NUM = 255  # Youzan nsqlookupd MAX_PARTITION_NUM
MAX_REPLICATOR = 5  # Youzan nsqlookupd MAX_REPLICATOR


class PlacementError(ValueError):
    """A topic cannot be placed. ``code`` is what Youzan's nsqlookupd answers in
    ``{"message": code}`` with HTTP ``status``; ``str(error)`` says which value and limit."""

    INVALID_PARTITION_NUM = "INVALID_ARG_TOPIC_PARTITION_NUM"
    INVALID_REPLICATOR = "INVALID_ARG_TOPIC_REPLICATOR"
    # consistence.ErrNodeUnavailable as Youzan's HTTP layer prints it (CoordErr.String():
    # ErrType CoordTmpErr = 9, ErrCode RpcCommonErr = 1).
    NODE_UNAVAILABLE = "ErrType:9 ErrCode:1 : No node is available for topic"

    def __init__(self, code: str, detail: str, status: int = 400) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.status = status


def check_meta(meta: TopicMeta, live_nodes: int) -> None:
    """Raise PlacementError when ``meta`` cannot be placed on ``live_nodes`` nodes."""
    p, r = meta.partition_num, meta.replicator
    if not 1 <= p <= MAX_PARTITION_NUM:
        raise PlacementError(PlacementError.INVALID_PARTITION_NUM,
                             f"partition_num {p} is not in 1..{MAX_PARTITION_NUM}")  # fmt: skip
    if not 1 <= r <= MAX_REPLICATOR:
        raise PlacementError(PlacementError.INVALID_REPLICATOR,
                             f"replicator {r} is not in 1..{MAX_REPLICATOR}")  # fmt: skip
    if live_nodes < r:
        raise PlacementError(PlacementError.NODE_UNAVAILABLE,
                             f"replicator {r} > {live_nodes} live nodes")  # fmt: skip
    if not meta.allow_multi and live_nodes < p * r:
        raise PlacementError(
            PlacementError.NODE_UNAVAILABLE,
            f"partition_num {p} * replicator {r} > {live_nodes} live nodes "
            "(multipart=true allows several partitions per node)",
        )


def place_topic(
    name: str,
    meta: TopicMeta,
    snapshot: Snapshot,
    *,
    leader_hint: str | None = None,
    first_partition: int = 0,
) -> list[Replicas]:
    """The Replicas of partitions ``first_partition .. meta.partition_num - 1`` of topic
    ``name`` (``first_partition`` > 0 when expanding: the topic's existing partitions in
    ``snapshot`` count as load). Raises PlacementError (see the module docstring)."""
    live = sorted(n for n in snapshot.nodes if n not in snapshot.removing)  # (not drained)
    check_meta(meta, len(live))
    if live:
        shift = zlib.crc32(name.encode()) % len(live)
        live = live[shift:] + live[:shift]
    rank = {node: i for i, node in enumerate(live)}
    leaders, held = snapshot.counts()
    topic_leaders: dict[str, int] = {}
    topic_held: dict[str, int] = {}
    for _, versioned in snapshot.partitions(name):
        r = versioned.value
        topic_leaders[r.leader] = topic_leaders.get(r.leader, 0) + 1
        for node in r.holders:
            topic_held[node] = topic_held.get(node, 0) + 1

    def leader_key(n: str) -> tuple[int, ...]:
        return (topic_leaders.get(n, 0), topic_held.get(n, 0),
                leaders.get(n, 0), held.get(n, 0), rank[n])  # fmt: skip

    def follower_key(n: str) -> tuple[int, ...]:
        return (topic_held.get(n, 0), held.get(n, 0), rank[n])

    placed = []
    for p in range(first_partition, meta.partition_num):
        hinted = p == first_partition and leader_hint in rank
        leader = leader_hint if hinted and leader_hint else min(live, key=leader_key)
        chosen = [leader]
        for _ in range(meta.replicator - 1):
            chosen.append(_pick(live, chosen, follower_key))
        for node in chosen:
            held[node] = held.get(node, 0) + 1
            topic_held[node] = topic_held.get(node, 0) + 1
        leaders[leader] = leaders.get(leader, 0) + 1
        topic_leaders[leader] = topic_leaders.get(leader, 0) + 1
        placed.append(
            Replicas(leader=leader, isr=tuple(chosen), catchup=(), epoch=1, leader_epoch=1)
        )
    return placed


def _pick(live: list[str], taken: list[str], key: Callable[[str], tuple[int, ...]]) -> str:
    return min((n for n in live if n not in taken), key=key)
