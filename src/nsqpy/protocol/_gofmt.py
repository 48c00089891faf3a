"""Go formatting and parsing quirks that show on NSQ's wire, reproduced byte for byte.

Owns: ``%q`` quoting (strconv.Quote) of raw bytes, nsqd's ``ByteToBase10`` with its uint64
wrap-around, Go's int64 duration overflow, error classes whose description carries raw
bytes (Go prints ``%s`` of a byte slice verbatim), and JSON as encoding/json reads it into
a struct (``go_json``). Imports only the standard library and nsqpy.errors.
"""

from __future__ import annotations

import json
from typing import Any

from nsqpy.errors import InvalidError

_U64 = (1 << 64) - 1
_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


class JsonPairs(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in order, duplicates kept (the code reading it
    decides which one wins, as Go's decoder does field by field)."""


def reject_json_constant(name: str) -> Any:
    """``parse_constant`` for ``json.loads``: NaN and ±Infinity are not JSON to Go."""
    raise ValueError(f"invalid JSON constant {name}")


def go_json(body: bytes) -> Any:
    """``body`` as Go's encoding/json reads it: invalid UTF-8 replaced, objects as
    ``JsonPairs``, no NaN or Infinity; ValueError or RecursionError when it is not JSON."""
    return json.loads(
        body.decode("utf-8", "replace"),
        object_pairs_hook=JsonPairs,
        parse_constant=reject_json_constant,
    )


def go_quote(raw: bytes | bytearray) -> str:
    """``fmt.Sprintf("%q", string(raw))``: Go's strconv.Quote of possibly invalid UTF-8."""
    text = bytes(raw).decode("utf-8", "surrogateescape")
    out = ['"']
    for ch in text:
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:  # a byte that is not valid UTF-8
            out.append(f"\\x{o - 0xDC00:02x}")
        elif ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= o < 0x7F:
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    out.append('"')
    return "".join(out)


def parse_base10(raw: bytes | bytearray) -> int | None:
    """nsqd's ``ByteToBase10``: ASCII digits only (empty = 0), wrapping modulo 2**64.

    Returns None when a byte is not a digit (``-`` included).
    """
    if not raw:
        return 0
    if not raw.isdigit():
        return None
    # 10**k is a multiple of 2**64 for k >= 64: only the last 64 digits matter.
    return int(raw[-64:]) & _U64


def as_int64(n: int) -> int:
    """Reinterpret the low 64 bits of ``n`` as a signed int64 (Go conversion)."""
    n &= _U64
    return n - (1 << 64) if n >> 63 else n


def ms_to_duration_ns(ms_u64: int) -> int:
    """``time.Duration(ms) * time.Millisecond`` with Go's int64 overflow."""
    return as_int64(as_int64(ms_u64) * 1_000_000)


class RawInvalidError(InvalidError):
    """E_INVALID whose description ends with raw bytes from the peer, sent back unchanged."""

    def __init__(self, prefix: str, raw: bytes | bytearray, suffix: str = "") -> None:
        raw = bytes(raw)
        super().__init__(prefix + raw.decode("utf-8", "replace") + suffix)
        self._raw = prefix.encode() + raw + suffix.encode()

    def wire(self) -> bytes:
        return self.code.encode() + b" " + self._raw
