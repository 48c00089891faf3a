"""A wire-level V2 client that negotiates TLS, snappy and deflate the way pynsq does,
using Python's ssl, python-snappy and zlib (not nsqpy's codecs) for the other end."""

from __future__ import annotations

import asyncio
import json
import ssl
import struct
import zlib
from typing import Any

import snappy

from nsqpy.testing import identify
from nsqpy.testing.certs import CertFiles


def client_context(certs: CertFiles, *, with_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=certs.ca)
    if with_cert:
        ctx.load_cert_chain(certs.client_cert, certs.client_key)
    return ctx


OPEN: list[SecureWire] = []


class SecureWire:
    """asyncio streams + one frame at a time, so an upgrade can take over buffered bytes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buf = bytearray()  # decoded bytes not yet framed
        self.raw_seen = bytearray()  # every byte received from the socket layer (after TLS)
        self.inflate: Any = None
        self.deflate: Any = None
        self.settings: dict[str, Any] = {}

    @classmethod
    async def connect(cls, port: int) -> SecureWire:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        wire = cls(reader, writer)
        OPEN.append(wire)
        writer.write(b"  V2")
        return wire

    async def send(self, data: bytes) -> None:
        if self.deflate is not None:
            data = self.deflate(data)
        self.writer.write(data)
        await self.writer.drain()

    def _pop_frame(self) -> tuple[int, bytes] | None:
        if len(self.buf) < 8:
            return None
        size, ftype = struct.unpack_from(">ii", self.buf)
        if len(self.buf) < 4 + size:
            return None
        data = bytes(self.buf[8 : 4 + size])
        del self.buf[: 4 + size]
        return ftype, data

    async def read_frame(self, timeout: float = 5.0) -> tuple[int, bytes]:
        while True:
            frame = self._pop_frame()
            if frame is not None:
                if frame == (0, b"_heartbeat_"):
                    await self.send(b"NOP\n")
                    continue
                return frame
            raw = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not raw:
                raise ConnectionError("closed by server")
            self.raw_seen += raw
            self.buf += self.inflate(raw) if self.inflate is not None else raw

    def _compress_from_here(self, kind: str, level: int) -> None:
        """Switch to compression; bytes already buffered past the last frame are compressed."""
        rest = bytes(self.buf)
        self.buf.clear()
        if kind == "snappy":
            dec = snappy.StreamDecompressor()
            self.inflate = dec.decompress
            self.deflate = lambda data: snappy.StreamCompressor().compress(data)
        else:
            z_in = zlib.decompressobj(-15)
            z_out = zlib.compressobj(level, zlib.DEFLATED, -15)
            self.inflate = z_in.decompress
            self.deflate = lambda data: z_out.compress(data) + z_out.flush(zlib.Z_SYNC_FLUSH)
        if rest:
            self.buf += self.inflate(rest)

    async def negotiate(
        self, fields: dict[str, Any], tls: ssl.SSLContext | None = None
    ) -> dict[str, Any]:
        """IDENTIFY with feature negotiation and every upgrade the server agreed to."""
        await self.send(identify({"feature_negotiation": True, **fields}))
        ftype, data = await self.read_frame()
        assert ftype == 0, data
        self.settings = json.loads(data)
        if self.settings.get("tls_v1"):
            assert tls is not None
            assert not self.buf, "nothing may follow the IDENTIFY reply before the handshake"
            await self.writer.start_tls(tls, server_hostname="127.0.0.1")
            assert await self.read_frame() == (0, b"OK")
        for kind in ("snappy", "deflate"):
            if self.settings.get(kind):
                self._compress_from_here(kind, int(self.settings.get("deflate_level", 6)))
                assert await self.read_frame() == (0, b"OK")
        return self.settings

    async def expect_closed(self, timeout: float = 5.0) -> bytes:
        """Read until EOF; returns the raw bytes received meanwhile."""
        got = bytearray()
        try:
            while True:
                raw = await asyncio.wait_for(self.reader.read(65536), timeout)
                if not raw:
                    return bytes(got)
                got += raw
        except (ConnectionResetError, ssl.SSLError):
            return bytes(got)

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError, ssl.SSLError):
            pass
