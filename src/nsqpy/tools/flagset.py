"""Go-style command-line flags for NSQ's utilities, filled into a per-tool options dataclass.

NSQ's tools use Go's ``flag`` package, so this parser follows its rules: ``-name value``,
``--name value``, ``--name=value``; booleans as ``--name`` or ``--name=false``; repeatable
flags (``--topic a --topic b``) collect a list; durations in Go syntax (``250ms``, ``1m30s``)
become seconds. ``-h``/``--help`` and ``--version`` are answered by the caller. Every mistake
raises ``FlagError`` with one line naming the flag and the value, never a traceback.

Pure parsing and formatting: imports only the standard library, ``nsqpy.durations`` and
``nsqpy.errors``; no I/O, no asyncio.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nsqpy.durations import format_duration, parse_duration
from nsqpy.errors import ConfigError

KINDS = ("str", "int", "float", "bool", "duration", "list")
_METAVAR = {
    "str": "string",
    "int": "int",
    "float": "float",
    "duration": "duration",
    "list": "value",
}
_TRUE = ("1", "t", "T", "true", "TRUE", "True")
_FALSE = ("0", "f", "F", "false", "FALSE", "False")


class FlagError(ConfigError):
    """A usage mistake on the command line: unknown flag, missing or malformed value."""


@dataclass(frozen=True)
class Opt:
    """One flag: its NSQ name, the options field it fills, its kind and help text.

    ``default_text`` replaces the default shown in ``--help`` (e.g. for computed defaults);
    ``metavar`` replaces the value placeholder (e.g. ``key,value``).
    """

    name: str
    field: str
    kind: str = "str"
    help: str = ""
    default_text: str | None = None
    metavar: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown flag kind {self.kind!r}")


@dataclass
class Parsed:
    """The outcome of a parse: ``action`` is ``run``, ``help`` or ``version``."""

    action: str
    given: set[str]


def parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("not a boolean (true, false, 1, 0)")


def _convert(opt: Opt, text: str) -> Any:
    try:
        if opt.kind == "int":
            return int(text, 10)
        if opt.kind == "float":
            return float(text)
        if opt.kind == "bool":
            return parse_bool(text)
        if opt.kind == "duration":
            return parse_duration(text)
    except ConfigError as exc:
        raise FlagError(f'invalid value "{text}" for flag --{opt.name}: {exc}') from None
    except ValueError as exc:
        reason = "not an integer" if opt.kind == "int" else "not a number"
        if opt.kind == "bool":
            reason = str(exc)
        raise FlagError(f'invalid value "{text}" for flag --{opt.name}: {reason}') from None
    return text


def parse_into(target: Any, opts: Sequence[Opt], argv: Sequence[str]) -> Parsed:
    """Parse ``argv`` into the dataclass instance ``target``; raises ``FlagError``."""
    by_name = {o.name: o for o in opts}
    given: set[str] = set()
    lists: dict[str, list[str]] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            if i < len(args):
                raise FlagError(f"unexpected argument {args[i]!r} (flags only; see --help)")
            break
        if not arg.startswith("-") or arg == "-":
            raise FlagError(f"unexpected argument {arg!r} (flags only; see --help)")
        body = arg[2:] if arg.startswith("--") else arg[1:]
        name, has_value, value = body.partition("=")
        if not name or name.startswith("-") or name.startswith("="):
            raise FlagError(f"bad flag syntax: {arg}")
        if name in ("h", "help"):
            return Parsed("help", given)
        if name == "version" and name not in by_name:
            if has_value and not parse_bool_or_error(value, name):
                continue
            return Parsed("version", given)
        opt = by_name.get(name)
        if opt is None:
            raise FlagError(f"flag provided but not defined: --{name} (see --help)")
        if opt.kind == "bool":
            setattr(target, opt.field, _convert(opt, value) if has_value else True)
        else:
            if not has_value:
                if i >= len(args):
                    raise FlagError(f"flag needs an argument: --{name}")
                value = args[i]
                i += 1
            if opt.kind == "list":
                lists.setdefault(opt.field, []).append(value)
            else:
                setattr(target, opt.field, _convert(opt, value))
        given.add(name)
    for field, values in lists.items():
        setattr(target, field, values)
    return Parsed("run", given)


def parse_bool_or_error(text: str, name: str) -> bool:
    try:
        return parse_bool(text)
    except ValueError as exc:
        raise FlagError(f'invalid value "{text}" for flag --{name}: {exc}') from None


def _default_of(target: Any, opt: Opt) -> str:
    if opt.default_text is not None:
        return opt.default_text
    value = getattr(target, opt.field)
    if opt.kind == "bool" or value in (None, "", []) or (opt.kind != "str" and value == 0):
        return ""
    if opt.kind == "duration":
        return format_duration(float(value))
    if opt.kind == "str":
        return '"' + str(value).encode("unicode_escape").decode() + '"'
    return f"{value:g}" if isinstance(value, float) else str(value)


def format_help(prog: str, summary: str, target: Any, opts: Sequence[Opt], width: int = 100) -> str:
    """The ``--help`` text: usage, what the tool does, then one entry per flag, sorted."""
    lines = [f"Usage: {prog} [flags]", "", *textwrap.wrap(summary, width), "", "Flags:"]
    entries = [*opts, Opt("version", "", "bool", "print version string")]
    for opt in sorted(entries, key=lambda o: o.name):
        meta = opt.metavar or _METAVAR.get(opt.kind, "")
        dashes = "-" if len(opt.name) == 1 else "--"
        head = f"  {dashes}{opt.name}" + (f" {meta}" if meta and opt.kind != "bool" else "")
        text = opt.help
        default = _default_of(target, opt) if opt.field else ""
        if default:  # kept on one line: the spaces are non-breaking while wrapping
            text += f" (default {default})".replace(" ", "\u00a0")
        lines.append(head)
        wrapped = textwrap.wrap(text, width, initial_indent=" " * 8, subsequent_indent=" " * 8)
        lines.extend(line.replace("\u00a0", " ") for line in wrapped)
    lines.append("  -h, --help")
    lines.append(" " * 8 + "show this help and exit")
    return "\n".join(lines) + "\n"
