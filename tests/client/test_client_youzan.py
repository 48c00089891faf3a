"""The client's forms of youzan's extensions against nsqpy's real nsqd (in-process, loopback):
partitioned, ordered and started subscriptions, JSON headers and dispatch tags, trace ids
in binary message IDs, and lookupd's per-partition answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nsqpy.client import Consumer, IdentifyOptions, Message, Producer
from nsqpy.errors import ConfigError
from nsqpy.nsqd.server import NsqdServer
from nsqpy.protocol.message import BINARY_ID
from nsqpy.testing import eventually, nsqd_options

from .client_fakes import FakeLookupd, peer

EXTENDED = IdentifyOptions(extend_support=True)


@pytest.fixture
async def nsqd(tmp_path: Path) -> AsyncIterator[NsqdServer]:
    server = NsqdServer(nsqd_options(tmp_path))
    await server.start()
    yield server
    await server.stop()


def addr(server: NsqdServer) -> str:
    return f"127.0.0.1:{server.tcp_port}"


async def http(server: NsqdServer, method: str, path: str) -> Any:
    url = f"http://127.0.0.1:{server.http_port}{path}"
    async with aiohttp.ClientSession() as session, session.request(method, url) as resp:
        assert resp.status == 200, await resp.text()
        body = await resp.read()
        return json.loads(body) if body else None


async def channel_stats(server: NsqdServer, topic: str, channel: str) -> dict[str, Any]:
    doc = await http(server, "GET", f"/stats?format=json&topic={topic}&channel={channel}")
    (found,) = doc["topics"][0]["channels"]
    assert isinstance(found, dict)
    return found


async def create(server: NsqdServer, topic: str, partitions: int) -> None:
    await http(server, "POST", f"/topic/create?topic={topic}&partition_num={partitions}")
    await http(server, "POST", f"/channel/create?topic={topic}&channel=c")


def collector() -> tuple[list[Message], Any]:
    got: list[Message] = []

    async def handler(msg: Message) -> None:
        got.append(msg)

    return got, handler


async def test_an_ordered_subscription_gets_one_partition_in_order_with_offsets(
    nsqd: NsqdServer,
) -> None:
    await create(nsqd, "o", 2)
    async with Producer(addr(nsqd)) as producer:
        for i in range(30):
            await producer.pub("o", b"%d" % i, partition=i % 2)
    got, handler = collector()
    async with Consumer(
        "o", "c", handler, nsqd_tcp_addresses=[addr(nsqd)], partition=1, ordered=True,
        max_in_flight=10,
    ):  # fmt: skip
        await eventually(lambda: len(got) >= 15)
        await asyncio.sleep(0.2)
    assert [m.body for m in got] == [b"%d" % i for i in range(1, 30, 2)]
    assert [m.queue_offset for m in got] == list(range(15))
    stats = await channel_stats(nsqd, "o", "c")
    assert stats["ordered"] is True
    assert [p["depth"] for p in stats["partitions"]] == [15, 0]  # partition 0 untouched


async def test_a_started_subscription_begins_at_its_position(nsqd: NsqdServer) -> None:
    await create(nsqd, "s", 1)
    async with Producer(addr(nsqd)) as producer:
        await producer.mpub("s", [b"%d" % i for i in range(10)])
    got, handler = collector()
    async with Consumer(
        "s", "c", handler, nsqd_tcp_addresses=[addr(nsqd)], partition=0,
        start="virtual_queue:6", max_in_flight=10,
    ):  # fmt: skip
        await eventually(lambda: len(got) >= 4)
        await asyncio.sleep(0.2)
    assert [(m.body, m.queue_offset) for m in got] == [(b"%d" % i, i) for i in range(6, 10)]
    assert (await channel_stats(nsqd, "s", "c"))["depth"] == 0


async def test_tags_headers_and_trace_ids(nsqd: NsqdServer) -> None:
    await create(nsqd, "y", 1)
    blue, on_blue = collector()
    plain, on_plain = collector()
    trace_id = 0x0A20_0A20_0A20_0A20  # newlines and spaces in the binary ID's bytes
    tagged = IdentifyOptions(extend_support=True, desired_tag="blue")
    async with (
        Consumer("y", "c", on_blue, nsqd_tcp_addresses=[addr(nsqd)], identify=tagged) as a,
        Consumer("y", "c", on_plain, nsqd_tcp_addresses=[addr(nsqd)], identify=EXTENDED) as b,
        Producer(addr(nsqd)) as producer,
    ):
        assert a.stats.connections == b.stats.connections == 1
        for i in range(3):
            assert await producer.pub_ext("y", b"b%d" % i, {"n": str(i)}, tag="blue") is None
            await producer.pub_ext("y", b"p%d" % i, {"n": str(i)})
        sent = await producer.pub_trace("y", b"traced", trace_id)
        assert (sent.trace_id, sent.offset, sent.size) == (trace_id, 6, 1)
        await eventually(lambda: len(blue) >= 3 and len(plain) >= 4)
        await eventually(lambda: b.stats.finished >= 4)
        stats = await channel_stats(nsqd, "y", "c")
        assert (stats["in_flight_count"], stats["depth"]) == (0, 0)
    assert [(m.body, m.headers["n"]) for m in blue] == [(b"b%d" % i, str(i)) for i in range(3)]
    assert all(m.headers["##client_dispatch_tag"] == "blue" for m in blue)
    assert [m.body for m in plain] == [b"p0", b"p1", b"p2", b"traced"]
    traced = plain[-1]
    assert traced.trace_id == trace_id and BINARY_ID.unpack(traced.id) == (sent.id, trace_id)
    assert b"\n" in traced.id  # and still FIN'd (in_flight_count 0 above)


async def test_lookupd_partition_map_picks_the_partitions_node(
    tmp_path: Path, fake_lookupd: FakeLookupd
) -> None:
    servers = []
    for name in ("a", "b"):
        server = NsqdServer(nsqd_options(tmp_path / name))
        await server.start()
        servers.append(server)
    try:
        for server, name in zip(servers, ("a", "b"), strict=True):
            await create(server, "lk", 2)
            async with Producer(addr(server)) as producer:
                await producer.pub("lk", name.encode() + b"0", partition=0)
                await producer.pub("lk", name.encode() + b"1", partition=1)
        fake_lookupd.producers["lk"] = [peer(s.tcp_port) for s in servers]
        fake_lookupd.partitions["lk"] = {"0": peer(servers[0].tcp_port),
                                         "1": peer(servers[1].tcp_port)}  # fmt: skip
        got, handler = collector()
        async with Consumer(
            "lk", "c", handler, lookupd_http_addresses=[fake_lookupd.address], partition=1
        ) as consumer:
            await eventually(lambda: len(got) >= 1)
            await asyncio.sleep(0.2)
            assert [c.key for c in consumer.connections] == [addr(servers[1])]
        assert [m.body for m in got] == [b"b1"]
    finally:
        for server in servers:
            await server.stop()


def test_forms_the_server_cannot_take_are_refused_up_front() -> None:
    async def handler(msg: Message) -> None: ...

    with pytest.raises(ConfigError, match="needs a partition"):
        Consumer("t", "c", handler, nsqd_tcp_addresses=["127.0.0.1:1"], start="special:-1")
    with pytest.raises(ConfigError, match="desired_tag"):
        IdentifyOptions(desired_tag="x" * 101)
