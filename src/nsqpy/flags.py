"""Command-line flags in NSQ's style, mapped onto an options dataclass.

NSQ's daemons use Go's flag package: ``-name value``, ``--name value``, ``--name=value``,
booleans as ``--name`` or ``--name=false``, durations in Go syntax (``250ms``, ``1m30s``),
repeatable flags, and a ``--config`` TOML file whose keys are the flag names with ``-``
turned into ``_``. A bad value exits with status 2 and a message naming flag and value,
never a traceback. Imports only the standard library and nsqpy's options/durations.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nsqpy.durations import parse_duration
from nsqpy.errors import ConfigError


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
        return int(round(parse_duration(str(raw)) * 1000))
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


def build_parser(prog: str, description: str, flags: Sequence[Flag]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False)
    parser.add_argument("-config", "--config", default="", help="path to config file (TOML)")
    parser.add_argument("-version", "--version", action="store_true", help="print version string")
    for flag in flags:
        names = [f"-{flag.name}", f"--{flag.name}"]
        if flag.kind == "bool":
            parser.add_argument(*names, dest=flag.field, nargs="?", const="true", default=None, help=flag.help)
        elif flag.kind in ("list", "float_list"):
            parser.add_argument(*names, dest=flag.field, action="append", default=None, help=flag.help)
        else:
            parser.add_argument(*names, dest=flag.field, default=None, help=flag.help)
    return parser


def parse_flags(
    factory: Callable[[], Any],
    flags: Sequence[Flag],
    argv: Sequence[str],
    *,
    prog: str,
    description: str,
    version: str,
) -> Any:
    """Parse ``argv`` (and ``--config``) into a new options object; exits 2 on bad input."""
    parser = build_parser(prog, description, flags)
    ns = parser.parse_args(list(argv))
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
                    raise ConfigError(f"invalid value {raw!r} for flag --{flag.name}: {exc}") from None
    except ConfigError as exc:
        parser.error(str(exc))
    return opts
