"""What a flag's text means: the kinds of values, booleans, durations, ``host:port``, log levels.

The one place each of these is read, for every daemon and tool: ``parse_bool`` is Go's
``strconv.ParseBool`` (NSQ's flags are Go flags), ``split_host_port`` is Go's
``net.SplitHostPort``, ``LOG_LEVELS`` is NSQ's five level names. ``from_text`` reads a
command-line value by its kind, ``from_config`` a ``--config`` file's (TOML) value; a bad
one is a ``FlagError`` naming the flag and the value in one line. Pure: imports only the
standard library, ``nsqpy.durations`` and ``nsqpy.errors``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

from nsqpy.durations import parse_duration
from nsqpy.errors import ConfigError

# str, int, float, bool: as named. duration: a Go duration (90s, 1m30s) in float seconds (the
# tools); duration_ms: the same in int milliseconds (the daemons' ``*_ms`` fields). list: a
# repeatable flag, one string each time; float_list: repeatable, each comma-separated numbers.
Kind = Literal["str", "int", "float", "bool", "duration", "duration_ms", "list", "float_list"]
KINDS: tuple[str, ...] = get_args(Kind)
LIST_KINDS = ("list", "float_list")

# NSQ's log levels (lg.ParseLogLevel, case-insensitive) as Python logging levels; NSQ's own
# number for a level (GET /config/log_level) is this // 10.
LOG_LEVELS = {"debug": 10, "info": 20, "warn": 30, "error": 40, "fatal": 50}

_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


class FlagError(ConfigError):
    """A mistake on the command line or in a ``--config`` file: an unknown flag, a missing or
    malformed value. One line naming the flag and the value."""


def parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``: 1 t T TRUE true True, 0 f F FALSE false False."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("not a boolean (true, false, 1, 0)")


def log_level_number(name: str) -> int:
    """NSQ's number for a log level name (debug 1 ... fatal 5; info for an unknown name)."""
    return LOG_LEVELS.get(name.lower(), 20) // 10


def split_host_port(address: str) -> tuple[str, str]:
    """Go's ``net.SplitHostPort``: (host, port) of ``host:port`` or ``[host]:port``, the
    brackets removed; ValueError where Go reports an error. The port is not checked."""
    last = address.rfind(":")
    if last < 0:
        raise ValueError(f"{address!r}: missing port in address")
    start, end = 0, 0
    if address.startswith("["):
        close = address.find("]")
        if close < 0:
            raise ValueError(f"{address!r}: missing ']' in address")
        if close + 1 != last:
            too_many = close + 1 < len(address) and address[close + 1] == ":"
            reason = "too many colons" if too_many else "missing port"
            raise ValueError(f"{address!r}: {reason} in address")
        host = address[1:close]
        start, end = 1, close + 1
    else:
        host = address[:last]
        if ":" in host:
            raise ValueError(f"{address!r}: too many colons in address")
    if "[" in address[start:] or "]" in address[end:]:
        raise ValueError(f"{address!r}: unexpected bracket in address")
    return host, address[last + 1 :]


def check_host_port(flag: str, address: str, *, need_host: bool = False) -> tuple[str, int]:
    """(host, port) of an ``<addr>:<port>`` flag value (``[v6]:port`` too, host "" allowed)
    with a port in 0-65535; ConfigError naming the flag otherwise.

    ``need_host`` is for addresses dialled rather than listened on: they need a host and a
    non-zero port.
    """
    try:
        host, port = split_host_port(address)
    except ValueError:
        host, port = "", ""
    ok = port.isascii() and port.isdigit() and int(port) <= 65535
    ok = ok and not any(c in host for c in "/?#@ ")
    if ok and need_host:
        ok = bool(host) and int(port) > 0
    if not ok:
        want = "<host>:<port>" if need_host else "<addr>:<port>"
        raise ConfigError(f"--{flag} {address!r} is not {want}")
    return host, int(port)


def etcd_endpoints(text: str) -> list[str]:
    """The ``host:port`` members of an ``--etcd-endpoints`` value (comma-separated; an
    ``http://`` prefix, as etcdctl takes, is dropped)."""
    out = []
    for item in text.split(","):
        item = item.strip()
        item = item.removeprefix("http://")
        if item:
            out.append(item)
    return out


def check_endpoints(flag: str, text: str) -> None:
    """Every member of ``--etcd-endpoints`` is a dialled ``<host>:<port>``."""
    if text.strip() and not etcd_endpoints(text):
        raise ConfigError(f"--{flag} {text!r} names no endpoint")
    for item in etcd_endpoints(text):
        check_host_port(flag, item, need_host=True)


def check_cluster_id(flag: str, value: str) -> None:
    """A cluster id is one etcd key segment: no ``/``, spaces or control characters."""
    if (
        not value
        or len(value) > 255
        or value in (".", "..")
        or any(c == "/" or c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value)
    ):
        raise ConfigError(f"--{flag} {value!r} is not a valid cluster id")


def listen_host_port(flag: str, address: str) -> tuple[str, int]:
    """``check_host_port`` for an address listened on: an empty host is every interface."""
    host, port = check_host_port(flag, address)
    return host or "0.0.0.0", port


def _float_list(text: str) -> list[float]:
    return [float(item) for item in text.split(",") if item.strip()]


_READERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "list": str,
    "int": lambda text: int(text, 10),
    "float": float,
    "bool": parse_bool,
    "duration": parse_duration,
    "duration_ms": lambda text: round(parse_duration(text) * 1000),
    "float_list": _float_list,
}
_NOT_A = {"int": "not an integer", "float": "not a number", "float_list": "not a number"}


def from_text(kind: str, text: str, what: str) -> Any:
    """The value of ``text`` for a flag of ``kind`` (a ``list`` item stays a string, a
    ``float_list`` item gives a list); ``what`` names the flag in the FlagError
    (``flag --max-in-flight``)."""
    try:
        return _READERS[kind](text)
    except ConfigError as exc:  # a bad duration: its message says what a duration looks like
        raise FlagError(f'invalid value "{text}" for {what}: {exc}') from None
    except ValueError as exc:
        reason = _NOT_A.get(kind, str(exc))
        raise FlagError(f'invalid value "{text}" for {what}: {reason}') from None


def from_config(kind: str, raw: object, what: str) -> Any:
    """A ``--config`` file's value: TOML's own booleans, integers and lists are taken as they
    are (a duration may be an integer of nanoseconds, as NSQ's config files write them);
    anything else is read as its text would be on the command line."""
    if kind in LIST_KINDS:
        items = raw if isinstance(raw, list) else [raw]
        if kind == "list":
            return [str(item) for item in items]
        return [x for item in items for x in _config_scalar(kind, item, what)]
    return _config_scalar(kind, raw, what)


def _config_scalar(kind: str, raw: object, what: str) -> Any:
    if isinstance(raw, bool):
        if kind == "bool":
            return raw
    elif isinstance(raw, int | float):
        if kind == "int" and isinstance(raw, int):
            return raw
        if kind == "duration_ms":
            return int(raw) // 1_000_000
        if kind == "duration":
            return raw / 1e9
        if kind == "float":
            return float(raw)
        if kind == "float_list":
            return [float(raw)]
    return from_text(kind, str(raw), what)
