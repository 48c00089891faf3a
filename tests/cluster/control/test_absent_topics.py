"""Commands naming a partition of a topic this node's view lacks ask etcd about it, at a
bounded cost (``nsqpy.cluster.absent``): an in-process nsqd of a cluster on the session's
real etcd, its etcd client's reads counted.

- one topic etcd lacks, named by hundreds of commands at once, is asked about once;
- topics under ever new names are asked about at most ``GETS_PER_S`` times a second; the
  rest are answered ``E_TOPIC_NOT_EXIST`` without asking, as every one of them is.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from nsqpy.cluster import absent
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
    monkeypatch.setattr(member._lookup, "clock", lambda: 1000.0)  # (all in one second)
    asked = count_gets(server, monkeypatch)
    answers = await publish_to(server.tcp_port, [f"nowhere{i}" for i in range(100)])
    assert set(answers) == {(1, b"E_TOPIC_NOT_EXIST")}
    assert len([key for key in asked if "nowhere" in key]) == 10
