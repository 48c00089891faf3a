"""The daemons' log lines (nsqpy.logs): one line per event, rate-limited by call site."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from nsqpy.logs import DaemonFormatter, DaemonHandler, RateLimiter, Suppressed, setup_daemon_logging


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(msg: str = "bad %s", lineno: int = 7, *args: object) -> logging.LogRecord:
    return logging.LogRecord("nsqpy.nsqd", logging.INFO, "tcp.py", lineno, msg, args, None)


def test_a_call_site_writes_its_burst_then_one_a_second_and_reports_the_rest() -> None:
    clock = Clock()
    limiter = RateLimiter(burst=3, per_s=1.0, clock=clock)
    assert [limiter.admit(record()) for _ in range(3)] == [(True, None)] * 3
    assert limiter.admit(record()) == (False, None)
    last = record("last")
    assert limiter.admit(last) == (False, None)
    assert limiter.admit(record(lineno=8)) == (True, None)  # another site, its own bucket
    clock.now += 1.0
    assert limiter.admit(record()) == (True, (Suppressed.of(last), 2))  # after a note of the two
    assert limiter.admit(record()) == (False, None)


def test_due_reports_sites_gone_quiet_and_forgets_idle_ones() -> None:
    clock = Clock()
    limiter = RateLimiter(burst=1, per_s=1.0, clock=clock)
    limiter.admit(record("first"))
    limiter.admit(record("second"))
    assert limiter.due() == []  # no token yet: the flood may go on
    clock.now += 1.0
    [(last, count)] = limiter.due()
    assert (last.text, count) == ("second", 1)
    assert limiter.due() == [] and not limiter._sites  # reported, full again: forgotten
    limiter.admit(record("a"))
    limiter.admit(record("b"))
    assert [(r.text, n) for r, n in limiter.due(everything=True)] == [("b", 1)]


@pytest.fixture
def handler() -> Iterator[tuple[DaemonHandler, io.StringIO, Clock]]:
    stream = io.StringIO()
    clock = Clock()
    h = DaemonHandler(stream, RateLimiter(burst=2, per_s=1.0, clock=clock))
    h.setFormatter(DaemonFormatter({"": "[nsqd] "}, tracebacks=False))
    yield h, stream, clock
    h.close()


def test_the_handler_writes_a_note_before_the_next_line_and_at_close(
    handler: tuple[DaemonHandler, io.StringIO, Clock],
) -> None:
    h, stream, clock = handler
    for i in range(5):
        h.handle(record("bad %s", 7, i))
    clock.now += 1.5
    h.handle(record("bad %s", 7, 5))
    h.handle(record("bad %s", 7, 6))
    h.close()
    lines = stream.getvalue().splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [
        "bad 0",
        "bad 1",
        "3 more similar messages suppressed (rate limit: 2 at once, then 1/s from one place "
        "in the code); the last: bad 4",
        "bad 5",
        "1 more similar messages suppressed (rate limit: 2 at once, then 1/s from one place "
        "in the code); the last: bad 6",
    ]
    assert all(line.startswith("[nsqd] ") for line in lines)


def test_other_libraries_errors_are_one_line_without_traceback() -> None:
    """asyncio reports a protocol's uncaught exception (with a multi-line message and a
    traceback) through the root logger: it is one line of the daemon's log."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    named = {name: logging.getLogger(name) for name in ("nsqpy", "aiohttp")}
    saved_named = {n: (lg.handlers[:], lg.propagate, lg.level) for n, lg in named.items()}
    try:
        setup_daemon_logging("info", "[nsqd] ")
        [h] = root.handlers
        assert isinstance(h, DaemonHandler)
        stream = io.StringIO()
        h.setStream(stream)
        try:
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        except UnicodeEncodeError as exc:
            logging.getLogger("asyncio").error(
                "Fatal error on transport\nprotocol: <x>\ntransport: <y>", exc_info=exc
            )
        [line] = stream.getvalue().splitlines()
        assert "Fatal error on transport protocol: <x> transport: <y> (UnicodeEncodeError" in line
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
        for name, (handlers, propagate, named_level) in saved_named.items():
            named[name].handlers[:] = handlers
            named[name].propagate = propagate
            named[name].setLevel(named_level)
