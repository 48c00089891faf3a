"""Go-style durations (``90s``, ``1h30m``, ``250ms``, ``1.5h``) as used by NSQ's flags.

Pure parsing; imports nothing beyond the standard library and ``nsqpy.errors``.
"""

from __future__ import annotations

import re

from nsqpy.errors import ConfigError

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string; ``0`` alone is allowed; anything else raises ConfigError."""
    raw = text.strip()
    sign = 1.0
    if raw[:1] in ("+", "-"):
        sign = -1.0 if raw[0] == "-" else 1.0
        raw = raw[1:]
    if raw == "0":
        return 0.0
    if not raw:
        raise ConfigError(f"invalid duration {text!r}")
    total = 0.0
    pos = 0
    while pos < len(raw):
        match = _PART.match(raw, pos)
        if match is None:
            raise ConfigError(f"invalid duration {text!r} (expected e.g. 90s, 1h30m, 250ms)")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """Go's rendering of a duration, enough for help texts and /debug (``1m0s``, ``500ms``)."""
    if seconds == 0:
        return "0s"
    if abs(seconds) < 1:
        ms = seconds * 1000
        return f"{ms:g}ms" if abs(ms) >= 1 else f"{seconds * 1e6:g}µs"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{int(hours)}h"
    if hours or minutes:
        out += f"{int(minutes)}m"
    return out + f"{secs:g}s"
