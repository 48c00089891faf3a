"""Protocol V2 clients for wire-transcript tests: ``WireClient`` (blocking) and ``AsyncWire``
(asyncio), the commands they send (``identify``, ``pub``, ``mpub``, ``dpub``), the usual
openings (``publisher``, ``subscriber``, ``publish``), what they read: ``read_message``
(a ``WireMessage``), ``frame_within`` (None when nothing more comes), and ``consume`` (a
channel's next messages, FIN'd, on a blocking connection).

The encoders here write what they are given, bad names and values included, since wire
tests send bad input on purpose; a client uses the checked ``nsqpy.protocol.client_codec``.
Every connection opened here is remembered and closed by ``close_test_connections`` and
``AsyncWire.close_all`` (the pytest plugin calls both after each test).
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from nsqpy.protocol.frames import FrameDecoder

if TYPE_CHECKING:  # asyncio is imported where used: the blocking WireClient does without it
    import asyncio


def identify(fields: Mapping[str, object]) -> bytes:
    """``IDENTIFY\\n`` [size] [JSON of ``fields``]."""
    body = json.dumps(fields).encode()
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


def pub(topic: str, body: bytes) -> bytes:
    """``PUB <topic>\\n`` [size] [body]."""
    return f"PUB {topic}\n".encode() + struct.pack(">i", len(body)) + body


def mpub(topic: str, bodies: Sequence[bytes], partition: int | None = None) -> bytes:
    """``MPUB <topic>[ <partition>]\\n`` [size] [count] then [size][body] per message."""
    payload = struct.pack(">i", len(bodies)) + b"".join(
        struct.pack(">i", len(b)) + b for b in bodies
    )
    to = topic if partition is None else f"{topic} {partition}"
    return f"MPUB {to}\n".encode() + struct.pack(">i", len(payload)) + payload


def dpub(topic: str, ms: int, body: bytes) -> bytes:
    """``DPUB <topic> <ms>\\n`` [size] [body]."""
    return f"DPUB {topic} {ms}\n".encode() + struct.pack(">i", len(body)) + body


_OPEN_SOCKETS: list[socket.socket] = []


def close_test_connections() -> None:
    """Close every WireClient socket still open (test teardown)."""
    while _OPEN_SOCKETS:
        _OPEN_SOCKETS.pop().close()


class WireClient:
    """A blocking protocol V2 client for wire-transcript tests."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        _OPEN_SOCKETS.append(self.sock)
        self.decoder = FrameDecoder()
        self.frames: list[tuple[int, bytes]] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> tuple[int, bytes]:
        """The next frame, skipping heartbeats (answered with NOP)."""
        while True:
            while not self.frames:
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("connection closed by server")
                self.frames.extend(self.decoder.feed(data))
            frame = self.frames.pop(0)
            if frame == (0, b"_heartbeat_"):
                self.send(b"NOP\n")
                continue
            return frame

    def frame_within(self, timeout: float) -> tuple[int, bytes] | None:
        """The next frame if one comes within ``timeout`` seconds, else None (to check that
        nothing more is sent)."""
        before = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            return self.read_frame()
        except TimeoutError:
            return None
        finally:
            self.sock.settimeout(before)

    def closed(self, timeout: float = 5.0) -> bool:
        """True when the server closes the connection (after any pending frames)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.frames.extend(self.decoder.feed(data))
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def consume(
    port: int, topic: str, channel: str, count: int, *, rdy: int = 200, timeout: float = 15.0
) -> list[bytes]:
    """On a new blocking connection: SUB, RDY ``rdy``, then FIN ``count`` messages as they
    come (each read waits at most ``timeout`` seconds); their bodies, in order. It ends
    with CLS and reads up to nsqd's CLOSE_WAIT before closing, so every FIN it sent has
    been taken when it returns (closing a socket with messages still unread in it sends a
    reset, and nsqd may lose the last FINs with its receive buffer)."""
    consumer = WireClient(port, timeout=timeout)
    consumer.send(b"  V2" + f"SUB {topic} {channel}\n".encode())
    assert consumer.read_frame() == (0, b"OK")
    consumer.send(f"RDY {rdy}\n".encode())
    bodies: list[bytes] = []
    for _ in range(count):
        ftype, data = consumer.read_frame()
        assert ftype == 2, (ftype, data)
        bodies.append(data[26:])
        consumer.send(b"FIN " + data[10:26] + b"\n")
    consumer.send(b"CLS\n")
    while consumer.read_frame() != (0, b"CLOSE_WAIT"):
        pass  # (messages sent meanwhile stay in flight: nsqd requeues them at the close)
    consumer.close()
    return bodies


_OPEN_WIRES: list[AsyncWire] = []


class AsyncWire:
    """An asyncio protocol V2 client for in-process wire-transcript tests."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.frames: list[tuple[int, bytes]] = []
        self.answer_heartbeats = True

    @classmethod
    async def connect(cls, port: int, *, magic: bool = True) -> AsyncWire:
        import asyncio

        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        wire = cls(reader, writer)
        _OPEN_WIRES.append(wire)
        if magic:
            await wire.send(b"  V2")
        return wire

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_frame(self, timeout: float = 5.0) -> tuple[int, bytes]:
        """The next frame, skipping heartbeats (answered with NOP when enabled)."""
        import asyncio

        while True:
            while not self.frames:
                async with asyncio.timeout(timeout):
                    data = await self.reader.read(65536)
                if not data:
                    raise ConnectionError("connection closed by server")
                self.frames.extend(self.decoder.feed(data))
            frame = self.frames.pop(0)
            if frame == (0, b"_heartbeat_") and self.answer_heartbeats:
                await self.send(b"NOP\n")
                continue
            return frame

    async def frame_within(self, timeout: float) -> tuple[int, bytes] | None:
        """The next frame if one comes within ``timeout`` seconds, else None (to check that
        nothing more is sent)."""
        try:
            return await self.read_frame(timeout)
        except TimeoutError:
            return None

    async def expect_closed(self, timeout: float = 5.0) -> None:
        import asyncio

        while True:
            async with asyncio.timeout(timeout):
                data = await self.reader.read(65536)
            if not data:
                await self.close()
                return
            self.frames.extend(self.decoder.feed(data))

    @classmethod
    async def close_all(cls) -> None:
        """Close every wire opened by ``connect`` (for test teardown)."""
        while _OPEN_WIRES:
            await _OPEN_WIRES.pop().close()

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


class WireMessage(NamedTuple):
    """A message frame as a test reads it: unpack it, or read its fields."""

    timestamp: int  # ns
    attempts: int
    id: bytes
    body: bytes


async def read_message(wire: AsyncWire, timeout: float = 5.0) -> WireMessage:
    """The next frame, which must be a message (type 2)."""
    ftype, data = await wire.read_frame(timeout)
    assert ftype == 2, (ftype, data)
    timestamp, attempts = struct.unpack_from(">qH", data)
    return WireMessage(timestamp, attempts, data[10:26], data[26:])


async def publisher(port: int) -> AsyncWire:
    """A connection to publish on (magic sent, nothing else)."""
    return await AsyncWire.connect(port)


async def subscriber(
    port: int, topic: str, channel: str, rdy: int = 10, msg_timeout_ms: int = 0
) -> AsyncWire:
    """A consumer: IDENTIFY with ``msg_timeout`` when given, SUB (answered OK), then RDY."""
    wire = await AsyncWire.connect(port)
    if msg_timeout_ms:
        await wire.send(identify({"msg_timeout": msg_timeout_ms}))
        assert await wire.read_frame() == (0, b"OK")
    await wire.send(f"SUB {topic} {channel}\n".encode())
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(f"RDY {rdy}\n".encode())
    return wire


async def publish(port: int, *commands: bytes) -> None:
    """Send publish commands on a fresh connection; each must answer OK."""
    wire = await AsyncWire.connect(port)
    for command in commands:
        await wire.send(command)
        assert await wire.read_frame() == (0, b"OK")
    await wire.close()
