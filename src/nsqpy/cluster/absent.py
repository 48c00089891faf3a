"""Asking etcd about a topic this node's view lacks, at a bounded cost.

A command that names a partition of a topic the view has not brought (a forwarded publish
can arrive before the watch does) asks etcd whether the topic exists. Clients can send
such commands as fast as they like, for one name (a consumer retrying a topic that does
not exist) or for ever new ones, and etcd is the cluster's: every lease and every
election depends on it answering. So ``TopicLookup`` asks etcd about one topic once at a
time (commands that come meanwhile share the answer), keeps an answer that the topic does
not exist ``REMEMBER_S`` (a topic created meanwhile is found once the view brings it, or
when that time is up; an answer that it exists is never kept: the view brings it, or it
was deleted), and asks at most ``GETS_PER_S`` times in any second; beyond, a topic the
view lacks is answered as missing without asking. Imports asyncio and the etcd client;
the caller turns a missing topic into its error.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from nsqpy.cluster.etcd import Etcd
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import TopicMeta

REMEMBER_S = 1.0  # etcd's answer that a topic does not exist is used again this long
REMEMBERED = 1024  # such answers kept at most (the oldest go first)
GETS_PER_S = 100  # etcd is asked at most this many times in any second, all topics together


class TooManyLookups(Exception):
    """etcd was asked ``GETS_PER_S`` times this second: the topic is not looked up."""


class TopicLookup:
    """How many partitions etcd has of a topic (see the module docstring)."""

    def __init__(self, etcd: Etcd, keys: Keys, clock: Callable[[], float] = time.monotonic):
        self.etcd, self.keys, self.clock = etcd, keys, clock
        self._absent: OrderedDict[str, float] = OrderedDict()  # topic -> remembered until
        self._asking: dict[str, asyncio.Future[int]] = {}
        self._asked: deque[float] = deque()  # when etcd was asked, within the last second
        self.gets = 0  # etcd was asked, in all

    async def partitions(self, topic: str, known: bool = False) -> int:
        """The topic's partition count in etcd (0: no such topic). ``known``: the caller's
        view has the topic (with fewer partitions than it wants): an answer that it does
        not exist is out of date then. Raises TooManyLookups, or what the etcd client
        raises (EtcdUnavailable)."""
        now = self.clock()
        if known:
            self._absent.pop(topic, None)
        elif self._absent.get(topic, now) > now:
            return 0
        asking = self._asking.get(topic)
        if asking is None:
            asked = self._asked
            while asked and now - asked[0] >= 1.0:
                asked.popleft()
            if len(asked) >= GETS_PER_S:
                raise TooManyLookups(f"etcd was asked about {len(asked)} topics in a second")
            asked.append(now)
            self.gets += 1
            # (a task of its own: a command cancelled while it waits leaves it to the rest)
            asking = self._asking[topic] = asyncio.ensure_future(self._get(topic))
            asking.add_done_callback(lambda done: self._done(topic, done))
        return await asyncio.shield(asking)

    async def _get(self, topic: str) -> int:
        kv = await self.etcd.get(self.keys.topic_meta(topic))
        if kv is not None:
            self._absent.pop(topic, None)
            return TopicMeta.from_json(kv.value).partition_num
        self._absent[topic] = self.clock() + REMEMBER_S
        self._absent.move_to_end(topic)
        while len(self._absent) > REMEMBERED:
            self._absent.popitem(last=False)
        return 0

    def _done(self, topic: str, done: asyncio.Future[int]) -> None:
        self._asking.pop(topic, None)
        if not done.cancelled():
            done.exception()  # (retrieved: every command that waited may be gone)


__all__ = ["GETS_PER_S", "REMEMBERED", "REMEMBER_S", "TooManyLookups", "TopicLookup"]
