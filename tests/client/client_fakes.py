"""A scripted nsqd for the client's unit tests, and a tiny lookupd ``/lookup`` server.

``FakeNsqd`` speaks just enough protocol V2 on 127.0.0.1: it checks the magic, answers
IDENTIFY with a JSON reply, SUB/PUB/MPUB/DPUB with OK (or a scripted error), CLS with
CLOSE_WAIT, and records every command a client sends so tests read like transcripts.
Messages are pushed by the test with ``send_message``. It parses the client's bytes with
its own small reader (not nsqpy.protocol) so the client codec is checked independently.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from nsqpy.testing import serve_http

BODY_COMMANDS = {b"IDENTIFY", b"PUB", b"MPUB", b"DPUB", b"AUTH"}
# errors after which nsqd keeps the connection (NSQ's three, and Youzan's)
NON_FATAL = {
    b"E_FIN_FAILED", b"E_REQ_FAILED", b"E_TOUCH_FAILED",
    b"E_FAILED_ON_NOT_LEADER", b"E_FAILED_ON_NOT_WRITABLE", b"E_INVALID_JSON_HEADER",
}  # fmt: skip


def frame(frame_type: int, data: bytes) -> bytes:
    return struct.pack(">ii", len(data) + 4, frame_type) + data


def message_frame(msg_id: bytes, body: bytes, attempts: int = 1, ts: int = 0) -> bytes:
    return frame(2, struct.pack(">qH", ts or time.time_ns(), attempts) + msg_id + body)


@dataclass
class Command:
    verb: str
    params: list[str]
    body: bytes | None = None
    at: float = field(default_factory=time.monotonic)


class FakeConn:
    """One client connection to the fake nsqd."""

    def __init__(
        self, server: FakeNsqd, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ):
        self.server = server
        self.reader = reader
        self.writer = writer
        self.commands: list[Command] = []
        self.identify: dict[str, Any] = {}
        self.rdy = 0
        self.rdy_history: list[int] = []
        self.changed = asyncio.Event()
        self.closed = asyncio.Event()

    def send(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    def send_message(self, msg_id: bytes, body: bytes, attempts: int = 1) -> None:
        self.send(message_frame(msg_id, body, attempts))

    def verbs(self, *names: str) -> list[Command]:
        return [c for c in self.commands if c.verb in names]

    async def wait_for(self, predicate: Callable[[], object], timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self.changed.clear()
                if predicate():
                    return
                await self.changed.wait()

    async def run(self) -> None:
        try:
            magic = await self.reader.readexactly(4)
            if magic != b"  V2":
                self.send(frame(1, b"E_BAD_PROTOCOL"))
                return
            while True:
                line = await self.reader.readline()
                if not line:
                    return
                parts = line.rstrip(b"\n").split(b" ")
                body = None
                if parts[0] in BODY_COMMANDS:
                    (size,) = struct.unpack(">i", await self.reader.readexactly(4))
                    body = await self.reader.readexactly(size)
                cmd = Command(parts[0].decode(), [p.decode() for p in parts[1:]], body)
                self.commands.append(cmd)
                if cmd.verb == "RDY":
                    self.rdy = int(cmd.params[0]) if cmd.params else 1
                    self.rdy_history.append(self.rdy)
                self.server.answer(self, cmd)
                self.changed.set()
                self.server.changed.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self.closed.set()
            self.changed.set()
            self.server.changed.set()
            self.writer.close()


class FakeNsqd:
    """A scripted nsqd on 127.0.0.1 (port chosen by the OS)."""

    def __init__(self) -> None:
        self.conns: list[FakeConn] = []
        self.errors: dict[str, list[bytes]] = {}  # verb -> error bodies to answer next
        self.identify_reply: dict[str, Any] = {"max_rdy_count": 2500, "msg_timeout": 60000}
        self.changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> FakeNsqd:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for c in self.conns:
                c.writer.close()
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = FakeConn(self, reader, writer)
        self.conns.append(conn)
        self.changed.set()
        await conn.run()

    def answer(self, conn: FakeConn, cmd: Command) -> None:
        queued = self.errors.get(cmd.verb)
        if queued:
            err = queued.pop(0)
            conn.send(frame(1, err))
            code = err.split(b" ")[0]
            if code not in NON_FATAL:
                conn.writer.close()
            return
        if cmd.verb == "IDENTIFY":
            assert cmd.body is not None
            conn.identify = json.loads(cmd.body)
            conn.send(frame(0, json.dumps(self.identify_reply).encode()))
        elif cmd.verb in ("SUB", "PUB", "MPUB", "DPUB"):
            conn.send(frame(0, b"OK"))
        elif cmd.verb == "CLS":
            conn.send(frame(0, b"CLOSE_WAIT"))

    async def wait_conns(self, n: int, timeout: float = 5.0) -> list[FakeConn]:
        async with asyncio.timeout(timeout):
            while len(self.live()) < n:
                self.changed.clear()
                if len(self.live()) >= n:
                    break
                await self.changed.wait()
        return self.live()

    def live(self) -> list[FakeConn]:
        return [c for c in self.conns if not c.closed.is_set()]


class FakeLookupd:
    """An aiohttp server answering ``/lookup?topic=`` from a dict, counting queries."""

    def __init__(self, producers: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self.producers = producers if producers is not None else {}
        # topic -> youzan's per-partition map, sent when the query has ``metainfo``
        self.partitions: dict[str, dict[str, dict[str, Any]]] = {}
        self.queries: list[str] = []
        self.status = 200
        self._serving = contextlib.AsyncExitStack()
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _lookup(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic", "")
        self.queries.append(topic)
        if self.status != 200:
            return web.json_response({"message": "INTERNAL_ERROR"}, status=self.status)
        if topic not in self.producers:
            return web.json_response({"message": "TOPIC_NOT_FOUND"}, status=404)
        doc: dict[str, Any] = {"channels": [], "producers": self.producers[topic]}
        if "metainfo" in request.query and topic in self.partitions:
            doc["partitions"] = self.partitions[topic]
        return web.json_response(doc)

    async def start(self) -> FakeLookupd:
        app = web.Application()
        app.router.add_get("/lookup", self._lookup)
        self.port = await self._serving.enter_async_context(serve_http(app))
        return self

    async def stop(self) -> None:
        await self._serving.aclose()


def peer(port: int, host: str = "127.0.0.1") -> dict[str, Any]:
    return {
        "remote_address": f"{host}:5555",
        "hostname": "h",
        "broadcast_address": host,
        "tcp_port": port,
        "http_port": 1,
        "version": "1.3.0",
    }
