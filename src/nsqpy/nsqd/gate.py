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

from typing import Protocol

HERE, ELSEWHERE, ABSENT = "here", "elsewhere", "absent"


class TopicGate(Protocol):
    def where(self, topic: str) -> str:
        """``HERE``, ``ELSEWHERE`` or ``ABSENT`` (see the module docstring)."""
        ...

    async def prepare(self, topic: str) -> None:
        """Create the topic through the coordinator and take up what this node holds of
        it; TopicNotExist when it cannot be created."""
        ...
