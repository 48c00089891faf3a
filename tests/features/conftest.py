"""Fixtures and wire helpers for the features beyond NSQ (README "Beyond NSQ").

In-process nsqd on 127.0.0.1:0 with a fake clock (time moves only when a test says), an
aiohttp session for its HTTP API, and protocol V2 helpers that read like wire transcripts.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import AsyncWire, FakeClock
from nsqpy.testing import nsqd_options as make_opts

MSG, ERR = 2, 1
DAY_MS = 86_400_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


class Daemons:
    """In-process nsqd servers on the test's data path; ``restart`` stops and starts again."""

    def __init__(self, tmp_path: Path, clock: FakeClock) -> None:
        self.tmp_path = tmp_path
        self.clock = clock
        self.running: list[NsqdServer] = []

    async def start(self, **overrides: object) -> NsqdServer:
        server = NsqdServer(make_opts(self.tmp_path, **overrides), clock=self.clock)
        await server.start()
        self.running.append(server)
        return server

    async def stop(self, server: NsqdServer) -> None:
        self.running.remove(server)
        await AsyncWire.close_all()
        await server.stop()

    async def restart(self, server: NsqdServer, **overrides: object) -> NsqdServer:
        await self.stop(server)
        return await self.start(**overrides)


@pytest.fixture
async def daemons(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Daemons]:
    d = Daemons(tmp_path, clock)
    yield d
    await AsyncWire.close_all()
    for server in list(d.running):
        await server.stop()


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


def identify(fields: dict[str, object]) -> bytes:
    body = json.dumps(fields).encode()
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


def pub(topic: str, body: bytes) -> bytes:
    return f"PUB {topic}\n".encode() + struct.pack(">i", len(body)) + body


def mpub(topic: str, bodies: list[bytes]) -> bytes:
    payload = struct.pack(">i", len(bodies)) + b"".join(
        struct.pack(">i", len(b)) + b for b in bodies
    )
    return f"MPUB {topic}\n".encode() + struct.pack(">i", len(payload)) + payload


def dpub(topic: str, ms: int, body: bytes) -> bytes:
    return f"DPUB {topic} {ms}\n".encode() + struct.pack(">i", len(body)) + body


async def publish(port: int, *commands: bytes) -> None:
    """Send publish commands on a fresh connection; each must answer OK."""
    wire = await AsyncWire.connect(port)
    for command in commands:
        await wire.send(command)
        assert await wire.read_frame() == (0, b"OK")
    await wire.close()


async def subscriber(
    port: int, topic: str, channel: str, rdy: int = 10, msg_timeout_ms: int = 0
) -> AsyncWire:
    wire = await AsyncWire.connect(port)
    if msg_timeout_ms:
        await wire.send(identify({"msg_timeout": msg_timeout_ms}))
        assert await wire.read_frame() == (0, b"OK")
    await wire.send(f"SUB {topic} {channel}\n".encode())
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(f"RDY {rdy}\n".encode())
    return wire


async def read_message(wire: AsyncWire, timeout: float = 5.0) -> tuple[int, bytes, bytes]:
    """(attempts, id, body) of the next message frame."""
    ftype, data = await wire.read_frame(timeout)
    assert ftype == MSG, (ftype, data)
    (attempts,) = struct.unpack_from(">H", data, 8)
    return attempts, data[10:26], data[26:]


async def read_bodies(wire: AsyncWire, n: int, fin: bool = True) -> list[bytes]:
    out = []
    for _ in range(n):
        _, msg_id, body = await read_message(wire)
        out.append(body)
        if fin:
            await wire.send(b"FIN " + msg_id + b"\n")
    return out


async def eventually(
    predicate: Callable[[], Awaitable[object]], timeout: float = 10.0, what: str = ""
) -> object:
    """Poll an async predicate until it is truthy or the deadline passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"not met within {timeout}s: {what}")
        await asyncio.sleep(0.01)


async def nothing_more(wire: AsyncWire, timeout: float = 0.3) -> bool:
    """True when no frame arrives within ``timeout`` (the server sent nothing more)."""
    try:
        frame = await wire.read_frame(timeout)
    except TimeoutError:
        return True
    raise AssertionError(f"unexpected frame {frame!r}")
