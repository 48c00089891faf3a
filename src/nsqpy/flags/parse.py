"""The one command-line parser of the daemons, the tools and ``nsqpy run``: Go's flag rules.

NSQ's programs use Go's ``flag`` package, and so does this parser: ``-name value``,
``--name value``, ``--name=value``; booleans as ``--name`` or ``--name=false`` (never a
separate value); a repeated flag collects a list; ``-h``/``--help`` and ``--version`` end the
parse. Values are read as they are met (``values.from_text``), so a bad one is reported
first. A program that takes ``--config`` (the daemons) names a TOML file whose keys are the
options' config keys; its values are set first and the command line wins over them, a
repeated flag replacing the file's list.

``parse_into`` fills an options object and reports what to do (``Parsed``);
``parse_flags`` is the daemons' shell around it: help, version, the program's ``validate``,
and every mistake as one line ``<prog>: error: <reason>`` with exit status 2. (The tools'
shell is ``tools.common.run_tool``.) Imports only the standard library, ``errors`` and
``flags``' own modules.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from nsqpy.errors import ConfigError
from nsqpy.flags.declare import Option, declared
from nsqpy.flags.usage import format_help
from nsqpy.flags.values import LIST_KINDS, FlagError, from_config, from_text, parse_bool

T = TypeVar("T")


class UnknownArgument(FlagError):
    """An argument that is no declared flag (``--nope``) or no flag at all (``stray``);
    ``argument`` is it as given."""

    def __init__(self, message: str, argument: str) -> None:
        super().__init__(message)
        self.argument = argument


@dataclass
class Parsed:
    """The outcome of a parse: ``action`` is ``run``, ``help`` or ``version``; ``given`` the
    flags named on the command line; ``config`` the ``--config`` file read, if any."""

    action: str
    given: set[str] = field(default_factory=set)
    config: str = ""


def parse_into(
    target: Any, options: Sequence[Option], argv: Sequence[str], *, config_file: bool = False
) -> Parsed:
    """Parse ``argv`` into the options object ``target``; raises ``FlagError`` (and
    ``ConfigError`` for a ``--config`` file that cannot be read)."""
    by_name = {o.name: o for o in options}
    given: set[str] = set()
    config = ""
    values: list[tuple[Option, Any]] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            if i < len(args):
                raise _unexpected(args[i])
            break
        if not arg.startswith("-") or arg == "-":
            raise _unexpected(arg)
        body = arg[2:] if arg.startswith("--") else arg[1:]
        name, has_value, value = body.partition("=")
        if not name or name.startswith("-") or name.startswith("="):
            raise FlagError(f"bad flag syntax: {arg}")
        if name in ("h", "help"):
            return Parsed("help", given)
        if name == "version" and name not in by_name:
            if has_value and not _bool_flag(value, name):
                continue
            return Parsed("version", given)
        opt = by_name.get(name)
        if opt is None and not (config_file and name == "config"):
            raise UnknownArgument(f"flag provided but not defined: --{name} (see --help)", arg)
        if opt is not None and opt.kind == "bool":
            values.append((opt, _bool_flag(value, name) if has_value else True))
            given.add(name)
            continue
        if not has_value:
            if i >= len(args):
                raise FlagError(f"flag needs an argument: --{name}")
            value = args[i]
            i += 1
        if opt is None:
            config = value
        else:
            values.append((opt, from_text(opt.kind, value, f"flag --{name}")))
        given.add(name)
    if config:
        load_config(target, options, config)
    _apply(target, values)
    return Parsed("run", given, config)


def _unexpected(arg: str) -> UnknownArgument:
    return UnknownArgument(f"unexpected argument {arg!r} (flags only; see --help)", arg)


def _bool_flag(text: str, name: str) -> bool:
    try:
        return parse_bool(text)
    except ValueError as exc:
        raise FlagError(f'invalid value "{text}" for flag --{name}: {exc}') from None


def _apply(target: Any, values: Sequence[tuple[Option, Any]]) -> None:
    """Set the flags' values: the last of a flag wins; a repeated one collects a list."""
    lists: dict[str, list[Any]] = {}
    for opt, value in values:
        if opt.kind == "float_list":
            lists.setdefault(opt.field, []).extend(value)
        elif opt.kind in LIST_KINDS:
            lists.setdefault(opt.field, []).append(value)
        else:
            setattr(target, opt.field, value)
    for name, items in lists.items():
        setattr(target, name, items)


def load_config(target: Any, options: Sequence[Option], path: str) -> None:
    """Set the options a ``--config`` TOML file names (by config key; the flag name with
    ``_`` is read too, as nsqpy always has); other keys are ignored, as NSQ does."""
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"failed to load config file {path}: {exc}") from None
    by_key = {o.name.replace("-", "_"): o for o in options}
    by_key.update({o.key: o for o in options})
    for key, raw in doc.items():
        opt = by_key.get(key)
        if opt is not None:
            setattr(target, opt.field, from_config(opt.kind, raw, f"{key} in {path}"))


def _fail(prog: str, message: str) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_flags(
    cls: type[T],
    argv: Sequence[str],
    *,
    prog: str,
    description: str,
    version: str,
    validate: Callable[[T], None],
) -> T:
    """A daemon's command line (and ``--config``) into a new ``cls``; ``--help`` and
    ``--version`` print and exit 0; a mistake, or a ConfigError from ``validate``, exits 2
    with one line ``<prog>: error: <reason>``."""
    options = declared(cls)
    opts = cls()
    try:
        parsed = parse_into(opts, options, argv, config_file=True)
    except UnknownArgument as exc:  # the daemons' wording since their first release
        _fail(prog, f"unrecognized arguments: {exc.argument} (see --help)")
    except ConfigError as exc:
        _fail(prog, f"{exc} (see --help)")
    if parsed.action == "help":
        sys.stdout.write(format_help(prog, description, cls(), options, config_file=True))
        sys.exit(0)
    if parsed.action == "version":
        print(version)
        sys.exit(0)
    try:
        validate(opts)
    except ConfigError as exc:
        _fail(prog, str(exc))
    return opts
