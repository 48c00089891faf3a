"""The strftime subset nsq_to_file accepts in ``--datetime-format`` (SPEC 6).

NSQ converts ``%B %b %m %A %a %d %H %I %M %S %Y %y %p %Z %z %%`` to Go layouts and leaves
any other ``%x`` in the output as written; this does the same with Python's ``strftime``
applied one directive at a time, so literal text is never reinterpreted. Local time, as NSQ.
Pure: standard library only.
"""

from __future__ import annotations

from datetime import datetime

DIRECTIVES = frozenset("BbmAadHIMSYypZz")


def strftime(fmt: str, when: datetime) -> str:
    """Format ``when`` (an aware or naive datetime) with NSQ's directive subset."""
    out: list[str] = []
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch == "%" and i + 1 < len(fmt):
            code = fmt[i + 1]
            if code == "%":
                out.append("%")
                i += 2
                continue
            if code in DIRECTIVES:
                out.append(_one(code, when))
                i += 2
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _one(code: str, when: datetime) -> str:
    if code == "p":
        return "PM" if when.hour >= 12 else "AM"  # Go's "PM" layout, not the C locale's
    if code == "Z":
        return when.tzname() or "UTC"
    if code == "z":
        return when.strftime("%z") or "+0000"
    return when.strftime("%" + code)


def local_now(timestamp: float) -> datetime:
    """``timestamp`` (seconds since the epoch) as an aware local datetime."""
    return datetime.fromtimestamp(timestamp).astimezone()
