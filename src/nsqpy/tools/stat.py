"""``nsq_stat``: poll ``/stats`` of every nsqd that has a topic and print one channel's totals.

NSQ v1.3.0's flags (SPEC 6): ``--topic``, ``--channel`` (both required),
``--nsqd-http-address`` xor ``--lookupd-http-address`` (repeatable; ``host:port``, no
scheme), ``--interval`` (2s), ``--count`` N (N rows, then exit 0), ``--status-every``
(deprecated alias of ``--interval``), ``--http-client-connect-timeout`` 2s,
``--http-client-request-timeout`` 5s. Each poll sums the channel over its nsqd; rows show
ingress/egress per second over ``--interval`` (``msgs`` delta, and ``msgs`` delta minus
``depth`` delta), depth total/mem/disk, in-flight, deferred, requeued, timed out, messages
and clients. The header comes first and again every 25 polls; the first poll only sets the
baseline. A failed poll or a missing channel is fatal (exit 1), as in NSQ.

Uses ``discovery`` (aiohttp client); must not import the servers.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from nsqpy.flags import check_options, each, option
from nsqpy.tools.common import (
    Signals,
    ToolError,
    ToolSpec,
    check_positive,
    check_sources,
    describe,
    http_connect_timeout_option,
    http_request_timeout_option,
    log,
    run_tool,
)

if TYPE_CHECKING:
    from nsqpy.tools.discovery import HttpLookups

TOOL = "nsq_stat"
HEADER_EVERY = 25
FIELDS = (
    "depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "message_count",
    "client_count",
)


def _check_no_scheme(flag: str, address: str) -> None:
    if address.startswith("http"):
        raise ToolError(f"--{flag} error - address should not contain scheme")


@dataclass
class StatOptions:
    topic: str = option("topic", "", "NSQ topic")
    channel: str = option("channel", "", "NSQ channel")
    interval: float = option(
        "interval", 2.0, "duration of time between polling/printing output", kind="duration"
    )
    status_every: float = option(
        "status-every", -1.0, "(deprecated) use --interval", kind="duration", default_text=""
    )
    count: int = option("count", 0, "number of reports", default_text="", metavar="N")
    http_client_connect_timeout: float = http_connect_timeout_option()
    http_client_request_timeout: float = http_request_timeout_option(5.0)
    nsqd_http_addresses: list[str] = option(
        "nsqd-http-address",
        [],
        "nsqd HTTP address (may be given multiple times)",
        check=each(_check_no_scheme),
    )
    lookupd_http_addresses: list[str] = option(
        "lookupd-http-address",
        [],
        "lookupd HTTP address (may be given multiple times)",
        check=each(_check_no_scheme),
    )


def validate(opts: StatOptions, given: set[str]) -> None:
    check_options(opts)
    if not opts.topic or not opts.channel:
        raise ToolError("--topic and --channel are required")
    if "status-every" in given:
        log.warning("--status-every is deprecated, use --interval")
        opts.interval = opts.status_every
    check_positive("interval", opts.interval)  # after --status-every, which may replace it
    if "count" in given and opts.count <= 0:
        raise ToolError("--count should be positive")
    check_sources(opts.nsqd_http_addresses, opts.lookupd_http_addresses, "nsqd-http-address")


@dataclass
class ChannelTotals:
    depth: int = 0
    backend_depth: int = 0
    in_flight_count: int = 0
    deferred_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0
    message_count: int = 0
    client_count: int = 0

    def add(self, entry: dict[str, Any]) -> None:
        for name in FIELDS:
            value = entry.get(name, 0)
            if isinstance(value, int):
                setattr(self, name, getattr(self, name) + value)


def header_lines() -> list[str]:
    return [
        "------rate------+----------------depth----------------+--------------metadata---------------",
        f"{'ingress':>7} {'egress':>7} | {'total':>7} {'mem':>7} {'disk':>7} {'inflt':>5} "
        f"{'def':>5} | {'req':>7} {'t-o':>7} {'msgs':>12} {'clients':>7}",
    ]


def row(c: ChannelTotals, o: ChannelTotals, interval: float) -> str:
    ingress = int((c.message_count - o.message_count) / interval)
    egress = int((c.message_count - o.message_count - (c.depth - o.depth)) / interval)
    return (
        f"{ingress:7d} {egress:7d} | {c.depth:7d} {c.depth - c.backend_depth:7d} "
        f"{c.backend_depth:7d} {c.in_flight_count:5d} {c.deferred_count:5d} | "
        f"{c.requeue_count:7d} {c.timeout_count:7d} {c.message_count:12d} {c.client_count:7d}"
    )


async def poll(http: HttpLookups, opts: StatOptions) -> ChannelTotals:
    """The channel summed over every nsqd that has the topic."""
    if opts.lookupd_http_addresses:
        try:
            nodes = await http.lookupd_producers(opts.lookupd_http_addresses, opts.topic)
        except ToolError as exc:
            raise ToolError(f"failed to get topic producers - {exc}") from None
    else:
        nodes = list(opts.nsqd_http_addresses)
    try:
        entries = await asyncio.gather(*(http.nsqd_topic_stats(n, opts.topic) for n in nodes))
    except (ToolError, OSError, TimeoutError) as exc:
        raise ToolError(f"failed to get nsqd stats - {describe(exc)}") from None
    totals = ChannelTotals()
    found = False
    for topic in entries:
        for channel in (topic or {}).get("channels") or []:
            if isinstance(channel, dict) and channel.get("channel_name") == opts.channel:
                totals.add(channel)
                found = True
    if not found:
        raise ToolError(
            f"failed to find channel({opts.channel}) in stats metadata for topic({opts.topic})"
        )
    return totals


async def run(opts: StatOptions, signals: Signals, out: TextIO | None = None) -> int:
    from nsqpy.tools.discovery import HttpLookups

    stream = out or sys.stdout
    http = HttpLookups(opts.http_client_connect_timeout, opts.http_client_request_timeout)
    previous: ChannelTotals | None = None
    i = 0
    try:
        while not opts.count or i <= opts.count:
            current = await poll(http, opts)
            lines = header_lines() if i % HEADER_EVERY == 0 else []
            if previous is not None:
                lines.append(row(current, previous, opts.interval))
            if lines:
                stream.write("\n".join(lines) + "\n")
                stream.flush()
            previous = current
            i += 1
            if opts.count and i > opts.count:
                break
            try:
                async with asyncio.timeout(opts.interval):
                    await signals.wait()
                break
            except TimeoutError:
                pass
    except BrokenPipeError:
        pass
    finally:
        await http.close()
    return 0


SPEC = ToolSpec(
    name=TOOL,
    summary="Poll /stats of every nsqd that has --topic and print --channel's aggregate "
    "depth, rates and counters every --interval.",
    options=StatOptions,
    validate=validate,
    main=run,
    hup_stops=True,
)


def main(argv: list[str] | None = None) -> int:
    return run_tool(SPEC, argv)
