"""``nsq_tail``: consume one or more topics and print each message body to stdout, one per line.

NSQ v1.3.0's flags and defaults (SPEC 6): ``--topic`` (repeatable, required), ``--channel``
(default a random ``tail<6 digits>#ephemeral``), ``--nsqd-tcp-address`` xor
``--lookupd-http-address``, ``--max-in-flight`` 200, ``-n`` (exit after N messages; also
caps max-in-flight), ``--print-topic`` (``topic | body``), ``--consumer-opt``. Messages are
FIN'd once printed. ``-n`` counts messages over all topics; what arrives past N is
requeued, so exactly N lines are printed. SIGINT, SIGTERM and SIGHUP stop it.

Uses ``nsqpy.client`` through ``nsqopts``; must not import the servers.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

from nsqpy.flags import check_options, each, must, option, unless_empty
from nsqpy.tools.clientopts import client_opts_option
from nsqpy.tools.common import (
    Signals,
    ToolError,
    ToolSpec,
    check_channel,
    check_sources,
    check_topic,
    ephemeral_channel,
    lookupd_http_addresses_option,
    nsqd_tcp_addresses_option,
    run_tool,
)

if TYPE_CHECKING:
    from nsqpy.client import Consumer, Message

log = logging.getLogger("nsqpy.tools")

TOOL = "nsq_tail"


@dataclass
class TailOptions:
    topics: list[str] = option(
        "topic", [], "NSQ topic (may be given multiple times)", check=each(check_topic)
    )
    channel: str = option(
        "channel",
        "",
        "NSQ channel",
        default_text='a random "tail<6 digits>#ephemeral"',
        check=unless_empty(check_channel),
    )
    nsqd_tcp_addresses: list[str] = nsqd_tcp_addresses_option()
    lookupd_http_addresses: list[str] = lookupd_http_addresses_option()
    max_in_flight: int = option(
        "max-in-flight",
        200,
        "max number of messages to allow in flight",
        check=must(lambda v: v >= 0, "--{flag} must be >= 0", ToolError),
    )
    total_messages: int = option(
        "n",
        0,
        "total messages to show (will wait if starved); 0 = no limit",
        check=must(lambda v: v >= 0, "-{flag} must be >= 0", ToolError),
    )
    print_topic: bool = option("print-topic", False, "print topic name where message was received")
    consumer_opts: list[str] = client_opts_option("consumer")


def validate(opts: TailOptions, given: set[str]) -> None:
    check_options(opts)
    if not opts.topics:
        raise ToolError("--topic is required")
    check_sources(opts.nsqd_tcp_addresses, opts.lookupd_http_addresses)


class Printer:
    """Writes message lines to ``out``, flushing once per event-loop turn; counts for ``-n``."""

    def __init__(self, out: BinaryIO, limit: int, print_topic: bool) -> None:
        self.out = out
        self.limit = limit
        self.print_topic = print_topic
        self.shown = 0
        self.done = asyncio.Event()
        self.broken = False
        self._flush_pending = False

    def handler_for(self, topic: str) -> Callable[[Message], Awaitable[None]]:
        prefix = f"{topic} | ".encode() if self.print_topic else b""

        async def handle(msg: Message) -> None:
            if self.done.is_set():
                msg.requeue(0, backoff=False)
                return
            self.shown += 1
            self._write(prefix + msg.body + b"\n")
            if self.limit and self.shown >= self.limit:
                self.done.set()

        return handle

    def _write(self, line: bytes) -> None:
        try:
            self.out.write(line)
        except (BrokenPipeError, ValueError):
            self._broken()
            return
        if not self._flush_pending:
            self._flush_pending = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_pending = False
        try:
            self.out.flush()
        except (BrokenPipeError, ValueError):
            self._broken()

    def _broken(self) -> None:
        self.broken = True
        self.done.set()


async def _wait_any(*events: asyncio.Event) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


async def run(opts: TailOptions, signals: Signals, out: BinaryIO | None = None) -> int:
    from nsqpy.tools.nsqopts import ConsumerFactory

    channel = opts.channel or ephemeral_channel()
    max_in_flight = opts.max_in_flight
    if 0 < opts.total_messages < max_in_flight:
        max_in_flight = opts.total_messages  # don't ask for more messages than we want
    factory = ConsumerFactory.from_flags(TOOL, opts, max_in_flight)
    printer = Printer(out or sys.stdout.buffer, opts.total_messages, opts.print_topic)
    consumers: list[Consumer] = []
    try:
        for topic in opts.topics:
            consumer = factory.build(topic, channel, printer.handler_for(topic))
            consumers.append(consumer)
            await factory.start(consumer)
            log.info("consuming topic %s on channel %s", topic, channel)
        await _wait_any(signals.stop, printer.done)
    finally:
        await _close_all(consumers)
        printer.flush()
    return 0


async def _close_all(consumers: Sequence[Consumer]) -> None:
    await asyncio.gather(*(c.close(timeout=5.0) for c in consumers), return_exceptions=True)


SPEC = ToolSpec(
    name=TOOL,
    summary="Consume the given topic(s) and write each message body to stdout, one per line "
    "(in the spirit of tail(1)).",
    options=TailOptions,
    validate=validate,
    main=run,
    hup_stops=True,
)


def main(argv: list[str] | None = None) -> int:
    return run_tool(SPEC, argv)
