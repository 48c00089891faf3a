"""What one HTTP connection to nsqd may take: sizes of a request's head and time to send it.

``runner_options`` are the aiohttp server's limits for nsqd's HTTP and HTTPS listeners: a
request line of up to 1 MiB (Go's net/http takes request lines and headers up to 1 MiB, and
nsqd answers long query strings), at most ``MAX_HEADERS`` header fields of at most
``MAX_FIELD_SIZE`` bytes each, and ``--client-timeout`` as the keep-alive timeout, which is
also how long a request's head may take to arrive (aiohttp closes a connection that has not
completed a request head within it). ``body_deadline`` gives a request's body as long again
from when its head arrived: a body still incomplete then is answered 408
``REQUEST_TIMEOUT`` and the connection closed (nsqd sets no HTTP deadlines; nsqpy does, as
for TCP commands). aiohttp itself queues at most 32 pipelined requests per connection and
stops reading while they wait, and a handler reads at most ``--max-body-size`` + 1 bytes of
a body (the rest is read and dropped for aiohttp's lingering time, then the connection is
closed), so the worst case per connection is in ``docs/limits.md``. Imports aiohttp; never the
broker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from nsqpy.httpapi import Handler, v1_error
from nsqpy.options import NsqdOptions

log = logging.getLogger("nsqpy.nsqd")

MAX_LINE_SIZE = 1 << 20
MAX_FIELD_SIZE = 8190  # aiohttp's default: a header field of at most 8 KiB
MAX_HEADERS = 128


def runner_options(opts: NsqdOptions) -> dict[str, Any]:
    """Keyword arguments of ``web.AppRunner`` for nsqd's listeners."""
    return {
        "access_log": None,
        "max_line_size": MAX_LINE_SIZE,
        "max_field_size": MAX_FIELD_SIZE,
        "max_headers": MAX_HEADERS,
        "keepalive_timeout": opts.client_timeout_ms / 1000,
    }


class BodyTimeout(asyncio.TimeoutError):
    """A request body did not arrive in time (a TimeoutError, as aiohttp expects of a
    payload that failed that way)."""


def body_deadline(timeout_s: float) -> Middleware:
    """Middleware: a request's body must arrive within ``timeout_s`` of its head."""

    @web.middleware
    async def deadline(request: web.Request, handler: Handler) -> web.StreamResponse:
        content = request.content
        if not request.body_exists or content.is_eof():
            return await handler(request)
        loop = asyncio.get_running_loop()
        timer = loop.call_later(timeout_s, _expire, request, timeout_s)
        try:
            return await handler(request)
        except BodyTimeout:
            log.info(
                "%s: closing: %s %s body not received within %gs",
                request.remote, request.method, request.path, timeout_s,
            )  # fmt: skip
            response = v1_error("REQUEST_TIMEOUT", 408)
            response.force_close()
            return response
        finally:
            timer.cancel()

    return deadline


def _expire(request: web.Request, timeout_s: float) -> None:
    """The deadline passed: a read of the body waiting (or to come) raises BodyTimeout."""
    if not request.content.is_eof():
        request.content.set_exception(BodyTimeout(f"body not received within {timeout_s}s"))
