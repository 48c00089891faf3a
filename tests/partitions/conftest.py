"""Helpers for the partition, ordered-channel and message-extension tests.

In-process nsqd (fake clock) for wire transcripts (the ``nsqd`` and ``clock`` fixtures of
``nsqpy.testing``); the real program is started by the tests that need a process (restarts,
killed consumers, real clients).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from typing import Any

import aiohttp

from nsqpy.nsqd.server import NsqdServer
from nsqpy.protocol.message import Message, decode_message
from nsqpy.testing import AsyncWire, identify


async def http(
    server: NsqdServer,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    url = f"http://127.0.0.1:{server.http_port}{path}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, data=body, headers=headers) as resp,
    ):
        return resp.status, await resp.read()


async def post(server: NsqdServer, path: str, body: bytes = b"") -> tuple[int, bytes]:
    return await http(server, "POST", path, body)


async def stats(server: NsqdServer, topic: str) -> dict[str, Any]:
    status, body = await http(server, "GET", f"/stats?format=json&topic={topic}")
    assert status == 200, body
    doc = json.loads(body)
    found = doc["topics"][0]
    assert isinstance(found, dict)
    return found


def err(code: str) -> bytes:
    return json.dumps({"message": code}, separators=(",", ":")).encode()


async def create_topic(server: NsqdServer, topic: str, partitions: int, extra: str = "") -> None:
    assert await post(server, f"/topic/create?topic={topic}&partition_num={partitions}{extra}") == (
        200,
        b"",
    )


async def connect(port: int, fields: Mapping[str, object] | None = None) -> AsyncWire:
    wire = await AsyncWire.connect(port)
    if fields is not None:
        await wire.send(identify({"feature_negotiation": True, **fields}))
        ftype, _ = await wire.read_frame()
        assert ftype == 0
    return wire


async def subscribe(
    port: int, line: str, rdy: int = 10, fields: Mapping[str, object] | None = None
) -> AsyncWire:
    """A consumer: optional IDENTIFY, then ``line`` (a SUB or SUB_ORDERED), then RDY."""
    wire = await connect(port, fields)
    await wire.send(line.encode() + b"\n")
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(f"RDY {rdy}\n".encode())
    if line.startswith("SUB_ORDERED"):
        DETAILED.add(wire)
    return wire


DETAILED: weakref.WeakSet[AsyncWire] = weakref.WeakSet()  # SUB_ORDERED: youzan's detail


async def message(wire: AsyncWire, *, extended: bool = False, timeout: float = 5.0) -> Message:
    """The next frame, a message (of a SUB_ORDERED subscriber: its detail checked, taken off)."""
    ftype, data = await wire.read_frame(timeout)
    assert ftype == 2, (ftype, data)
    msg = decode_message(data, extended=extended, detail=wire in DETAILED)
    if wire in DETAILED:
        assert (msg.queue_offset, msg.raw_size) == (offset_of(msg.id), 1)
    return msg


def partition_of(msg_id: bytes) -> int:
    return int(msg_id, 16) >> 54


def offset_of(msg_id: bytes) -> int:
    return int(msg_id, 16) & ((1 << 54) - 1)
