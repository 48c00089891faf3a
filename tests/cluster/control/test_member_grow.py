"""A node's view of etcd may be a moment behind the coordinator's, and a topic is grown in
two writes (the new partitions' replicas keys, then the meta that counts them): youzan's
INTERNAL_CREATE_TOPIC (``Member.ensure_topic`` with a count) answers only once this node's
view counts the partitions asked, and a topic the coordinator has already grown further
is no error. An in-process nsqlookupd (the coordinator) and nsqd of one cluster on the
session's real etcd; the nsqd's view holds back the topic's meta writes while the test
says so (what a watch a moment behind delivers)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp

from nsqpy.cluster.etcd_types import Event
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.member import Member
from nsqpy.cluster.view import ClusterView
from nsqpy.lookupd.app import NsqLookupd
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import eventually

from .test_member_gate import cluster_of


def hold_meta(view: ClusterView, key: str) -> tuple[asyncio.Event, Callable[[], None]]:
    """From now on ``view`` applies no write of ``key`` until the returned event is set;
    the returned function (called by the test) then applies them, in order."""
    released = asyncio.Event()
    held: list[Event] = []
    real = view._apply

    def apply(events: list[Event]) -> None:
        if not released.is_set():
            held.extend(e for e in events if e.kv.key == key)
            events = [e for e in events if e.kv.key != key]
        real(events)

    def release() -> None:
        released.set()
        real(held)
        asyncio.get_running_loop().create_task(view._notify())

    view._apply = apply  # type: ignore[method-assign]
    return released, release


async def expand(lookupd: NsqLookupd, topic: str, count: int) -> int:
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{lookupd.http_port}/topic/partition/expand"
        async with http.post(url, params={"topic": topic, "partition_num": str(count)}) as resp:
            return resp.status


async def one_partition(
    server: NsqdServer, keys: Keys, topic: str
) -> tuple[Member, ClusterView, Callable[[], None]]:
    """``topic`` created with one partition through the coordinator, then its meta held
    back in the node's view: the member, the view, and what releases the meta."""
    cluster = cluster_of(server)
    member, view = cluster.member, cluster.view
    assert member is not None and view is not None
    await eventually(lambda: view.coordinator is not None, 10)
    await member.ensure_topic(topic, 1)
    _, release = hold_meta(view, keys.topic_meta(topic))
    return member, view, release


def has_replicas(view: ClusterView, topic: str, count: int) -> Callable[[], bool]:
    return lambda: all((topic, p) in view.snapshot().replicas for p in range(count))


async def test_a_grow_is_answered_once_this_nodes_view_counts_the_partitions(
    lookupd: NsqLookupd, server: NsqdServer, keys: Keys
) -> None:
    topic = "grown"
    member, view, release = await one_partition(server, keys, topic)
    grow = asyncio.create_task(member.ensure_topic(topic, 4))
    await eventually(has_replicas(view, topic, 4), 10)
    await asyncio.sleep(0.3)
    assert not grow.done(), "answered while this node's view counted one partition"
    release()
    await asyncio.wait_for(grow, 10)
    assert view.snapshot().topics[topic].partition_num == 4


async def test_a_topic_the_coordinator_grew_further_than_this_view_knows_is_no_error(
    lookupd: NsqLookupd, server: NsqdServer, keys: Keys
) -> None:
    topic = "further"
    member, view, release = await one_partition(server, keys, topic)
    assert await expand(lookupd, topic, 5) == 200  # (another node's INTERNAL_CREATE_TOPIC)
    await eventually(has_replicas(view, topic, 5), 10)
    assert view.snapshot().topics[topic].partition_num == 1
    asked = asyncio.create_task(member.ensure_topic(topic, 3))  # (it has that many)
    await asyncio.sleep(0.3)
    assert not asked.done() or asked.exception() is None
    release()
    await asyncio.wait_for(asked, 10)
    assert view.snapshot().topics[topic].partition_num == 5
