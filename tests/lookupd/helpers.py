"""Helpers for the nsqlookupd tests: options on loopback, a V1 wire client, IDENTIFY bodies."""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

import aiohttp
from yarl import URL

from nsqpy.lookupd.app import NsqLookupdOptions
from nsqpy.protocol.lookupd import ResponseDecoder

_OPEN: list[LookupWire] = []


class Reply:
    """An HTTP reply: status, raw body, headers."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.status = status
        self.body = body
        self.headers = headers

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Api:
    """HTTP calls to one lookupd with the target sent exactly as written (no re-quoting)."""

    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        self.session = session
        self.base = f"http://127.0.0.1:{port}"

    async def call(self, method: str, target: str, body: bytes = b"") -> Reply:
        url = URL(self.base + target, encoded=True)
        async with self.session.request(method, url, data=body) as resp:
            return Reply(resp.status, await resp.read(), dict(resp.headers))


def make_opts(**overrides: object) -> NsqLookupdOptions:
    opts = NsqLookupdOptions(
        tcp_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        broadcast_address="127.0.0.1",
    )
    for key, value in overrides.items():
        setattr(opts, key, value)
    return opts


def peer_info(**overrides: object) -> dict[str, object]:
    """What nsqd sends in IDENTIFY."""
    info: dict[str, object] = {
        "version": "1.3.0",
        "tcp_port": 4150,
        "http_port": 4151,
        "hostname": "nsqd-host",
        "broadcast_address": "10.0.0.1",
    }
    info.update(overrides)
    return info


def identify_raw(body: bytes) -> bytes:
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


class LookupWire:
    """An asyncio V1 client for wire-transcript tests."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = ResponseDecoder()
        self.replies: list[bytes] = []

    @classmethod
    async def connect(cls, port: int, *, magic: bool = True) -> LookupWire:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        wire = cls(reader, writer)
        _OPEN.append(wire)
        if magic:
            await wire.send(b"  V1")
        return wire

    @classmethod
    async def identified(cls, port: int, **info: object) -> LookupWire:
        wire = await cls.connect(port)
        await wire.send(identify_raw(json.dumps(peer_info(**info)).encode()))
        reply = await wire.read()
        assert reply.startswith(b"{"), reply
        return wire

    @property
    def local_address(self) -> str:
        host, port = self.writer.get_extra_info("sockname")[:2]
        return f"{host}:{port}"

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read(self, timeout: float = 5.0) -> bytes:
        while not self.replies:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                raise ConnectionError("connection closed by lookupd")
            self.replies.extend(self.decoder.feed(data))
        return self.replies.pop(0)

    async def request(self, data: bytes) -> bytes:
        await self.send(data)
        return await self.read()

    async def expect_closed(self, timeout: float = 5.0) -> None:
        """Every remaining reply is read into ``replies``, then EOF must follow."""
        while True:
            try:
                data = await asyncio.wait_for(self.reader.read(65536), timeout)
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                await self.close()
                return
            self.replies.extend(self.decoder.feed(data))

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass

    @classmethod
    async def close_all(cls) -> None:
        while _OPEN:
            await _OPEN.pop().close()
