"""``nsq_to_nsq``: consume topics and republish every message to other nsqd.

NSQ v1.3.0's flags and defaults (SPEC 6): ``--topic`` (repeatable), ``--channel``
(nsq_to_nsq), ``--nsqd-tcp-address`` xor ``--lookupd-http-address``,
``--destination-nsqd-tcp-address`` (repeatable, required), ``--destination-topic``
(default: the consumed topic's name), ``--mode`` (hostpool, round-robin, epsilon-greedy;
anything else is refused, where NSQ silently used round-robin), ``--status-every`` 250,
``--whitelist-json-field`` / ``--require-json-field`` / ``--require-json-value`` (JSON
filters), ``--consumer-opt``, ``--producer-opt``.

A source message is FIN'd only after the destination nsqd acknowledged the PUB; a failed
PUB marks that destination down (hostpool modes) and REQs the message with the consumer's
default delay and backoff, as NSQ's ``Requeue(-1)``. A body that is not JSON while a JSON
filter is set is dropped (FIN) as NSQ does. SIGINT/SIGTERM: close the consumers (CLS,
running publishes finish and FIN), then the producers; nothing acknowledged is lost and
nothing un-acknowledged is FIN'd. Uses ``nsqpy.client``; must not import the servers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nsqpy.errors import NsqError
from nsqpy.flags import check_options, each, must, option, unless_empty
from nsqpy.tools.clientopts import client_opts_option, parse_client_opts
from nsqpy.tools.common import (
    Signals,
    ToolError,
    ToolSpec,
    channel_option,
    check_sources,
    check_tcp_address,
    check_topic,
    describe,
    lookupd_http_addresses_option,
    nsqd_tcp_addresses_option,
    run_tool,
)
from nsqpy.tools.hostpool import MODES, Selector
from nsqpy.tools.metrics import TimerMetrics

if TYPE_CHECKING:
    from nsqpy.client import Consumer, Message, Producer

log = logging.getLogger("nsqpy.tools")

TOOL = "nsq_to_nsq"


_NOT_NEGATIVE = must(lambda v: v >= 0, "--max-in-flight and --status-every must be >= 0", ToolError)


@dataclass
class ToNsqdOptions:
    topics: list[str] = option(
        "topic", [], "nsq topic (may be given multiple times)", check=each(check_topic)
    )
    channel: str = channel_option("nsq_to_nsq")
    destination_topic: str = option(
        "destination-topic",
        "",
        "use this destination topic for all consumed topics",
        default_text="the consumed topic name",
        check=unless_empty(check_topic),
    )
    max_in_flight: int = option(
        "max-in-flight", 200, "max number of messages to allow in flight", check=_NOT_NEGATIVE
    )
    status_every: int = option(
        "status-every",
        250,
        "the # of requests between logging status (per destination), 0 disables",
        check=_NOT_NEGATIVE,
    )
    mode: str = option(
        "mode",
        "hostpool",
        "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy",
        check=must(
            lambda v: v in MODES,
            f"--{{flag}} must be one of {', '.join(MODES)} (got {{value!r}})",
            ToolError,
        ),
    )
    nsqd_tcp_addresses: list[str] = nsqd_tcp_addresses_option()
    lookupd_http_addresses: list[str] = lookupd_http_addresses_option()
    destination_nsqd_tcp_addresses: list[str] = option(
        "destination-nsqd-tcp-address",
        [],
        "destination nsqd TCP address (may be given multiple times)",
        check=each(check_tcp_address),
    )
    whitelist_json_fields: list[str] = option(
        "whitelist-json-field",
        [],
        "for JSON messages: pass this field (may be given multiple times)",
    )
    require_json_field: str = option(
        "require-json-field",
        "",
        "for JSON messages: only pass messages that contain this field",
    )
    require_json_value: str = option(
        "require-json-value",
        "",
        "for JSON messages: only pass messages in which the required field has this value",
    )
    consumer_opts: list[str] = client_opts_option("consumer")
    producer_opts: list[str] = client_opts_option("producer")


def validate(opts: ToNsqdOptions, given: set[str]) -> None:
    check_options(opts)
    if not opts.topics or not opts.channel:
        raise ToolError("--topic and --channel are required")
    check_sources(opts.nsqd_tcp_addresses, opts.lookupd_http_addresses)
    if not opts.destination_nsqd_tcp_addresses:
        raise ToolError("--destination-nsqd-tcp-address required")


class JsonFilter:
    """``--require-json-field``/``--require-json-value`` and ``--whitelist-json-field``."""

    def __init__(self, field: str, value: str, whitelist: list[str]) -> None:
        self.field = field
        self.value = value
        self.whitelist = whitelist
        try:
            self.number: float | None = float(value) if value else None
        except ValueError:
            self.number = None

    @property
    def active(self) -> bool:
        return bool(self.field or self.whitelist)

    def should_pass(self, doc: Any) -> tuple[bool, bool]:
        """(pass, backoff) for a decoded message."""
        if not self.field:
            return True, False
        if not isinstance(doc, dict) or self.field not in doc:
            if self.value:
                log.error("missing field to check required value")
                return False, True
            return False, False
        if not self.value:
            return True, False
        found = doc[self.field]
        if isinstance(found, str):
            return found == self.value, False
        if (
            self.number is not None
            and isinstance(found, int | float)
            and not isinstance(found, bool)
        ):
            return float(found) == self.number, False
        return False, False  # neither a plain string nor a comparable number

    def filtered(self, doc: Any, raw: bytes) -> bytes:
        """The whitelisted fields only (keys sorted, as Go's encoding/json writes a map)."""
        if not self.whitelist:
            return raw
        if not isinstance(doc, dict):
            raise ValueError("json is not an object")
        kept: dict[str, Any] = {}
        for key in self.whitelist:
            if key in doc:
                value = doc[key]
                if isinstance(value, float) and value.is_integer():
                    value = int(value)
                kept[key] = value
        text = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
            text = text.replace(char, escaped)
        return text.encode()


class Forwarder:
    """The handler shared by every topic's consumer: filter, pick a destination, PUB."""

    def __init__(
        self, opts: ToNsqdOptions, producers: dict[str, Producer], selector: Selector
    ) -> None:
        self.destination_topic = opts.destination_topic
        self.producers = producers
        self.selector = selector
        self.filter = JsonFilter(
            opts.require_json_field, opts.require_json_value, opts.whitelist_json_fields
        )
        self.aggregate = TimerMetrics(opts.status_every, "[aggregate]:")
        multi = len(producers) > 1
        self.per_address = {
            a: TimerMetrics(opts.status_every if multi else 0, f"[{a}]:") for a in producers
        }
        self.forwarded = 0

    def handler_for(self, topic: str) -> Callable[[Message], Awaitable[None]]:
        destination = self.destination_topic or topic

        async def handle(msg: Message) -> None:
            body = self._body(msg)
            if body is not None:
                await self._publish(msg, destination, body)

        return handle

    def _body(self, msg: Message) -> bytes | None:
        if not self.filter.active:
            return msg.body
        try:
            doc = json.loads(msg.body)
        except ValueError:
            log.error("unable to decode json: %r", msg.body[:200])
            return None  # dropped: FIN
        passes, backoff = self.filter.should_pass(doc)
        if not passes:
            if backoff:
                msg.requeue()
            return None
        try:
            return self.filter.filtered(doc, msg.body)
        except ValueError as exc:
            log.error("filtering message failed: %s", exc)
            msg.requeue()
            return None

    async def _publish(self, msg: Message, topic: str, body: bytes) -> None:
        address = self.selector.pick()
        start = time.monotonic()
        try:
            await self.producers[address].pub(topic, body)
        except (OSError, TimeoutError, NsqError) as exc:
            self.selector.mark(address, False)
            log.warning("publish to %s (%s) failed: %s", address, topic, describe(exc))
            msg.requeue()
            return
        elapsed = time.monotonic() - start
        self.selector.mark(address, True, elapsed)
        self.per_address[address].status(elapsed)
        self.aggregate.status(elapsed)
        self.forwarded += 1


async def run(opts: ToNsqdOptions, signals: Signals) -> int:
    from nsqpy.tools.nsqopts import ConsumerFactory, connect_producers

    producer_config = parse_client_opts(opts.producer_opts, "producer-opt")
    factory = ConsumerFactory.from_flags(TOOL, opts)
    producers = await connect_producers(
        TOOL, opts.destination_nsqd_tcp_addresses, producer_config, "destination-nsqd-tcp-address"
    )
    forwarder = Forwarder(opts, producers, Selector(opts.mode, list(producers)))
    consumers: list[Consumer] = []
    try:
        for topic in opts.topics:
            consumer = factory.build(topic, opts.channel, forwarder.handler_for(topic))
            consumers.append(consumer)
            await factory.start(consumer)
        await signals.wait()
    finally:
        await asyncio.gather(*(c.close() for c in consumers), return_exceptions=True)
        for producer in producers.values():
            await producer.close()
    log.info("forwarded %d messages", forwarder.forwarded)
    return 0


SPEC = ToolSpec(
    name=TOOL,
    summary="Consume topics and re-publish their messages to destination nsqd via TCP; a "
    "message is FIN'd only once a destination acknowledged it.",
    options=ToNsqdOptions,
    validate=validate,
    main=run,
)


def main(argv: list[str] | None = None) -> int:
    return run_tool(SPEC, argv)
