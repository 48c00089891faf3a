"""What every NSQ utility shares: the program shell, version line, logging and signals.

``run_tool(spec, argv)`` is each tool's ``main``: it parses the Go-style flags declared on
the tool's options dataclass (``nsqpy.flags``), answers ``--help`` and ``--version``,
validates, sets up logging and runs the tool's coroutine on uvloop with SIGINT/SIGTERM (and
SIGHUP where the tool wants it) delivered through a ``Signals`` object. Exit codes: 0 success,
1 a runtime or validation error (NSQ's ``log.Fatal``), 2 a malformed command line. Every
error leaves as one line on stderr; tracebacks are shown only at ``--log-level=debug``.

Also here: the ephemeral channel name NSQ's tools pick, user agents, the checks the tools
share (``--nsqd-tcp-address`` xor ``--lookupd-http-address``, addresses, names, positive
values), the flags several tools declare alike (``channel_option``,
``nsqd_tcp_addresses_option``, ``lookupd_http_addresses_option``, the HTTP client timeouts),
and a one-line description of an exception. Imports only the standard library and
light nsqpy modules (never aiohttp or ``nsqpy.client``, so ``--help`` and flag errors stay
instant); must not import the servers (``nsqd``, ``lookupd``, ``broker``) or ``testing``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nsqpy import NSQ_VERSION, __version__, version_line
from nsqpy.errors import ConfigError, NsqError
from nsqpy.flags import (
    LOG_LEVELS,
    FlagError,
    check_host_port,
    declared,
    each,
    format_help,
    option,
    parse_into,
    unless_empty,
)
from nsqpy.protocol.names import valid_channel_name, valid_topic_name

log = logging.getLogger("nsqpy.tools")


class ToolError(NsqError):
    """A fatal condition a tool reports in one line before exiting 1 (NSQ's ``log.Fatal``)."""


def user_agent(tool: str) -> str:
    """``nsq_tail/1.3.0 nsqpy/0.1.0`` (NSQ's tools say ``<tool>/<version> go-nsq/<version>``)."""
    return f"{tool}/{NSQ_VERSION} nsqpy/{__version__}"


def ephemeral_channel() -> str:
    """A random ephemeral channel as nsq_tail picks one: ``tail<6 digits>#ephemeral``."""
    return f"tail{random.randrange(999999):06d}#ephemeral"


def describe(exc: BaseException) -> str:
    """One line for an exception: its message, or its type when the message is empty."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, TimeoutError) and not text:
        return "timed out"
    return text or type(exc).__name__


# ---- validation helpers ----------------------------------------------------------------------
def check_sources(
    nsqd: Sequence[str], lookupd: Sequence[str], nsqd_flag: str = "nsqd-tcp-address"
) -> None:
    """NSQ's rule: exactly one kind of source address."""
    if not nsqd and not lookupd:
        raise ToolError(f"--{nsqd_flag} or --lookupd-http-address required")
    if nsqd and lookupd:
        raise ToolError(f"use --{nsqd_flag} or --lookupd-http-address not both")


def check_tcp_address(flag: str, address: str) -> None:
    """An nsqd TCP address to dial: ``<host>:<port>`` (a FlagError, exit status 2)."""
    try:
        check_host_port(flag, address, need_host=True)
    except ConfigError:
        raise FlagError(
            f'invalid value "{address}" for flag --{flag}: expected host:port'
        ) from None


def check_topic(flag: str, name: str) -> None:
    if not valid_topic_name(name):
        raise ToolError(
            f"--{flag} is invalid: {name!r} (1-64 of [.a-zA-Z0-9_-], optional #ephemeral)"
        )


def check_channel(flag: str, name: str) -> None:
    if not valid_channel_name(name):
        raise ToolError(
            f"--{flag} is invalid: {name!r} (1-64 of [.a-zA-Z0-9_-], optional #ephemeral)"
        )


def check_positive(flag: str, value: float) -> None:
    if value <= 0:
        raise ToolError(f"--{flag} should be positive")


# ---- flags several tools declare alike (each call is one dataclass field) -------------------
def channel_option(default: str) -> str:
    """``--channel``: the channel consumed (each tool defaults to its own name)."""
    return option("channel", default, "nsq channel", check=unless_empty(check_channel))


def nsqd_tcp_addresses_option() -> list[str]:
    """``--nsqd-tcp-address`` (repeatable): nsqd to consume from directly."""
    return option(
        "nsqd-tcp-address",
        [],
        "nsqd TCP address (may be given multiple times)",
        check=each(check_tcp_address),
    )


def lookupd_http_addresses_option() -> list[str]:
    """``--lookupd-http-address`` (repeatable): nsqlookupd to discover nsqd from."""
    return option("lookupd-http-address", [], "lookupd HTTP address (may be given multiple times)")


def http_connect_timeout_option() -> float:
    """``--http-client-connect-timeout``, 2s."""
    return option(
        "http-client-connect-timeout",
        2.0,
        "timeout for HTTP connect",
        kind="duration",
        check=check_positive,
    )


def http_request_timeout_option(default: float) -> float:
    """``--http-client-request-timeout`` (NSQ's default differs per tool)."""
    return option(
        "http-client-request-timeout",
        default,
        "timeout for HTTP request",
        kind="duration",
        check=check_positive,
    )


# ---- logging ---------------------------------------------------------------------------------
class _OneLineFormatter(logging.Formatter):
    """Exceptions shown as one line unless debugging."""

    def __init__(self, fmt: str, full_tracebacks: bool) -> None:
        super().__init__(fmt)
        self.full = full_tracebacks

    def formatException(self, ei: Any) -> str:
        if self.full:
            return super().formatException(ei)
        exc = ei[1]
        return f"    ({type(exc).__name__}: {describe(exc)})" if exc is not None else ""


def setup_logging(level: str = "info", prefix: str = "") -> None:
    """Log to stderr as ``<prefix>2024-01-01 12:00:00,000 INFO: text`` for every library."""
    numeric = LOG_LEVELS.get(level.lower(), logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _OneLineFormatter(f"{prefix}%(asctime)s %(levelname)s: %(message)s", numeric <= 10)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)


# ---- signals -----------------------------------------------------------------------------------
@dataclass
class Signals:
    """SIGINT/SIGTERM set ``stop``; a second one cancels the tool. SIGHUP calls ``on_hup``."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    on_hup: Callable[[], None] | None = None
    received: int = 0
    _task: asyncio.Task[Any] | None = None

    def _stop(self, signum: int) -> None:
        self.received += 1
        if self.received == 1:
            log.info("received %s, stopping", signal.Signals(signum).name)
            self.stop.set()
        elif self._task is not None:
            log.warning("received %s again, exiting now", signal.Signals(signum).name)
            self._task.cancel()

    def _hup(self) -> None:
        if self.on_hup is not None:
            self.on_hup()

    async def wait(self) -> None:
        await self.stop.wait()


ToolMain = Callable[[Any, Signals], Awaitable[int]]


@dataclass(frozen=True)
class ToolSpec:
    """A tool: name, one-line summary, options dataclass (its fields declare the flags),
    validation and coroutine.

    ``validate(opts, given)`` (the declared checks, ``check_options``, then those across
    options) may raise ``FlagError`` (exit 2) or ``ToolError`` (exit 1).
    ``hup_stops``: SIGHUP stops the tool (nsq_tail, nsq_stat) instead of being offered to
    ``Signals.on_hup``.
    """

    name: str
    summary: str
    options: type[Any]
    validate: Callable[[Any, set[str]], None]
    main: ToolMain
    hup_stops: bool = False
    log_level: Callable[[Any], str] = lambda opts: "info"
    log_prefix: Callable[[Any], str] = lambda opts: ""


def run_tool(spec: ToolSpec, argv: Sequence[str] | None) -> int:
    """Parse, validate and run; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    opts = spec.options()
    try:
        parsed = parse_into(opts, declared(spec.options), args)
    except FlagError as exc:
        print(f"{spec.name}: {exc}", file=sys.stderr)
        return 2
    if parsed.action == "help":
        sys.stdout.write(
            format_help(spec.name, spec.summary, spec.options(), declared(spec.options))
        )
        return 0
    if parsed.action == "version":
        print(version_line(spec.name))
        return 0
    try:
        spec.validate(opts, parsed.given)
    except FlagError as exc:
        print(f"{spec.name}: {exc}", file=sys.stderr)
        return 2
    except (ConfigError, ToolError) as exc:
        print(f"{spec.name}: {exc}", file=sys.stderr)
        return 1
    setup_logging(spec.log_level(opts), spec.log_prefix(opts))
    try:
        return _run_loop(_with_signals(spec, opts))
    except (ToolError, ConfigError) as exc:
        print(f"{spec.name}: {exc}", file=sys.stderr)
    except (asyncio.CancelledError, KeyboardInterrupt):
        print(f"{spec.name}: interrupted", file=sys.stderr)
    except Exception as exc:  # a bug or an unexpected condition: still one line
        log.debug("fatal", exc_info=True)
        print(f"{spec.name}: error: {type(exc).__name__}: {describe(exc)}", file=sys.stderr)
    return 1


async def _with_signals(spec: ToolSpec, opts: Any) -> int:
    loop = asyncio.get_running_loop()
    signals = Signals(_task=asyncio.current_task())
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, signals._stop, sig)
    if spec.hup_stops:
        loop.add_signal_handler(signal.SIGHUP, signals._stop, signal.SIGHUP)
    else:
        loop.add_signal_handler(signal.SIGHUP, signals._hup)
    try:
        return await spec.main(opts, signals)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)


def _run_loop(coro: Awaitable[int]) -> int:
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        factory = None

    async def wrapper() -> int:
        return await coro

    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(wrapper())
