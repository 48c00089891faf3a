"""Fixtures and wire helpers for the features beyond NSQ (README "Beyond NSQ").

In-process nsqd on 127.0.0.1:0 with a fake clock (time moves only when a test says) come
from ``nsqpy.testing`` (``nsqd_servers``, ``clock``, the commands, ``publish``,
``subscriber`` and ``read_message``); here are an aiohttp session for nsqd's HTTP API
(``Http``), ``read_bodies`` (several messages, FIN'd) and one traced message taken through
a real nsqd (``finish_traced_message``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import (
    AsyncWire,
    DaemonProcess,
    WireClient,
    eventually,
    http_request,
    read_message,
)

ERR = 1
DAY_MS = 86_400_000


class Http:
    """nsqd's HTTP API: (status, parsed JSON or text) for each call."""

    def __init__(self, session: aiohttp.ClientSession, server: NsqdServer) -> None:
        self.session = session
        self.base = f"http://127.0.0.1:{server.http_port}"

    async def call(self, method: str, path: str, body: bytes = b"") -> tuple[int, Any]:
        async with self.session.request(method, self.base + path, data=body) as resp:
            raw = await resp.read()
        try:
            return resp.status, json.loads(raw) if raw else None
        except ValueError:
            return resp.status, raw.decode()

    async def post(self, path: str, body: bytes = b"") -> tuple[int, Any]:
        return await self.call("POST", path, body)

    async def get(self, path: str) -> tuple[int, Any]:
        return await self.call("GET", path)

    async def channel(self, topic: str, channel: str) -> dict[str, Any]:
        status, doc = await self.get(
            f"/stats?format=json&topic={quote(topic)}&channel={quote(channel)}"
        )
        assert status == 200, doc
        (tdoc,) = doc["topics"]
        (cdoc,) = tdoc["channels"]
        return cdoc  # type: ignore[no-any-return]

    async def settled(self, topic: str, channel: str, depth: int = 0) -> None:
        """Wait until the channel has nothing in flight and ``depth`` messages waiting."""

        async def check() -> bool:
            doc = await self.channel(topic, channel)
            return bool(doc["in_flight_count"] == 0 and doc["depth"] == depth)

        await eventually(check, what=f"{topic}/{channel} settled at depth {depth}")

    async def topic(self, topic: str) -> dict[str, Any]:
        status, doc = await self.get(f"/stats?format=json&topic={quote(topic)}")
        assert status == 200, doc
        (tdoc,) = doc["topics"]
        return tdoc  # type: ignore[no-any-return]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def read_bodies(wire: AsyncWire, n: int, fin: bool = True) -> list[bytes]:
    out = []
    for _ in range(n):
        _, _, msg_id, body = await read_message(wire)
        out.append(body)
        if fin:
            await wire.send(b"FIN " + msg_id + b"\n")
    return out


def finish_traced_message(
    nsqd: DaemonProcess, topic: str, trace_id: int
) -> tuple[WireClient, bytes]:
    """On a real nsqd: create ``topic`` with tracing on, publish one message with
    ``trace_id``, consume it on channel ``c`` and FIN it. The consumer and the message ID."""
    assert http_request("POST", f"{nsqd.http}/topic/create?topic={topic}")[0] == 200
    assert http_request("POST", f"{nsqd.http}/message/trace/enable?topic={topic}")[0] == 200
    pub = f"{nsqd.http}/pub?topic={topic}&trace_id={trace_id}"
    assert http_request("POST", pub, b"m")[0] == 200
    c = WireClient(nsqd.tcp_port)
    c.send(f"  V2SUB {topic} c\nRDY 1\n".encode())
    assert c.read_frame() == (0, b"OK")
    ftype, data = c.read_frame()
    assert ftype == 2
    c.send(b"FIN " + data[10:26] + b"\n")
    return c, data[10:26]
