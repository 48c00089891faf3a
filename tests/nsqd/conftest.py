from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import AsyncWire, FakeClock
from nsqpy.testing import nsqd_options as make_opts


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def nsqd(tmp_path: Path, clock: FakeClock) -> AsyncIterator[NsqdServer]:
    server = NsqdServer(make_opts(tmp_path), clock=clock)
    await server.start()
    yield server
    await server.stop()


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


async def subscriber(port: int, topic: str, channel: str, rdy: int = 10) -> AsyncWire:
    wire = await AsyncWire.connect(port)
    await wire.send(f"SUB {topic} {channel}\n".encode())
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(f"RDY {rdy}\n".encode())
    return wire


async def publisher(port: int) -> AsyncWire:
    return await AsyncWire.connect(port)


async def read_message(wire: AsyncWire) -> tuple[int, int, bytes, bytes]:
    """(timestamp, attempts, id, body) of the next message frame."""
    ftype, data = await wire.read_frame()
    assert ftype == 2, (ftype, data)
    ts, attempts = struct.unpack_from(">qH", data)
    return ts, attempts, data[10:26], data[26:]
