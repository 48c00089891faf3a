"""Commands naming a partition of a topic this node's view lacks ask etcd about it, at a
bounded cost (``nsqpy.cluster.absent``): an in-process nsqd of a cluster on the session's
real etcd, its etcd client's reads counted.

- one topic etcd lacks, named by hundreds of commands at once, is asked about once;
- topics under ever new names are asked about at most ``GETS_PER_S`` times in a second;
  the rest are answered ``E_TOPIC_NOT_EXIST`` without asking, as every one of them is;
- an answer that a topic does not exist is used again for ``REMEMBER_S``, one that it
  exists never (``TopicLookup`` itself, on the same etcd).
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from nsqpy.cluster import absent
from nsqpy.cluster.etcd import Etcd
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import TopicMeta
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing.wire import AsyncWire

from .test_member_gate import cluster_of


def count_gets(server: NsqdServer, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys the node's etcd client reads from now on."""
    cluster = cluster_of(server)
    assert cluster.member is not None
    etcd = cluster.member.etcd
    real, asked = etcd.get, []

    async def get(key: str) -> object:
        asked.append(key)
        return await real(key)

    monkeypatch.setattr(etcd, "get", get)
    return asked


async def publish_to(port: int, topics: list[str]) -> list[tuple[int, bytes]]:
    """A PUB of partition 0 of each topic, each on a connection of its own, all at once
    (``E_TOPIC_NOT_EXIST`` ends a connection): the answers."""

    async def one(topic: str) -> tuple[int, bytes]:
        wire = await AsyncWire.connect(port)
        await wire.send(f"PUB {topic} 0\n".encode() + struct.pack(">I", 1) + b"x")
        return await wire.read_frame(10)

    return await asyncio.gather(*[one(topic) for topic in topics])


async def test_a_topic_etcd_lacks_is_asked_about_once_for_many_commands(
    server: NsqdServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(absent, "REMEMBER_S", 60.0)  # (however slow the machine)
    asked = count_gets(server, monkeypatch)
    answers = await publish_to(server.tcp_port, ["nowhere"] * 200)
    assert set(answers) == {(1, b"E_TOPIC_NOT_EXIST")}
    assert [key for key in asked if "nowhere" in key] == [
        cluster_of(server).keys.topic_meta("nowhere")
    ]


async def test_etcd_is_asked_about_topics_it_lacks_at_a_bounded_rate(
    server: NsqdServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(absent, "GETS_PER_S", 10)
    member = cluster_of(server).member
    assert member is not None
    now = [1000.5]
    monkeypatch.setattr(member._lookup, "clock", lambda: now[0])  # (all in one second)
    asked = count_gets(server, monkeypatch)
    answers = await publish_to(server.tcp_port, [f"nowhere{i}" for i in range(100)])
    assert set(answers) == {(1, b"E_TOPIC_NOT_EXIST")}
    assert len([key for key in asked if "nowhere" in key]) == 10
    now[0] += 0.999  # (a new second by the calendar, within a second of the first ten)
    await publish_to(server.tcp_port, [f"later{i}" for i in range(20)])
    assert not [key for key in asked if "later" in key]
    now[0] += 0.001  # (a second after them: ten more)
    answers = await publish_to(server.tcp_port, [f"then{i}" for i in range(100)])
    assert set(answers) == {(1, b"E_TOPIC_NOT_EXIST")}
    assert len([key for key in asked if "then" in key]) == 10


async def test_only_the_answer_that_a_topic_is_missing_is_used_again(
    etcd: Etcd, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    lookup = absent.TopicLookup(etcd, keys, clock=lambda: now[0])
    assert await lookup.partitions("made") == 0
    meta = TopicMeta(partition_num=3, replicator=1)
    await etcd.put(keys.topic_meta("made"), meta.to_json())
    now[0] += absent.REMEMBER_S - 0.01
    assert await lookup.partitions("made") == 0  # (remembered: not asked)
    assert lookup.gets == 1
    now[0] += 0.01
    assert await lookup.partitions("made") == 3  # (asked again once the time is up)
    await etcd.delete(keys.topic_meta("made"))
    assert await lookup.partitions("made") == 0  # (that it existed was not kept)
    assert lookup.gets == 3
    await etcd.put(keys.topic_meta("made"), meta.to_json())  # (made again, its absence
    assert await lookup.partitions("made", known=True) == 3  # remembered: the view has it)
    assert lookup.gets == 4
