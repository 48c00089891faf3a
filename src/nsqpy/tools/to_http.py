"""``nsq_to_http``: consume a topic and deliver each message with an HTTP GET or POST.

NSQ v1.3.0's flags and defaults (SPEC 6): ``--topic``, ``--channel`` (nsq_to_http),
``--nsqd-tcp-address`` xor ``--lookupd-http-address``, ``--max-in-flight`` 200, ``-n`` 100
concurrent requests, ``--get`` (URL with one ``%s`` replaced by the query-escaped body) or
``--post`` (body = message), each repeatable, never both; ``--content-type`` (POST only,
default application/octet-stream), ``--header Name:Value`` (repeatable), ``--mode``
(hostpool default, round-robin, epsilon-greedy; and ``multicast``, alias ``fanout``: every
message to every destination, the mode nsq_to_http had before NSQ 1.0 dropped it),
``--sample`` (fraction delivered; the rest are FIN'd unsent), ``--http-client-connect-
timeout`` 2s, ``--http-client-request-timeout`` 20s, ``--status-every`` 250,
``--consumer-opt``.

A message is FIN'd after a 2xx answer to a POST or a 200 to a GET (in multicast mode, from
every destination); any other status, a timeout or a connection error REQs it with the
consumer's default delay and backoff (multicast: the retry goes to every destination
again, so one that answered already sees it twice: at least once, as NSQ's was). At
start every destination's host:port must accept a TCP connection (no request is sent),
so a wrong URL is one clear error. SIGINT/SIGTERM close the consumer (running requests
finish first) and exit. Uses ``nsqpy.client`` and aiohttp's client; no servers.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote_plus, urlsplit

from nsqpy.flags import check_options, each, must, option, unless_empty
from nsqpy.tools.clientopts import client_opts_option
from nsqpy.tools.common import (
    Signals,
    ToolError,
    ToolSpec,
    channel_option,
    check_sources,
    check_topic,
    describe,
    http_connect_timeout_option,
    http_request_timeout_option,
    lookupd_http_addresses_option,
    nsqd_tcp_addresses_option,
    run_tool,
    user_agent,
)
from nsqpy.tools.hostpool import MODES, Selector
from nsqpy.tools.metrics import TimerMetrics

if TYPE_CHECKING:
    import aiohttp

    from nsqpy.client import Message

log = logging.getLogger("nsqpy.tools")

TOOL = "nsq_to_http"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
# Modes that send each message to every destination instead of picking one.
FANOUT_MODES = ("multicast", "fanout")


def parse_headers(items: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise ToolError(f"Invalid header: {item!r} (expected Name:Value)")
        headers[name.strip()] = value.strip()
    return headers


def _check_url(flag: str, url: str) -> None:
    parts = urlsplit(url.replace("%s", "x"))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ToolError(f"invalid --{flag} address {url!r}: expected an http:// or https:// URL")


def _check_get_url(flag: str, url: str) -> None:
    if url.count("%s") != 1:
        raise ToolError(f"invalid GET address {url!r} - must be a printf string (one %s)")
    _check_url(flag, url)


_NOT_NEGATIVE = must(lambda v: v >= 0, "--max-in-flight and --status-every must be >= 0", ToolError)


@dataclass
class ToHttpOptions:
    topic: str = option("topic", "", "nsq topic", check=unless_empty(check_topic))
    channel: str = channel_option("nsq_to_http")
    nsqd_tcp_addresses: list[str] = nsqd_tcp_addresses_option()
    lookupd_http_addresses: list[str] = lookupd_http_addresses_option()
    max_in_flight: int = option(
        "max-in-flight", 200, "max number of messages to allow in flight", check=_NOT_NEGATIVE
    )
    num_publishers: int = option(
        "n",
        100,
        "number of concurrent publishers",
        check=must(lambda v: v >= 1, "-{flag} must be >= 1", ToolError),
    )
    get: list[str] = option(
        "get",
        [],
        "HTTP address to make a GET request to. '%s' will be printf replaced with data (may be "
        "given multiple times)",
        metavar="url",
        check=each(_check_get_url),
    )
    post: list[str] = option(
        "post",
        [],
        "HTTP address to make a POST request to.  data will be in the body (may be given "
        "multiple times)",
        metavar="url",
        check=each(_check_url),
    )
    content_type: str = option(
        "content-type", DEFAULT_CONTENT_TYPE, "the Content-Type used for POST requests"
    )
    headers: list[str] = option(
        "header",
        [],
        "Custom header for HTTP requests (may be given multiple times)",
        metavar="Name:Value",
        check=lambda flag, items: parse_headers(items),
    )
    mode: str = option(
        "mode",
        "hostpool",
        "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy, "
        "multicast (alias fanout: every destination)",
        check=must(
            lambda v: v in MODES or v in FANOUT_MODES,
            f"--{{flag}} must be one of {', '.join(MODES + FANOUT_MODES)} (got {{value!r}})",
            ToolError,
        ),
    )
    sample: float = option(
        "sample",
        1.0,
        "% of messages to publish (float b/w 0 -> 1)",
        check=must(lambda v: 0.0 <= v <= 1.0, "--{flag} must be between 0.0 and 1.0", ToolError),
    )
    http_client_connect_timeout: float = http_connect_timeout_option()
    http_client_request_timeout: float = http_request_timeout_option(20.0)
    status_every: int = option(
        "status-every",
        250,
        "the # of requests between logging status (per handler), 0 disables",
        check=_NOT_NEGATIVE,
    )
    consumer_opts: list[str] = client_opts_option("consumer")


def validate(opts: ToHttpOptions, given: set[str]) -> None:
    check_options(opts)
    if not opts.topic or not opts.channel:
        raise ToolError("--topic and --channel are required")
    if "content-type" in given:
        if not opts.post:
            raise ToolError("--content-type only used with --post")
        if not opts.content_type:
            raise ToolError("--content-type requires a value when used")
    check_sources(opts.nsqd_tcp_addresses, opts.lookupd_http_addresses)
    if not opts.get and not opts.post:
        raise ToolError("--get or --post required")
    if opts.get and opts.post:
        raise ToolError("use --get or --post not both")


def get_url(template: str, body: bytes) -> str:
    """Go's ``fmt.Sprintf(addr, url.QueryEscape(body))`` for an address with one ``%s``."""
    head, _, tail = template.partition("%s")
    return head.replace("%%", "%") + quote_plus(body) + tail.replace("%%", "%")


async def probe(url: str, timeout: float) -> None:
    """A TCP connection to the URL's host:port, closed at once; ToolError if refused."""
    parts = urlsplit(url.replace("%s", "x"))
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(parts.hostname, port)
    except (OSError, TimeoutError) as exc:
        raise ToolError(f"cannot connect to {url}: {describe(exc)}") from None
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass


class HttpDelivery:
    """The handler: at most ``-n`` messages at once, each to one destination (or to every
    destination in multicast mode)."""

    def __init__(self, opts: ToHttpOptions, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.method = "POST" if opts.post else "GET"
        self.addresses = opts.post or opts.get
        self.fanout = opts.mode in FANOUT_MODES
        self.selector = Selector("round-robin" if self.fanout else opts.mode, self.addresses)
        self.sample = opts.sample
        self.headers = {"User-Agent": user_agent(TOOL), **parse_headers(opts.headers)}
        if self.method == "POST":
            self.headers["Content-Type"] = opts.content_type
        self.slots = asyncio.Semaphore(opts.num_publishers)
        self.aggregate = TimerMetrics(opts.status_every, "[aggregate]:")
        multi = len(self.addresses) > 1
        self.per_address = {
            a: TimerMetrics(opts.status_every if multi else 0, f"[{a}]:") for a in self.addresses
        }
        self.delivered = 0

    def handler(self) -> Callable[[Message], Awaitable[None]]:
        async def handle(msg: Message) -> None:
            if self.sample < 1.0 and random.random() > self.sample:
                return  # not sampled: FIN without sending
            async with self.slots:
                await self._deliver(msg)

        return handle

    async def _deliver(self, msg: Message) -> None:
        if self.fanout:
            results = await asyncio.gather(*(self._send(a, msg.body) for a in self.addresses))
            ok = all(results)
        else:
            ok = await self._send(self.selector.pick(), msg.body)
        if ok:
            self.delivered += 1
        else:
            msg.requeue()

    async def _send(self, address: str, body: bytes) -> bool:
        """One request; True on success (timed), False (logged) on any failure."""
        import aiohttp

        start = time.monotonic()
        try:
            status = await self._request(address, body)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._failed(address, describe(exc))
            return False
        ok = status == 200 if self.method == "GET" else 200 <= status < 300
        if not ok:
            self._failed(address, f"got status code {status}")
            return False
        elapsed = time.monotonic() - start
        self.selector.mark(address, True, elapsed)
        self.per_address[address].status(elapsed)
        self.aggregate.status(elapsed)
        return True

    async def _request(self, address: str, body: bytes) -> int:
        if self.method == "GET":
            request = self.session.get(get_url(address, body), headers=self.headers)
        else:
            request = self.session.post(address, data=body, headers=self.headers)
        async with request as resp:
            await resp.read()
            return resp.status

    def _failed(self, address: str, reason: str) -> None:
        self.selector.mark(address, False)
        log.warning("%s %s failed: %s", self.method, address, reason)


async def run(opts: ToHttpOptions, signals: Signals) -> int:
    import aiohttp

    from nsqpy.tools.nsqopts import ConsumerFactory

    for url in opts.post or opts.get:
        await probe(url, opts.http_client_connect_timeout)
    factory = ConsumerFactory.from_flags(TOOL, opts)
    timeout = aiohttp.ClientTimeout(
        total=opts.http_client_request_timeout, sock_connect=opts.http_client_connect_timeout
    )
    connector = aiohttp.TCPConnector(limit=opts.num_publishers)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        delivery = HttpDelivery(opts, session)
        consumer = factory.build(opts.topic, opts.channel, delivery.handler())
        try:
            await factory.start(consumer)
            await signals.wait()
        finally:
            await consumer.close()
    log.info("delivered %d messages", delivery.delivered)
    return 0


SPEC = ToolSpec(
    name=TOOL,
    summary="Consume a topic and deliver each message with an HTTP GET (--get) or POST "
    "(--post) to the given endpoints; a message is FIN'd only after a successful answer.",
    options=ToHttpOptions,
    validate=validate,
    main=run,
)


def main(argv: list[str] | None = None) -> int:
    return run_tool(SPEC, argv)
