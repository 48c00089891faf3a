"""The Jepsen harness's clients, each a process of its own: ``python -m nsqpy.jepsen.worker``.

Four kinds, all finding the cluster through nsqlookupd only:

- ``nsqpy-producer``: nsqpy's ``Producer`` over every nsqd lookupd lists (round robin; a
  node that does not lead the partition forwards the publish to the leader). One publish
  at a time: PUB, or MPUB of ``--batch`` values.
- ``plain-producer``: the plain NSQ protocol as any NSQ client speaks it: one connection
  to an nsqd picked at random from lookupd's ``/nodes``, PUB and wait for ``OK``; on an
  error or a timeout the connection is dropped and another node picked.
- ``nsqpy-consumer``: nsqpy's ``Consumer`` through lookupd (it follows a new leader).
- ``plain-consumer``: the plain protocol: every nsqd lookupd's ``/lookup`` gives for the
  topic gets a connection with SUB, RDY and a FIN per message; lookupd is asked again
  every second and a lost connection is made again.

A producer publishes to its ``--topic``; a consumer reads every ``--topic`` given (one
subscription per topic, all on ``--channel``).

Every publish and every message received is written to the worker's history
(``history.HistoryWriter``). Producer ``k`` publishes ``k * 1e9 + n`` for n = 0, 1, ...,
at most ``--rate`` values a second. SIGTERM ends a worker cleanly (its history flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import struct
import sys
import time
import urllib.request
from collections.abc import Awaitable, Sequence
from typing import Any

from nsqpy.jepsen.history import HistoryWriter, value_of

PUBLISH_TIMEOUT = 10.0  # seconds before a publish is given up as indeterminate (info)
LOOKUP_EVERY = 1.0

_FRAME = struct.Struct(">ii")
_MESSAGE_HEAD = 26  # timestamp 8, attempts 2, id 16


def lookupd_get(lookupds: Sequence[str], path: str) -> dict[str, Any] | None:
    """GET ``path`` from the first lookupd (in random order) that answers."""
    for address in random.sample(list(lookupds), len(lookupds)):
        try:
            with urllib.request.urlopen(f"http://{address}{path}", timeout=2.0) as resp:
                doc = json.loads(resp.read())
                if isinstance(doc, dict):
                    return doc
        except (OSError, ValueError):
            continue
    return None


def _addresses(doc: dict[str, Any] | None, key: str) -> list[str]:
    """``broadcast_address:tcp_port`` of every producer lookupd listed under ``key``."""
    entries = (doc or {}).get(key) or []
    return sorted({f"{e['broadcast_address']}:{e['tcp_port']}" for e in entries})


async def find_nodes(lookupds: Sequence[str]) -> list[str]:
    doc = await asyncio.to_thread(lookupd_get, lookupds, "/nodes")
    return _addresses(doc, "producers")


async def find_topic(lookupds: Sequence[str], topic: str) -> list[str]:
    doc = await asyncio.to_thread(lookupd_get, lookupds, f"/lookup?topic={topic}")
    return _addresses(doc, "producers")


class Pacer:
    """At most ``rate`` ticks a second, without catching up after a stall."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.next = time.monotonic()

    async def wait(self) -> None:
        now = time.monotonic()
        self.next = max(self.next + self.interval, now)
        if self.next > now:
            await asyncio.sleep(self.next - now)


def _error_code(exc: BaseException) -> str:
    code = getattr(exc, "code", "") or ""
    return str(code) or type(exc).__name__


# -- producers --------------------------------------------------------------------------


async def nsqpy_producer(
    args: argparse.Namespace, history: HistoryWriter, stop: asyncio.Event
) -> None:
    from nsqpy.client import NoConnectionsError, Producer
    from nsqpy.errors import ProtocolError

    nodes: list[str] = []
    while not nodes and not stop.is_set():
        nodes = await find_nodes(args.lookupd)
        if not nodes:
            await asyncio.sleep(0.5)
    producer = Producer(nodes, connect_timeout=2.0, retry_interval=1.0)
    pacer, n = Pacer(args.rate / args.batch), 0
    try:
        while not stop.is_set():
            await pacer.wait()
            topic = args.topic[0]
            values = [value_of(args.id, n + i) for i in range(args.batch)]
            n += args.batch
            bodies = [str(v).encode() for v in values]
            t0 = history.now()
            try:
                async with asyncio.timeout(PUBLISH_TIMEOUT):
                    if len(bodies) == 1:
                        await producer.pub(topic, bodies[0])
                    else:
                        await producer.mpub(topic, bodies)
            except (ProtocolError, NoConnectionsError) as exc:  # refused, or never sent
                history.pub(values, t0, "fail", _error_code(exc))
            except Exception as exc:  # timeout, connection lost: indeterminate
                history.pub(values, t0, "info", _error_code(exc))
            else:
                history.pub(values, t0, "ok")
    finally:
        await producer.close()


class PlainConnection:
    """One protocol V2 connection spoken by hand, as the plainest NSQ client would."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, address: str, timeout: float = 2.0) -> PlainConnection:
        host, _, port = address.rpartition(":")
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, int(port))
        conn = cls(reader, writer)
        body = json.dumps({"client_id": "jepsen", "feature_negotiation": False}).encode()
        writer.write(b"  V2" + b"IDENTIFY\n" + struct.pack(">I", len(body)) + body)
        async with asyncio.timeout(timeout):
            kind, data = await conn.frame()
        if kind != 0:
            conn.close()
            raise ConnectionError(f"IDENTIFY: {data[:80]!r}")
        return conn

    async def frame(self) -> tuple[int, bytes]:
        """The next frame that is not a heartbeat (heartbeats are answered with NOP)."""
        while True:
            size, kind = _FRAME.unpack(await self.reader.readexactly(8))
            data = await self.reader.readexactly(size - 4)
            if kind == 0 and data == b"_heartbeat_":
                self.writer.write(b"NOP\n")
                continue
            return kind, data

    def close(self) -> None:
        self.writer.close()


async def plain_producer(
    args: argparse.Namespace, history: HistoryWriter, stop: asyncio.Event
) -> None:
    pacer, n = Pacer(args.rate), 0
    conn: PlainConnection | None = None
    try:
        while not stop.is_set():
            if conn is None:
                nodes = await find_nodes(args.lookupd)
                if not nodes:
                    await asyncio.sleep(0.5)
                    continue
                try:
                    conn = await PlainConnection.open(random.choice(nodes))
                except (OSError, TimeoutError, ConnectionError):
                    await asyncio.sleep(0.2)
                    continue
            await pacer.wait()
            value = value_of(args.id, n)
            n += 1
            body = str(value).encode()
            t0 = history.now()
            try:
                conn.writer.write(
                    f"PUB {args.topic[0]}\n".encode() + struct.pack(">I", len(body)) + body
                )
                async with asyncio.timeout(PUBLISH_TIMEOUT):
                    kind, data = await conn.frame()
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                history.pub([value], t0, "info", _error_code(exc))
                conn.close()
                conn = None
                continue
            if kind == 0 and data == b"OK":
                history.pub([value], t0, "ok")
            else:
                history.pub([value], t0, "fail", data.split(b" ", 1)[0].decode(errors="replace"))
                conn.close()  # an error ends the connection in NSQ: pick a node again
                conn = None
    finally:
        if conn is not None:
            conn.close()


# -- consumers --------------------------------------------------------------------------


async def nsqpy_consumer(
    args: argparse.Namespace, history: HistoryWriter, stop: asyncio.Event
) -> None:
    from nsqpy.client import Consumer, Message

    async def handle(msg: Message) -> None:
        history.recv(int(msg.body), args.channel)

    consumers = [
        Consumer(
            topic,
            args.channel,
            handle,
            lookupd_http_addresses=list(args.lookupd),
            max_in_flight=100,
            lookupd_poll_interval=2.0,
        )
        for topic in args.topic
    ]
    async with contextlib.AsyncExitStack() as stack:
        for consumer in consumers:
            await stack.enter_async_context(consumer)
        await stop.wait()


async def _plain_subscription(
    address: str, topic: str, args: argparse.Namespace, history: HistoryWriter,
    stop: asyncio.Event,
) -> None:  # fmt: skip
    conn = await PlainConnection.open(address)
    try:
        conn.writer.write(f"SUB {topic} {args.channel}\n".encode())
        async with asyncio.timeout(5.0):
            kind, data = await conn.frame()
        if kind != 0:
            raise ConnectionError(f"SUB: {data[:80]!r}")
        conn.writer.write(b"RDY 100\n")
        while not stop.is_set():
            kind, data = await conn.frame()
            if kind == 2:
                msg_id = data[10:26]
                history.recv(int(data[_MESSAGE_HEAD:]), args.channel)
                conn.writer.write(b"FIN " + msg_id + b"\n")
            elif kind == 1:
                code = data.split(b" ", 1)[0]
                if code not in (b"E_FIN_FAILED", b"E_TOUCH_FAILED", b"E_REQ_FAILED"):
                    raise ConnectionError(data[:80].decode(errors="replace"))
    finally:
        conn.close()


async def plain_consumer(
    args: argparse.Namespace, history: HistoryWriter, stop: asyncio.Event
) -> None:
    running: dict[tuple[str, str], asyncio.Task[None]] = {}
    try:
        while not stop.is_set():
            for key, task in list(running.items()):
                if task.done():
                    del running[key]
            for topic in args.topic:
                for address in await find_topic(args.lookupd, topic):
                    if (topic, address) not in running:
                        running[topic, address] = asyncio.create_task(
                            _quiet(_plain_subscription(address, topic, args, history, stop))
                        )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(LOOKUP_EVERY):
                    await stop.wait()
    finally:
        for task in running.values():
            task.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)


async def _quiet(coro: Awaitable[None]) -> None:
    """A subscription that ends for any reason just ends (the next lookup makes it again)."""
    try:
        await coro
    except (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass


KINDS = {
    "nsqpy-producer": nsqpy_producer,
    "plain-producer": plain_producer,
    "nsqpy-consumer": nsqpy_consumer,
    "plain-consumer": plain_consumer,
}


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m nsqpy.jepsen.worker")
    p.add_argument("kind", choices=sorted(KINDS))
    p.add_argument("--id", type=int, required=True, help="producer number (values k*1e9+n)")
    p.add_argument("--name", required=True, help="the process's name in the history")
    p.add_argument("--lookupd", action="append", required=True, help="host:port (HTTP)")
    p.add_argument("--topic", action="append", required=True,
                   help="a producer's topic; a consumer's topics (repeated)")  # fmt: skip
    p.add_argument("--channel", default="")
    p.add_argument("--rate", type=float, default=100.0, help="values a second (producers)")
    p.add_argument("--batch", type=int, default=1, help="values per publish (MPUB when > 1)")
    p.add_argument("--history", required=True)
    p.add_argument("--origin", type=float, required=True, help="the run's start (monotonic)")
    return p.parse_args(argv)


async def main_async(args: argparse.Namespace) -> None:
    history = HistoryWriter(args.history, args.name, args.origin)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    flusher = asyncio.create_task(_flush_often(history))
    try:
        await KINDS[args.kind](args, history, stop)
    finally:
        flusher.cancel()
        history.close()


async def _flush_often(history: HistoryWriter) -> None:
    """The history on disk at most half a second behind, also when nothing happens (the
    harness reads the consumers' files to know when they have everything)."""
    while True:
        await asyncio.sleep(0.5)
        history.flush()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
