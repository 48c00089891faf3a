"""Query strings and numbers read the way nsqd (Go) reads them, for the HTTP API.

nsqd parses a query with Go's ``url.ParseQuery``: pairs split on ``&``, a pair holding
``;`` is an error, ``+`` is a space, ``%`` must be followed by two hex digits. Any error
makes the endpoints that read arguments answer 400 ``INVALID_REQUEST``; the first value
of a repeated key wins. Numbers are ``strconv.ParseInt(s, 10, 64)``: an optional sign and
ASCII digits, nothing else (Python's ``int()`` would also take spaces, ``_`` and other
scripts' digits). Imports only the standard library.
"""

from __future__ import annotations

import re

_HEX = frozenset(b"0123456789abcdefABCDEF")
_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = (-(1 << 63), (1 << 63) - 1)

# nsqd's boolParams: exactly these four spellings.
BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}


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


def parse_query(raw: str) -> dict[str, list[str]]:
    """The arguments of a raw (still escaped) query string; BadQuery as Go would fail."""
    values: dict[str, list[str]] = {}
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


def parse_int64(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64), or None when it would fail."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    if not _INT64[0] <= value <= _INT64[1]:
        return None
    return value
