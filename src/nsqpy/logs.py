"""Logging of the daemons: NSQ's ``<prefix><time> <LEVEL>: <text>`` lines on stderr, one per event.

``setup_daemon_logging(level, prefix)`` sends nsqpy's loggers and aiohttp's (``aiohttp.server``
reports malformed HTTP requests) to one stderr handler. An exception attached to a record is
rendered on the same line (``... (BadHttpMessage: 400, message: ...)``), never as a traceback,
so garbage sent to an HTTP port costs one log line; ``--log-level=debug`` keeps tracebacks.
``prefix`` may instead map logger names to prefixes (``nsqpy run`` tells its three daemons
apart this way). Imports only the standard library.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

LEVELS = {"debug": 10, "info": 20, "warn": 30, "warning": 30, "error": 40, "fatal": 50}
# Loggers configured together: nsqpy's own and aiohttp's (server errors, client, web).
LOGGERS = ("nsqpy", "aiohttp")


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


def setup_daemon_logging(level: str, prefix: str | Mapping[str, str]) -> None:
    """Route nsqpy's and aiohttp's loggers to stderr at ``level`` with ``prefix``."""
    numeric = LEVELS.get(level.lower(), logging.INFO)
    prefixes = {"": prefix} if isinstance(prefix, str) else dict(prefix)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(DaemonFormatter(prefixes, tracebacks=numeric <= logging.DEBUG))
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.propagate = False
    logging.getLogger("nsqpy").setLevel(numeric)
    # aiohttp reports each malformed request at ERROR; its INFO/DEBUG chatter stays out.
    logging.getLogger("aiohttp").setLevel(max(numeric, logging.WARNING))
