"""nsqd's side of nsqlookupd, in-process on loopback: PING under load, registrations made while
re-registering, the hostname sent in IDENTIFY, and channels pre-created from lookupd.

Real ``NsqdServer`` and ``NsqLookupd`` objects on 127.0.0.1:0, talked to over HTTP as users do.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nsqpy.lookupd.app import NsqLookupd, NsqLookupdOptions
from nsqpy.nsqd.lookup import LookupClient, LookupPeer
from nsqpy.nsqd.server import NsqdServer
from nsqpy.options import NsqdOptions
from nsqpy.protocol.lookupd import encode_register, encode_unregister
from nsqpy.testing import eventually


def nsqd_opts(path: Path, *lookupds: NsqLookupd) -> NsqdOptions:
    return NsqdOptions(
        tcp_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        data_path=str(path),
        broadcast_address="127.0.0.1",
        queue_scan_interval_ms=20,
        lookupd_tcp_addresses=[f"127.0.0.1:{d.tcp_port}" for d in lookupds],
    )


async def start_lookupd(inactive_producer_timeout_ms: int = 300_000) -> NsqLookupd:
    daemon = NsqLookupd(
        NsqLookupdOptions(
            tcp_address="127.0.0.1:0",
            http_address="127.0.0.1:0",
            broadcast_address="127.0.0.1",
            inactive_producer_timeout_ms=inactive_producer_timeout_ms,
        )
    )
    await daemon.start()
    return daemon


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def get_json(http: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with http.get(url) as resp:
        return resp.status, await resp.json(content_type=None)


async def lookup_producers(
    http: aiohttp.ClientSession, lookupd: NsqLookupd, topic: str
) -> list[Any]:
    status, doc = await get_json(http, f"http://127.0.0.1:{lookupd.http_port}/lookup?topic={topic}")
    return list(doc["producers"]) if status == 200 else []


async def test_a_busy_nsqd_is_pinged_on_its_own_timer(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """Channel churn faster than the PING interval must not starve PING: lookupd would hide
    the node after --inactive-producer-timeout (1 s here)."""
    lookupd = await start_lookupd(inactive_producer_timeout_ms=1000)
    nsqd = NsqdServer(nsqd_opts(tmp_path))
    await nsqd.start()
    try:
        nsqd.lookup = LookupClient(nsqd, ping_interval=0.2)
        nsqd.opts.lookupd_tcp_addresses = [f"127.0.0.1:{lookupd.tcp_port}"]
        nsqd.lookupd_addresses_changed()
        topic = nsqd.broker.topic("busy")
        await eventually(lambda: lookup_producers(http, lookupd, "busy"))
        loop = asyncio.get_running_loop()
        end = loop.time() + 2.5
        seen_inactive = 0
        i = 0
        while loop.time() < end:  # a command every 40 ms: the queue is never idle for 0.2 s
            nsqd.broker.channel(topic, f"tail{i}#ephemeral")
            nsqd.broker.delete_channel(topic, f"tail{i}#ephemeral")
            i += 1
            await asyncio.sleep(0.04)
            if i % 10 == 0 and not await lookup_producers(http, lookupd, "busy"):
                seen_inactive += 1
        assert seen_inactive == 0
        assert await lookup_producers(http, lookupd, "busy")
    finally:
        await nsqd.stop()
        await lookupd.stop()


async def test_changes_made_while_registering_are_replayed(http: aiohttp.ClientSession) -> None:
    """A topic/channel created (or deleted) while the snapshot is being sent reaches lookupd."""
    lookupd = await start_lookupd()
    loop = asyncio.get_running_loop()
    peer: LookupPeer | None = None

    def registrations(partitions: bool) -> list[bytes]:
        assert peer is not None
        # These land while the REGISTERs below are in flight (the first await of the loop).
        loop.call_soon(peer.send, encode_register("late", "c"))
        loop.call_soon(peer.send, encode_unregister("gone", "old#ephemeral"))
        return [
            encode_register("gone", "old#ephemeral"),
            *(encode_register(f"t{i}") for i in range(20)),
        ]

    def identity() -> dict[str, object]:
        return {"version": "1.3.0", "tcp_port": 1, "http_port": 2, "broadcast_address": "x"}

    peer = LookupPeer(f"127.0.0.1:{lookupd.tcp_port}", identity, registrations)
    peer.start()
    base = f"http://127.0.0.1:{lookupd.http_port}"
    try:
        await asyncio.wait_for(peer.connected.wait(), 10)

        async def replayed() -> bool:
            _, late = await get_json(http, f"{base}/channels?topic=late")
            _, gone = await get_json(http, f"{base}/channels?topic=gone")
            return bool(late["channels"] == ["c"] and gone["channels"] == [])

        await eventually(replayed)
        _, topics = await get_json(http, f"{base}/topics")
        assert {f"t{i}" for i in range(20)} | {"late"} <= set(topics["topics"])
    finally:
        await peer.stop()
        await lookupd.stop()


async def test_identify_sends_the_os_hostname(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    lookupd = await start_lookupd()
    nsqd = NsqdServer(nsqd_opts(tmp_path, lookupd))
    await nsqd.start()
    try:
        url = f"http://127.0.0.1:{lookupd.http_port}/nodes"
        doc = await eventually(lambda: _nodes(http, url))
        (node,) = doc
        assert node["hostname"] == socket.gethostname()
        assert node["broadcast_address"] == "127.0.0.1"
        assert node["tcp_port"] == nsqd.tcp_port and node["http_port"] == nsqd.http_port
    finally:
        await nsqd.stop()
        await lookupd.stop()


async def _nodes(http: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    _, doc = await get_json(http, url)
    return list(doc["producers"])


async def test_new_topic_gets_the_channels_lookupd_knows_but_not_ephemeral_ones(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """nsqd B creating a topic that nsqd A has pre-creates A's durable channels (NSQ's rule)."""
    lookupd = await start_lookupd()
    a = NsqdServer(nsqd_opts(tmp_path / "a", lookupd))
    b = NsqdServer(nsqd_opts(tmp_path / "b", lookupd))
    await a.start()
    await b.start()
    try:
        topic_a = a.broker.topic("orders")
        for name in ("billing", "audit", "tail1#ephemeral"):
            a.broker.channel(topic_a, name)
        base = f"http://127.0.0.1:{lookupd.http_port}"

        async def registered() -> bool:
            _, doc = await get_json(http, f"{base}/channels?topic=orders")
            return set(doc["channels"]) == {"billing", "audit", "tail1#ephemeral"}

        await eventually(registered)
        async with http.post(f"http://127.0.0.1:{b.http_port}/topic/create?topic=orders") as r:
            assert r.status == 200

        async def precreated() -> bool:
            topic_b = b.broker.get_topic("orders")
            return topic_b is not None and set(topic_b.channels) == {"billing", "audit"}

        await eventually(precreated)
        async with http.get(f"http://127.0.0.1:{b.http_port}/stats?format=json") as r:
            stats = await r.json()
        (entry,) = [t for t in stats["topics"] if t["topic_name"] == "orders"]
        assert sorted(c["channel_name"] for c in entry["channels"]) == ["audit", "billing"]
    finally:
        await b.stop()
        await a.stop()
        await lookupd.stop()


async def test_lookup_with_metainfo_lists_the_partitions_a_single_nsqd_holds(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """An nsqpy nsqd tells an nsqpy lookupd (which offers it) how many partitions each
    topic has, at registration and as a topic grows; ``/lookup?…&metainfo=true`` (what
    youzan's clients ask) then lists every partition with its node and the count in
    ``meta``, as youzan's lookupd answers. A plain ``/lookup`` stays NSQ's."""
    lookupd = await start_lookupd()
    nsqd = NsqdServer(nsqd_opts(tmp_path, lookupd))
    await nsqd.start()
    try:
        nsqd.broker.topic("grows", partitions=2)
        base = f"http://127.0.0.1:{lookupd.http_port}/lookup?topic=grows"

        async def partitions() -> tuple[list[str], int]:
            status, doc = await get_json(http, base + "&access=r&metainfo=true")
            if status != 200:
                return [], 0
            return sorted(doc["partitions"]), doc["meta"]["partition_num"]

        await eventually(lambda: partitions_are(partitions, ["0", "1"], 2), 10)
        nsqd.broker.expand_topic("grows", 3)
        await eventually(lambda: partitions_are(partitions, ["0", "1", "2"], 3), 10)
        _, doc = await get_json(http, base + "&access=r&metainfo=true")
        node = doc["partitions"]["2"]
        assert (node["broadcast_address"], node["tcp_port"]) == ("127.0.0.1", nsqd.tcp_port)
        status, plain = await get_json(http, base)
        assert status == 200 and set(plain) == {"channels", "producers"}
    finally:
        await nsqd.stop()
        await lookupd.stop()


async def partitions_are(read: Any, names: list[str], count: int) -> bool:
    return bool(await read() == (names, count))
