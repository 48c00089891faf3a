"""Logging of the daemons: NSQ's ``<prefix><time> <LEVEL>: <text>`` lines on stderr, one per event.

``setup_daemon_logging(level, prefix)`` sends nsqpy's loggers and aiohttp's (``aiohttp.server``
reports malformed HTTP requests) to one stderr handler. An exception attached to a record is
rendered on the same line (``... (BadHttpMessage: 400, message: ...)``), never as a traceback,
so garbage sent to an HTTP port costs one log line; ``--log-level=debug`` keeps tracebacks.
``prefix`` may instead map logger names to prefixes (``nsqpy run`` tells its three daemons
apart this way). Every other library's warnings (asyncio's "Fatal error on transport" with
its traceback, for one) go through the same handler, so they are one line too.

No client can fill the disk through the log: each call site (the file and line of a logging
call) may write ``RATE_BURST`` lines at once and then ``RATE_PER_S`` a second. Its lines
beyond that are counted, not written; the count is reported in one line, "N more similar
messages suppressed ...; the last: <its text>", before that site's next line is written,
or once it has been quiet for a second (noticed on the next line anyone logs), or at exit.
Imports only the standard library and the level names of ``nsqpy.flags.values``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TextIO

from nsqpy.flags.values import LOG_LEVELS

# Loggers configured together: nsqpy's own and aiohttp's (server errors, client, web).
LOGGERS = ("nsqpy", "aiohttp")
# Per call site: this many lines at once, then this many a second (see the module doc).
RATE_BURST = 20
RATE_PER_S = 1.0
_SWEEP_S = 1.0  # how often suppressed counts of sites gone quiet are looked for
_NOTE_TEXT_MAX = 300  # characters of the last suppressed line quoted in the note


def one_line(exc: BaseException | None) -> str:
    """An exception as ``Type: message`` on one line."""
    if exc is None:
        return ""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class DaemonFormatter(logging.Formatter):
    """``<prefix><asctime> <LEVEL>: <message>``; exceptions folded into the line unless debugging.

    ``prefixes`` maps logger-name prefixes (``nsqpy.lookupd``) to line prefixes; the longest
    match wins, ``""`` is the fallback.
    """

    def __init__(self, prefixes: Mapping[str, str], tracebacks: bool) -> None:
        super().__init__("%(asctime)s %(levelname)s: %(message)s")
        self.prefixes = sorted(prefixes.items(), key=lambda kv: -len(kv[0]))
        self.tracebacks = tracebacks

    def _prefix(self, name: str) -> str:
        for key, prefix in self.prefixes:
            if not key or name == key or name.startswith(key + "."):
                return prefix
        return ""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and not self.tracebacks:
            exc = record.exc_info[1]
            record = logging.makeLogRecord(record.__dict__)
            record.msg = " ".join(record.getMessage().split())
            if exc is not None:
                record.msg += f" ({one_line(exc)})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return self._prefix(record.name) + super().format(record)


@dataclass(frozen=True, slots=True)
class Suppressed:
    """What is kept of a suppressed line: its logger, level and text (never the record, whose
    arguments and traceback could hold on to a request's body)."""

    name: str
    levelno: int
    levelname: str
    text: str

    @classmethod
    def of(cls, record: logging.LogRecord) -> Suppressed:
        text = record.getMessage()
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            text += f" ({one_line(exc)})"
        return cls(record.name, record.levelno, record.levelname, text)


@dataclass(slots=True)
class _Site:
    """The token bucket of one call site and what it has suppressed since its last line."""

    tokens: float
    at: float  # when ``tokens`` was last refilled
    suppressed: int = 0
    last: Suppressed | None = None  # the last line suppressed


class RateLimiter:
    """Token buckets by call site: ``burst`` lines at once, refilled at ``per_s`` a second."""

    def __init__(
        self,
        burst: int = RATE_BURST,
        per_s: float = RATE_PER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.per_s = per_s
        self.clock = clock
        self._sites: dict[tuple[str, int], _Site] = {}

    def _refill(self, site: _Site, now: float) -> None:
        site.tokens = min(float(self.burst), site.tokens + (now - site.at) * self.per_s)
        site.at = now

    def admit(self, record: logging.LogRecord) -> tuple[bool, tuple[Suppressed, int] | None]:
        """(may ``record`` be written, what of its site to report suppressed first: the last
        line left out and how many were)."""
        now = self.clock()
        key = (record.pathname, record.lineno)
        site = self._sites.get(key)
        if site is None:
            site = self._sites[key] = _Site(float(self.burst), now)
        else:
            self._refill(site, now)
        if site.tokens < 1:
            site.suppressed += 1
            site.last = Suppressed.of(record)
            return False, None
        site.tokens -= 1
        report = (site.last, site.suppressed) if site.last is not None else None
        site.suppressed, site.last = 0, None
        return True, report

    def due(self, *, everything: bool = False) -> list[tuple[Suppressed, int]]:
        """The suppressed counts of sites that may write again (all of them when
        ``everything``), taken; sites with a full bucket and nothing to report are forgotten."""
        now = self.clock()
        found: list[tuple[Suppressed, int]] = []
        for key, site in list(self._sites.items()):
            self._refill(site, now)
            if site.last is not None and (everything or site.tokens >= 1):
                found.append((site.last, site.suppressed))
                site.suppressed, site.last = 0, None
            elif site.last is None and site.tokens >= self.burst:
                del self._sites[key]
        return found


def suppressed_note(last: Suppressed, count: int, limiter: RateLimiter) -> logging.LogRecord:
    """The line that reports ``count`` suppressed lines of ``last``'s call site."""
    text = " ".join(last.text.split())
    if len(text) > _NOTE_TEXT_MAX:
        text = text[:_NOTE_TEXT_MAX] + "..."
    return logging.makeLogRecord(
        {
            "name": last.name,
            "levelno": last.levelno,
            "levelname": last.levelname,
            "msg": f"{count} more similar messages suppressed (rate limit: {limiter.burst} at "
            f"once, then {limiter.per_s:g}/s from one place in the code); the last: {text}",
        }
    )


class DaemonHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The daemons' stderr handler: ``DaemonFormatter`` lines, rate-limited by call site."""

    def __init__(self, stream: TextIO, limiter: RateLimiter) -> None:
        super().__init__(stream)
        self.limiter = limiter
        self._next_sweep = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        """Called with the handler's lock held (``Handler.handle``)."""
        try:
            allowed, report = self.limiter.admit(record)
            if report is not None:
                super().emit(suppressed_note(*report, self.limiter))
            if allowed:
                super().emit(record)
            now = self.limiter.clock()
            if now >= self._next_sweep:
                self._next_sweep = now + _SWEEP_S
                for last, count in self.limiter.due():
                    super().emit(suppressed_note(last, count, self.limiter))
        except Exception:  # as StreamHandler: a logging failure never reaches the caller
            self.handleError(record)

    def close(self) -> None:
        """Report what is still suppressed, then close (``logging.shutdown`` at exit)."""
        self.acquire()
        try:
            for last, count in self.limiter.due(everything=True):
                super().emit(suppressed_note(last, count, self.limiter))
        finally:
            self.release()
        super().close()


def setup_daemon_logging(level: str, prefix: str | Mapping[str, str]) -> None:
    """Route nsqpy's and aiohttp's loggers (and every other library's warnings) to stderr at
    ``level`` with ``prefix``, rate-limited (see the module doc)."""
    numeric = LOG_LEVELS.get(level.lower(), logging.INFO)
    prefixes = {"": prefix} if isinstance(prefix, str) else dict(prefix)
    handler = DaemonHandler(sys.stderr, RateLimiter())
    handler.setFormatter(DaemonFormatter(prefixes, tracebacks=numeric <= logging.DEBUG))
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.propagate = False
    root = logging.getLogger()  # asyncio and any other library: warnings and errors only
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("nsqpy").setLevel(numeric)
    # aiohttp reports each malformed request at ERROR; its INFO/DEBUG chatter stays out.
    logging.getLogger("aiohttp").setLevel(max(numeric, logging.WARNING))
