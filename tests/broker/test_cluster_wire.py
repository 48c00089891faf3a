"""``E_FAILED_ON_NOT_LEADER`` on the wire (in-process nsqd): a non-fatal error frame on
TCP, as youzan's nsqd sends it (the connection stays open), and HTTP 400 with the code as
the message, as youzan's ``/pub`` answers it."""

from __future__ import annotations

import json

import aiohttp

from nsqpy.nsqd.server import NsqdServer
from nsqpy.protocol.extend import encode_mpub_partition, encode_pub_ext, encode_pub_partition
from nsqpy.testing import AsyncWire, dpub, pub

from .conftest import as_sole_replica

NOT_LEADER = json.dumps({"message": "E_FAILED_ON_NOT_LEADER"}, separators=(",", ":")).encode()


def hold(server: NsqdServer, roles: dict[int, str]) -> None:
    as_sole_replica(server.broker)
    for number, role in roles.items():
        server.broker.hold_partition("t", 4, number, role=role, leader_epoch=1)


async def post(server: NsqdServer, path: str, body: bytes) -> tuple[int, bytes]:
    url = f"http://127.0.0.1:{server.http_port}{path}"
    async with aiohttp.ClientSession() as session, session.post(url, data=body) as resp:
        return resp.status, await resp.read()


async def test_tcp_writes_to_a_partition_not_led_get_a_non_fatal_error(nsqd: NsqdServer) -> None:
    hold(nsqd, {1: "leader", 3: "follower"})
    wire = await AsyncWire.connect(nsqd.tcp_port)
    refused = [
        encode_pub_partition("t", 3, b"followed"),
        encode_pub_partition("t", 0, b"not held"),
        encode_mpub_partition("t", 3, [b"a", b"b"]),
        encode_pub_ext("t", {"k": "v"}, b"ext", partition=3),
    ]
    for command in refused:
        await wire.send(command)
        ftype, data = await wire.read_frame()
        assert ftype == 1 and data.startswith(b"E_FAILED_ON_NOT_LEADER "), data
    await wire.send(encode_pub_partition("t", 1, b"led"))  # the connection is still open
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(pub("t", b"round robin"))
    assert await wire.read_frame() == (0, b"OK")
    nsqd.broker.set_role("t", 1, "follower", 1)
    await wire.send(dpub("t", 1000, b"none led"))
    ftype, data = await wire.read_frame()
    assert ftype == 1 and data.startswith(b"E_FAILED_ON_NOT_LEADER")
    assert [p.log.high_watermark for p in nsqd.broker.topics["t"].partitions] == [2, 0]


async def test_http_writes_to_a_partition_not_led_get_400(nsqd: NsqdServer) -> None:
    hold(nsqd, {1: "leader", 3: "follower"})
    for path in (
        "/pub?topic=t&partition=3",
        "/pub?topic=t&partition=0",
        "/mpub?topic=t&partition=3",
        '/pub_ext?topic=t&partition=3&ext={"k":"v"}',
    ):
        assert await post(nsqd, path, b"m") == (400, NOT_LEADER), path
    assert await post(nsqd, "/pub?topic=t", b"round robin") == (200, b"OK")
    nsqd.broker.set_role("t", 1, "follower", 1)
    assert await post(nsqd, "/pub?topic=t", b"none led") == (400, NOT_LEADER)
    assert [p.log.high_watermark for p in nsqd.broker.topics["t"].partitions] == [1, 0]
