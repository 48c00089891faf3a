"""``to_nsq``: read stdin, split it on a one-byte delimiter and PUB each non-empty chunk.

NSQ v1.3.0's flags (SPEC 6): ``--topic`` (required), ``--delimiter`` (one byte, default
``\\n``), ``--nsqd-tcp-address`` (repeatable, required: every chunk goes to every address),
``--rate`` N msgs/s (0 = no throttle; a token bucket holding at most one second of
credit), ``--producer-opt``. Publishes are pipelined (at most ``WINDOW`` unanswered) over
one connection per nsqd, so order is kept; the program exits 0 once stdin has ended and
every publish was acknowledged, or 1 on the first failed publish (as NSQ's ``log.Fatal``).
Unlike NSQ, a last chunk without a trailing delimiter is published whole (NSQ drops its
last byte). SIGINT/SIGTERM stop reading, publish every complete chunk already read from
stdin (unthrottled; NSQ drops them), wait for every acknowledgement and exit 0; the bytes
after the last delimiter are an incomplete chunk and are dropped with a warning.

stdin is read by a daemon thread (a blocked read must never keep the process alive).
Uses ``nsqpy.client``; must not import the servers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nsqpy.errors import NsqError
from nsqpy.flags import check_options, each, must, option, unless_empty
from nsqpy.tools.clientopts import client_opts_option, parse_client_opts
from nsqpy.tools.common import (
    Signals,
    ToolError,
    ToolSpec,
    check_tcp_address,
    check_topic,
    describe,
    run_tool,
)

if TYPE_CHECKING:
    from nsqpy.client import Producer

log = logging.getLogger("nsqpy.tools")

TOOL = "to_nsq"
WINDOW = 256
READ_SIZE = 1 << 16


@dataclass
class ToNsqOptions:
    topic: str = option("topic", "", "NSQ topic to publish to", check=unless_empty(check_topic))
    delimiter: str = option(
        "delimiter",
        "\n",
        "character to split input from stdin",
        check=must(lambda v: len(v.encode()) == 1, "--{flag} must be a single byte", ToolError),
    )
    nsqd_tcp_addresses: list[str] = option(
        "nsqd-tcp-address",
        [],
        "destination nsqd TCP address (may be given multiple times)",
        check=each(check_tcp_address),
    )
    rate: int = option(
        "rate",
        0,
        "Throttle messages to n/second. 0 to disable",
        check=must(lambda v: v >= 0, "--{flag} must be >= 0", ToolError),
    )
    producer_opts: list[str] = client_opts_option("producer")


def validate(opts: ToNsqOptions, given: set[str]) -> None:
    check_options(opts)
    if not opts.topic:
        raise ToolError("--topic required")
    if not opts.nsqd_tcp_addresses:
        raise ToolError("--nsqd-tcp-address required")


class RateLimiter:
    """A token bucket: ``rate`` tokens a second, at most ``rate`` saved up, one at start."""

    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.clock = clock
        self.tokens = 1.0
        self.updated = clock()

    def delay(self) -> float:
        """Take a token: 0 if one is available now, else how long to wait for it."""
        now = self.clock()
        self.tokens = min(float(self.rate), self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    async def take(self) -> None:
        if self.rate > 0:
            wait = self.delay()
            if wait > 0:
                await asyncio.sleep(wait)


def split_chunks(buffer: bytearray, delimiter: int) -> list[bytes]:
    """Pop every complete chunk from ``buffer``; empty chunks are dropped."""
    end = buffer.rfind(bytes([delimiter]))
    if end < 0:
        return []
    parts = bytes(buffer[:end]).split(bytes([delimiter]))
    del buffer[: end + 1]
    return [p for p in parts if p]


class StdinReader:
    """Raw chunks of ``fd`` read by a daemon thread, with backpressure; ``None`` at EOF.

    A blocked read never keeps the process alive (daemon thread). ``read_so_far`` hands
    over, without waiting, what the thread has read but nobody has taken yet.
    """

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self.queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(maxsize=16)
        self.ended = False

    def start(self) -> StdinReader:
        loop = asyncio.get_running_loop()

        def reader() -> None:
            while True:
                try:
                    data: bytes | BaseException | None = os.read(self.fd, READ_SIZE) or None
                except OSError as exc:
                    data = exc
                try:
                    asyncio.run_coroutine_threadsafe(self.queue.put(data), loop).result()
                except (RuntimeError, CancelledError, asyncio.CancelledError):
                    return  # the loop is gone: the program is exiting
                if not isinstance(data, bytes):
                    return

        threading.Thread(target=reader, name="to_nsq-stdin", daemon=True).start()
        return self

    def _item(self, item: bytes | BaseException | None) -> bytes | None:
        if item is None:
            self.ended = True
            return None
        if isinstance(item, BaseException):
            self.ended = True
            raise ToolError(f"reading stdin: {describe(item)}")
        return item

    async def read(self) -> bytes | None:
        return None if self.ended else self._item(await self.queue.get())

    def read_so_far(self) -> bytes:
        out = bytearray()
        while not self.ended and not self.queue.empty():
            data = self._item(self.queue.get_nowait())
            if data is None:
                break
            out += data
        return bytes(out)


class Publisher:
    """Pipelined PUBs of each chunk to every producer; remembers the first failure."""

    def __init__(self, topic: str, producers: list[Producer], limiter: RateLimiter) -> None:
        self.topic = topic
        self.producers = producers
        self.limiter = limiter
        self.window = asyncio.Semaphore(WINDOW)
        self.pending: set[asyncio.Task[None]] = set()
        self.failure: BaseException | None = None
        self.published = 0

    async def submit(self, body: bytes, *, throttle: bool = True) -> None:
        if throttle:
            await self.limiter.take()
        await self.window.acquire()
        task = asyncio.ensure_future(self._publish(body))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _publish(self, body: bytes) -> None:
        try:
            for producer in self.producers:
                await producer.pub(self.topic, body)
            self.published += 1
        except (OSError, TimeoutError, NsqError) as exc:
            if self.failure is None:
                self.failure = exc
        finally:
            self.window.release()

    async def drain(self) -> None:
        await asyncio.gather(*list(self.pending), return_exceptions=True)


class Pump:
    """stdin -> chunks -> publisher. A chunk leaves ``chunks`` only once it was submitted,
    so a stop at any await leaves every chunk read either submitted or in ``chunks``."""

    def __init__(self, delimiter: int, publisher: Publisher, reader: StdinReader) -> None:
        self.delimiter = delimiter
        self.publisher = publisher
        self.reader = reader
        self.buffer = bytearray()
        self.chunks: deque[bytes] = deque()

    async def run(self) -> None:
        while True:
            while self.chunks:
                if self.publisher.failure is not None:
                    return
                await self.publisher.submit(self.chunks[0])
                self.chunks.popleft()
            data = await self.reader.read()
            if data is None:
                break
            self.buffer += data
            self.chunks.extend(split_chunks(self.buffer, self.delimiter))
        if self.buffer and self.publisher.failure is None:  # the last chunk, at end of input
            await self.publisher.submit(bytes(self.buffer))
            self.buffer.clear()

    async def flush(self) -> None:
        """After SIGINT/SIGTERM: publish every complete chunk already read, unthrottled;
        the bytes after the last delimiter are an incomplete chunk and are dropped."""
        self.buffer += self.reader.read_so_far()
        self.chunks.extend(split_chunks(self.buffer, self.delimiter))
        if self.chunks:
            log.info("publishing the %d messages read before the signal", len(self.chunks))
        while self.chunks and self.publisher.failure is None:
            await self.publisher.submit(self.chunks.popleft(), throttle=False)
        if self.buffer:
            log.warning("dropping %d bytes after the last delimiter", len(self.buffer))


async def run(opts: ToNsqOptions, signals: Signals) -> int:
    from nsqpy.tools.nsqopts import connect_producers

    config = parse_client_opts(opts.producer_opts, "producer-opt")
    producers = await connect_producers(TOOL, opts.nsqd_tcp_addresses, config, "nsqd-tcp-address")
    if opts.rate:
        log.info("throttling messages rate to max:%d/second", opts.rate)
    publisher = Publisher(opts.topic, list(producers.values()), RateLimiter(opts.rate))
    pumping = Pump(opts.delimiter.encode()[0], publisher, StdinReader().start())
    pump = asyncio.ensure_future(pumping.run())
    stop = asyncio.ensure_future(signals.stop.wait())
    try:
        await asyncio.wait([pump, stop], return_when=asyncio.FIRST_COMPLETED)
        if pump.done():
            pump.result()
        else:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)
            await pumping.flush()
        await publisher.drain()
    finally:
        for task in (pump, stop):
            task.cancel()
        await asyncio.gather(pump, stop, return_exceptions=True)
        for producer in producers.values():
            await producer.close()
    if publisher.failure is not None:
        raise ToolError(f"publish to {opts.topic} failed: {describe(publisher.failure)}")
    log.info("published %d messages to %s", publisher.published, opts.topic)
    return 0


SPEC = ToolSpec(
    name=TOOL,
    summary="Read stdin, split it on --delimiter (newlines by default) and publish each "
    "non-empty chunk to --topic on every --nsqd-tcp-address.",
    options=ToNsqOptions,
    validate=validate,
    main=run,
)


def main(argv: list[str] | None = None) -> int:
    return run_tool(SPEC, argv)
