"""NSQ's V1 HTTP response conventions, shared by nsqd and nsqlookupd (aiohttp).

Every V1 response carries ``X-NSQ-Content-Type: nsq; version=1.0``; a text success is
the text, an empty success an empty 200, an object JSON with the JSON content type, and an
error ``{"message": "<CODE>"}`` with its status: a handler raises ``HttpError(status,
code)`` and the one middleware writes it. The middleware also turns aiohttp's own 404/405
and any unhandled exception into NSQ's JSON errors, so no handler can answer with a
traceback: bad input a handler did not catch (a ``ValueError``, or the ``RecursionError`` of
JSON nested too deep) is 400 ``INVALID_REQUEST``, anything else 500 ``INTERNAL_ERROR`` with
one log line (``nsqpy.logs`` folds the traceback and rate-limits repeats). Query arguments
come from the URL only; the first value wins. nsqd's and nsqlookupd's own endpoints read
them as Go's ``url.ParseQuery`` does (``query_args``, ``parse_query``): pairs split on
``&``, a pair holding ``;`` is an error, ``+`` is a space, ``%`` must be followed by two hex
digits; a malformed query is 400 ``INVALID_REQUEST``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

log = logging.getLogger("nsqpy.http")

V1_HEADER = {"X-NSQ-Content-Type": "nsq; version=1.0"}
JSON_TYPE = "application/json; charset=utf-8"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Args = dict[str, list[str]]  # a parsed query: every value of each key, in order

_HEX = frozenset(b"0123456789abcdefABCDEF")


def v1_json(data: Any, status: int = 200) -> web.Response:
    """A V1 JSON body with NSQ's headers."""
    body = json.dumps(data, separators=(",", ":")).encode()
    headers = {**V1_HEADER, "Content-Type": JSON_TYPE}
    return web.Response(body=body, status=status, headers=headers)


def v1_text(text: str, status: int = 200) -> web.Response:
    """A V1 plain-text body (``OK``)."""
    headers = {**V1_HEADER, "Content-Type": "text/plain; charset=utf-8"}
    return web.Response(body=text.encode(), status=status, headers=headers)


def v1_empty() -> web.Response:
    """A V1 success with no data: 200, empty body."""
    return web.Response(body=b"", status=200, headers=dict(V1_HEADER))


def v1_error(code: str, status: int, **extra: Any) -> web.Response:
    """A V1 error: ``{"message": code}`` (plus extra fields) with the status."""
    return v1_json({"message": code, **extra}, status=status)


class HttpError(Exception):
    """Raised by a handler (or any helper it calls) to answer NSQ's V1 error: status and
    code (``{"message": code}``, plus ``extra`` fields). ``nsq_middleware`` writes it; no
    handler builds an error response itself."""

    def __init__(self, status: int, code: str, **extra: Any) -> None:
        super().__init__(f"{status} {code}")
        self.status = status
        self.code = code
        self.extra = extra

    def response(self) -> web.Response:
        return v1_error(self.code, self.status, **self.extra)


class BadQuery(ValueError):
    """The query string is not one Go's url.ParseQuery accepts."""


def _unescape(text: str) -> str:
    """Go's QueryUnescape: "+" is a space, "%XX" a byte; a bad escape is an error."""
    if "%" not in text and "+" not in text:
        return text
    raw = text.encode("utf-8", "surrogateescape")
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == 0x25:  # %
            pair = raw[i + 1 : i + 3]
            if len(pair) != 2 or pair[0] not in _HEX or pair[1] not in _HEX:
                raise BadQuery(f"invalid URL escape {raw[i : i + 3]!r}")
            out.append(int(pair, 16))
            i += 3
        elif c == 0x2B:  # +
            out.append(0x20)
            i += 1
        else:
            out.append(c)
            i += 1
    return out.decode("utf-8", "surrogateescape")


def parse_query(raw: str) -> Args:
    """The arguments of a raw (still escaped) query string; BadQuery as Go would fail."""
    values: Args = {}
    error: BadQuery | None = None
    for pair in raw.split("&"):
        if ";" in pair:
            error = error or BadQuery("invalid semicolon separator in query")
            continue
        if not pair:
            continue
        key, _, value = pair.partition("=")
        try:
            key, value = _unescape(key), _unescape(value)
        except BadQuery as exc:
            error = error or exc
            continue
        values.setdefault(key, []).append(value)
    if error is not None:
        raise error
    return values


def query_args(request: web.Request, log_to: logging.Logger | None = None) -> Args:
    """The request's query as Go's url.ParseQuery reads it; 400 INVALID_REQUEST when it is
    malformed (logged at INFO on ``log_to`` when given, as nsqd does)."""
    try:
        return parse_query(request.rel_url.raw_query_string)
    except BadQuery as exc:
        if log_to is not None:
            log_to.info("failed to parse request params - %s", exc)
        raise HttpError(400, "INVALID_REQUEST") from None


def first(args: Args, name: str) -> str | None:
    """The first value of ``name`` (Go's ``url.Values.Get``), or None when absent."""
    values = args.get(name)
    return values[0] if values else None


def query_arg(request: web.Request, name: str) -> str | None:
    """The first value of a URL query argument, or None when absent."""
    values = request.rel_url.query.getall(name, [])
    return str(values[0]) if values else None


@web.middleware
async def nsq_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map routing errors and crashes to NSQ's JSON errors."""
    try:
        return await handler(request)
    except HttpError as err:
        return err.response()
    except web.HTTPMethodNotAllowed:
        return v1_error("METHOD_NOT_ALLOWED", 405)
    except web.HTTPNotFound:
        return v1_error("NOT_FOUND", 404)
    except web.HTTPRequestEntityTooLarge:
        return v1_error("MSG_TOO_BIG", 413)
    except web.HTTPException as exc:
        if exc.status >= 400:
            return v1_error(exc.reason.upper().replace(" ", "_"), exc.status)
        raise
    except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
        log.debug("bad request %s %s: %s", request.method, request.path, exc)
        return v1_error("INVALID_REQUEST", 400)
    except Exception:
        log.exception("handler crashed: %s %s", request.method, request.path)
        return v1_error("INTERNAL_ERROR", 500)
