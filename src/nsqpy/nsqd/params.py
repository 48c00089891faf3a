"""Numbers and booleans in query arguments, read the way nsqd (Go) reads them.

(The query itself is read as Go's ``url.ParseQuery`` does by ``nsqpy.httpapi``, shared
with nsqlookupd.) Numbers are ``strconv.ParseInt(s, 10, 64)``: an optional sign and ASCII
digits, nothing else (Python's ``int()`` would also take spaces, ``_`` and other scripts'
digits); booleans are nsqd's four spellings. Imports only the standard library.
"""

from __future__ import annotations

import re

_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = (-(1 << 63), (1 << 63) - 1)

# nsqd's boolParams: exactly these four spellings.
BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}


def parse_int64(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64), or None when it would fail."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    if not _INT64[0] <= value <= _INT64[1]:
        return None
    return value
