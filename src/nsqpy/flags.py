"""Command-line flags in NSQ's style, mapped onto an options dataclass.

NSQ's daemons use Go's flag package: ``-name value``, ``--name value``, ``--name=value``,
booleans as ``--name`` or ``--name=false``, durations in Go syntax (``250ms``, ``1m30s``),
repeatable flags, and a ``--config`` TOML file whose keys are the flag names with ``-``
turned into ``_``. A bad value exits with status 2 and one line naming flag and value,
never a traceback or argparse's usage dump. ``-h``/``--help`` prints the same Go-style help
as NSQ's utilities (``tools.flagset.format_help``: one entry per flag, sorted, metavar and
default shown). Also owns ``check_host_port``, the start-up check of ``<addr>:<port>`` flags.
Imports only the standard library, nsqpy's durations/errors and the pure ``tools.flagset``.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from nsqpy.durations import format_duration, parse_duration
from nsqpy.errors import ConfigError
from nsqpy.tools.flagset import Opt, format_help


@dataclass(frozen=True)
class Flag:
    """One flag: its NSQ name, the options field it sets, and how its text is read."""

    name: str
    field: str
    kind: str = "str"  # str, int, bool, duration (-> ms), list, float_list
    help: str = ""
    config_key: str = ""


def parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "t", "true", "yes", "on"):
        return True
    if low in ("0", "f", "false", "no", "off"):
        return False
    raise ConfigError(f"invalid boolean value {text!r}")


def _convert(flag: Flag, raw: Any) -> Any:
    kind = flag.kind
    if kind == "bool":
        return raw if isinstance(raw, bool) else parse_bool(str(raw))
    if kind == "int":
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise ConfigError(f"invalid integer {raw!r}")
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"invalid integer {raw!r}") from None
    if kind == "duration":
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return int(raw) // 1_000_000  # TOML durations may be given as Go nanoseconds
        return round(parse_duration(str(raw)) * 1000)
    if kind == "list":
        items = raw if isinstance(raw, list) else [raw]
        return [str(i) for i in items]
    if kind == "float_list":
        items = raw if isinstance(raw, list) else str(raw).split(",")
        try:
            return [float(i) for i in items if str(i).strip()]
        except ValueError:
            raise ConfigError(f"invalid number list {raw!r}") from None
    return str(raw)


class _Parser(argparse.ArgumentParser):
    """argparse without its usage dump: a mistake is one line, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(prog: str, description: str, flags: Sequence[Flag]) -> argparse.ArgumentParser:
    """The argparse parser behind ``parse_flags`` (help text is ``help_text``, not argparse's)."""
    parser = _Parser(prog=prog, description=description, allow_abbrev=False, add_help=False)
    parser.add_argument("-h", "-help", "--help", dest="show_help", action="store_true")
    parser.add_argument("-config", "--config", default="", help="path to config file (TOML)")
    parser.add_argument("-version", "--version", action="store_true", help="print version string")
    for flag in flags:
        names = [f"-{flag.name}", f"--{flag.name}"]
        text = flag.help.replace("%", "%%")  # argparse %-formats help strings
        if flag.kind == "bool":
            parser.add_argument(
                *names, dest=flag.field, nargs="?", const="true", default=None, help=text
            )
        elif flag.kind in ("list", "float_list"):
            parser.add_argument(*names, dest=flag.field, action="append", default=None, help=text)
        else:
            parser.add_argument(*names, dest=flag.field, default=None, help=text)
    return parser


def _as_opt(flag: Flag, defaults: Any) -> Opt:
    """A daemon flag as the utilities' ``Opt``, with its default rendered as Go shows it."""
    if not hasattr(defaults, flag.field):  # a deprecated flag nothing reads
        return Opt(flag.name, flag.field, flag.kind, flag.help, default_text="")
    value = getattr(defaults, flag.field)
    if flag.kind == "bool":
        return Opt(flag.name, flag.field, "bool", flag.help, default_text="true" if value else "")
    if flag.kind == "duration":
        text = format_duration(value / 1000) if isinstance(value, int) and value else ""
        return Opt(flag.name, flag.field, "duration", flag.help, default_text=text)
    if flag.kind in ("list", "float_list"):
        return Opt(flag.name, flag.field, "list", flag.help, default_text="")
    return Opt(flag.name, flag.field, flag.kind, flag.help)


def help_text(prog: str, description: str, flags: Sequence[Flag], defaults: Any) -> str:
    """``--help``: the utilities' Go-style layout, ``--config`` and ``--version`` included."""
    opts = [Opt("config", "", "str", "path to config file (TOML)", metavar="string")]
    opts += [_as_opt(flag, defaults) for flag in flags]
    return format_help(prog, description, defaults, opts)


def check_host_port(flag: str, address: str, *, need_host: bool = False) -> None:
    """``<addr>:<port>`` (``[v6]:port`` too) with a port in 0-65535, else ConfigError.

    ``need_host`` is for addresses dialled rather than listened on: they need a host and a
    non-zero port.
    """
    host, sep, port = address.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    ok = bool(sep) and port.isdigit() and int(port) <= 65535
    ok = ok and ("[" not in host or bracketed) and (bracketed or ":" not in host)
    if ok and need_host:
        ok = bool(host.strip("[]")) and int(port) > 0
    if not ok or any(c in host for c in "/?#@ "):
        want = "<host>:<port>" if need_host else "<addr>:<port>"
        raise ConfigError(f"--{flag} {address!r} is not {want}")


def parse_flags(
    factory: Callable[[], Any],
    flags: Sequence[Flag],
    argv: Sequence[str],
    *,
    prog: str,
    description: str,
    version: str,
    validate: Callable[[Any], None] | None = None,
) -> Any:
    """Parse ``argv`` (and ``--config``) into a new options object; exits 2 on bad input,
    including a ConfigError from ``validate`` (the checks across flags), printed as
    ``<prog>: error: <reason>``."""
    parser = build_parser(prog, description, flags)
    ns = parser.parse_args(list(argv))
    if ns.show_help:
        sys.stdout.write(help_text(prog, description, flags, factory()))
        sys.exit(0)
    if ns.version:
        print(version)
        sys.exit(0)
    opts = factory()
    by_key = {(f.config_key or f.name.replace("-", "_")): f for f in flags}
    try:
        if ns.config:
            try:
                with open(ns.config, "rb") as fh:
                    doc = tomllib.load(fh)
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"failed to load config file {ns.config}: {exc}") from None
            for key, raw in doc.items():
                flag = by_key.get(key)
                if flag is None:
                    continue
                setattr(opts, flag.field, _convert(flag, raw))
        for flag in flags:
            raw = getattr(ns, flag.field)
            if raw is None:
                continue
            if flag.kind in ("list", "float_list"):
                values: list[Any] = []
                for item in raw:
                    values.extend(_convert(flag, item))
                setattr(opts, flag.field, values)
            else:
                try:
                    setattr(opts, flag.field, _convert(flag, raw))
                except ConfigError as exc:
                    raise ConfigError(
                        f"invalid value {raw!r} for flag --{flag.name}: {exc}"
                    ) from None
    except ConfigError as exc:
        parser.error(str(exc))
    if validate is not None:
        try:
            validate(opts)
        except ConfigError as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            sys.exit(2)
    return opts
