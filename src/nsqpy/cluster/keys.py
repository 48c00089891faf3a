"""The etcd key layout of one cluster: every key nsqpy writes lives under ``/nsqpy/<cluster-id>/``.

Owns the names only (building them and parsing them back); the values are ``model``'s JSON.
Standard library only: no asyncio, no etcd client, nothing else from nsqpy.

Layout (``<root>`` = ``/nsqpy/<cluster-id>/``)::

    <root>nodes/<node-id>                   lease-bound NodeInfo of a live nsqd
    <root>lookupds/<lookupd-id>             lease-bound LookupdInfo of a live nsqlookupd
    <root>coordinator                       lease-bound CoordinatorInfo: the coordinator lock
    <root>removing/<node-id>                a node being drained (``/cluster/node/remove``)
    <root>topics/<topic>/meta               TopicMeta
    <root>topics/<topic>/<p>/replicas       Replicas of partition p (decimal, no leading zero)
    <root>topics/<topic>/<p>/leader-session lease of the nsqd leading partition p

A cluster id, node id, lookupd id or topic is one non-empty path segment: no ``/``, no
whitespace or control characters, not ``.``/``..``, at most 255 characters.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["Keys", "ParsedKey", "check_segment"]

ROOT = "/nsqpy/"
MAX_SEGMENT = 255
_BAD = re.compile(r"[/\s\x00-\x1f\x7f]")

# What `Keys.parse` answers: the kind of key and the names in it.
ParsedKey = (
    tuple[Literal["coordinator"]]
    | tuple[Literal["node", "lookupd", "meta", "removing"], str]
    | tuple[Literal["replicas", "leader_session"], str, int]
)


def check_segment(what: str, value: str) -> str:
    """``value`` if it can be one key segment, else ValueError naming ``what``."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > MAX_SEGMENT:
        raise ValueError(f"{what} is {len(value)} characters long, the limit is {MAX_SEGMENT}")
    if value in (".", "..") or _BAD.search(value):
        raise ValueError(f"{what} {value!r} may not contain '/', whitespace or control characters")
    return value


def _partition(text: str) -> int | None:
    if not text.isdigit() or not text.isascii() or (len(text) > 1 and text[0] == "0"):
        return None
    return int(text)


class Keys:
    """The keys of cluster ``cluster_id``; every attribute and method returns a ``str`` key."""

    def __init__(self, cluster_id: str) -> None:
        self.cluster_id = check_segment("cluster id", cluster_id)
        self.root = f"{ROOT}{cluster_id}/"
        self.nodes_prefix = self.root + "nodes/"
        self.lookupds_prefix = self.root + "lookupds/"
        self.coordinator = self.root + "coordinator"
        self.topics_prefix = self.root + "topics/"
        self.removing_prefix = self.root + "removing/"

    def __repr__(self) -> str:
        return f"Keys({self.cluster_id!r})"

    def node(self, node_id: str) -> str:
        return self.nodes_prefix + check_segment("node id", node_id)

    def lookupd(self, lookupd_id: str) -> str:
        return self.lookupds_prefix + check_segment("lookupd id", lookupd_id)

    def removing(self, node_id: str) -> str:
        return self.removing_prefix + check_segment("node id", node_id)

    def topic_prefix(self, topic: str) -> str:
        return self.topics_prefix + check_segment("topic", topic) + "/"

    def topic_meta(self, topic: str) -> str:
        return self.topic_prefix(topic) + "meta"

    def replicas(self, topic: str, partition: int) -> str:
        return f"{self.topic_prefix(topic)}{_check_partition(partition)}/replicas"

    def leader_session(self, topic: str, partition: int) -> str:
        return f"{self.topic_prefix(topic)}{_check_partition(partition)}/leader-session"

    def parse(self, key: str) -> ParsedKey | None:
        """What ``key`` is: ``("node", id)``, ``("lookupd", id)``, ``("coordinator",)``,
        ``("removing", id)``,
        ``("meta", topic)``, ``("replicas", topic, p)``, ``("leader_session", topic, p)``;
        None for a key outside this cluster or of no known form."""
        if not key.startswith(self.root):
            return None
        parts = key[len(self.root) :].split("/")
        if parts == ["coordinator"]:
            return ("coordinator",)
        if not all(_segment_ok(p) for p in parts):
            return None
        match parts:
            case ["nodes", node_id]:
                return ("node", node_id)
            case ["lookupds", lookupd_id]:
                return ("lookupd", lookupd_id)
            case ["removing", node_id]:
                return ("removing", node_id)
            case ["topics", topic, "meta"]:
                return ("meta", topic)
            case ["topics", topic, p, "replicas"] if (n := _partition(p)) is not None:
                return ("replicas", topic, n)
            case ["topics", topic, p, "leader-session"] if (n := _partition(p)) is not None:
                return ("leader_session", topic, n)
        return None


def _segment_ok(value: str) -> bool:
    return 0 < len(value) <= MAX_SEGMENT and value not in (".", "..") and not _BAD.search(value)


def _check_partition(partition: int) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"partition must be an int >= 0, got {partition!r}")
    return partition
