"""Whether a topic can be used on this node now: ``TopicGate``, for nsqd in a cluster.

Outside a cluster nsqd creates a topic the moment a client names it (NSQ). In a cluster
(``nsqpy.nsqd.cluster`` implements this) a topic lives where etcd places it: a node may
hold it (``HERE``), only other nodes may (``ELSEWHERE``: the client is told
``E_FAILED_ON_NOT_LEADER`` and looks the leaders up again), or it may not exist yet
(``ABSENT``: ``prepare`` creates it through the coordinator, with this node leading its
first partition, as NSQ's clients expect a PUB or SUB of a new topic to work). The TCP and
HTTP handlers (``nsqd.tcp``, ``nsqd.http_args``) ask it before creating anything. Imports
only the standard library.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from nsqpy import __version__

if TYPE_CHECKING:
    from nsqpy.nsqd.tls import TlsSettings

HERE, ELSEWHERE, ABSENT = "here", "elsewhere", "absent"

# The user agent of publishes one nsqd forwards to another (``nsqpy.nsqd.forward``): a
# node that does not lead what such a publish names refuses it rather than forward again.
FORWARD_AGENT = f"nsqpy-forward/{__version__}"


class TopicGate(Protocol):
    # In a secure cluster: how a forwarding node's connection (IDENTIFY with
    # ``FORWARD_AGENT``) is upgraded, to mutual TLS with the cluster's certificates; the
    # node on the other end is then trusted as a member (no AUTH). None otherwise.
    peer_tls: TlsSettings | None

    def where(self, topic: str, partition: int = -1) -> str:
        """``HERE``, ``ELSEWHERE`` or ``ABSENT`` (see the module docstring); with a
        ``partition`` (youzan's forms), ``ABSENT`` also while this node's view lacks that
        partition, and ``HERE`` once it took up the partition etcd gives it."""
        ...

    async def prepare(self, topic: str, *, create: bool = True, partition: int = -1) -> None:
        """Create the topic through the coordinator and take up what this node holds of
        it; TopicNotExist when it cannot be created. Without ``create`` (a command naming
        a partition: youzan's forms create nothing), TopicNotExist unless etcd has it, and
        its ``partition``."""
        ...

    async def create_partitions(self, topic: str, count: int) -> None:
        """youzan's INTERNAL_CREATE_TOPIC: the topic exists with at least ``count``
        partitions (created through the coordinator, or grown) and this node took up what
        it holds of it; CreateTopicFailed when it cannot be (``--disable-auto-create``)."""
        ...

    def cursor_moved(self, topic: str, partition: int = -1) -> None:
        """An ordered channel of ``topic`` finished or requeued a message of ``partition``
        (-1: of several, or of any): that partition's followers get the channel's cursor
        now rather than within the second (ordered channels replicate synchronously)."""
        ...

    async def forward(
        self, topic: str, partition: int, bodies: Sequence[bytes], defer_ms: int, key: bytes
    ) -> None:
        """Publish through the partition's leader (``partition`` -1: the one ``key``
        hashes to, or with no key any partition of the topic) and return once it answered
        OK; raises its error, or NotLeader when no leader could be reached in time
        (``nsqpy.nsqd.forward``)."""
        ...

    async def forward_command(
        self, topic: str, partition: int, count: int, encode: Callable[[int], bytes], key: bytes
    ) -> bytes:
        """``forward`` for one of Youzan's publish forms: ``encode(p)`` is the command
        naming partition ``p``; returns the leader's response (``OK`` or a traced reply)."""
        ...
