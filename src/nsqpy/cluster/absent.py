"""Asking etcd about a topic this node's view lacks, at a bounded cost.

A command that names a partition of a topic the view has not brought (a forwarded publish
can arrive before the watch does) asks etcd whether the topic exists. Clients can send
such commands as fast as they like, for one name (a consumer retrying a topic that does
not exist) or for ever new ones, and etcd is the cluster's: every lease and every
election depends on it answering. So ``TopicLookup`` asks etcd about one topic once at a
time (commands that come meanwhile share the answer), keeps each answer ``REMEMBER_S``
(the view brings a topic created since within milliseconds, and a topic the view has is
never looked up here), and asks at most ``GETS_PER_S`` times a second in all; beyond, a
topic the view lacks is answered as missing without asking. Imports asyncio and the etcd
client; the caller turns a missing topic into its error.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable

from nsqpy.cluster.etcd import Etcd
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import TopicMeta

REMEMBER_S = 1.0  # an answer of etcd's about a topic is used again for this long
REMEMBERED = 1024  # answers kept at most (the oldest go first)
GETS_PER_S = 100  # etcd is asked at most this many times a second, all topics together


class TooManyLookups(Exception):
    """etcd was asked ``GETS_PER_S`` times this second: the topic is not looked up."""


class TopicLookup:
    """How many partitions etcd has of a topic (see the module docstring)."""

    def __init__(self, etcd: Etcd, keys: Keys, clock: Callable[[], float] = time.monotonic):
        self.etcd, self.keys, self.clock = etcd, keys, clock
        self._answers: OrderedDict[str, tuple[int, float]] = OrderedDict()  # (count, until)
        self._asking: dict[str, asyncio.Future[int]] = {}
        self._second = 0.0  # when the current second of ``GETS_PER_S`` began
        self._asked = 0  # gets in it
        self.gets = 0  # etcd was asked, in all

    async def partitions(self, topic: str) -> int:
        """The topic's partition count in etcd (0: no such topic). Raises TooManyLookups,
        or what the etcd client raises (EtcdUnavailable)."""
        now = self.clock()
        known = self._answers.get(topic)
        if known is not None and known[1] > now:
            return known[0]
        asking = self._asking.get(topic)
        if asking is None:
            if now - self._second >= 1.0:
                self._second, self._asked = now, 0
            if self._asked >= GETS_PER_S:
                raise TooManyLookups(f"etcd was asked about {GETS_PER_S} topics this second")
            self._asked += 1
            self.gets += 1
            # (a task of its own: a command cancelled while it waits leaves it to the rest)
            asking = self._asking[topic] = asyncio.ensure_future(self._get(topic))
            asking.add_done_callback(lambda done: self._done(topic, done))
        return await asyncio.shield(asking)

    async def _get(self, topic: str) -> int:
        kv = await self.etcd.get(self.keys.topic_meta(topic))
        count = 0 if kv is None else TopicMeta.from_json(kv.value).partition_num
        self._answers[topic] = (count, self.clock() + REMEMBER_S)
        self._answers.move_to_end(topic)
        while len(self._answers) > REMEMBERED:
            self._answers.popitem(last=False)
        return count

    def _done(self, topic: str, done: asyncio.Future[int]) -> None:
        self._asking.pop(topic, None)
        if not done.cancelled():
            done.exception()  # (retrieved: every command that waited may be gone)


__all__ = ["GETS_PER_S", "REMEMBERED", "REMEMBER_S", "TooManyLookups", "TopicLookup"]
