"""An option declared once: ``option(...)`` on the field of an options dataclass it fills.

Each daemon and tool keeps one flat options dataclass (``NsqdOptions``, ``TailOptions``,
...); every field that is a flag says so where it is defined::

    msg_timeout_ms: int = option(
        "msg-timeout", 60_000, "default duration to wait before auto-requeing a message",
        kind="duration_ms",
    )

with its flag name, default, help text, kind (how its text is read, inferred from the
default unless it is a duration or a list of numbers), an optional per-value ``check``, its
key in ``--config`` files and at ``GET /config/<key>``. The dataclass stays the typed
container (mypy sees an ``int``; construction and defaults are plain dataclass ones), and
``declared(cls)`` reads the declarations back, as ``Option`` records, for the parser,
``--help``, ``/config``, ``check_options`` and docs/flags.md. Checks that involve several
options stay in each program's ``validate``. Imports only the standard library, ``errors``
and ``flags.values``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, TypedDict, TypeVar, Unpack, overload

from nsqpy.errors import ConfigError
from nsqpy.flags.values import KINDS, LOG_LEVELS, Kind, log_level_number

T = TypeVar("T")
# A check of one option's value: given the flag name and the value, raises (ConfigError for
# the daemons; a tool may raise its own ToolError or FlagError to choose its exit status).
Check = Callable[[str, Any], object]

_METADATA_KEY = "nsqpy.flags"


@dataclass(frozen=True)
class Option:
    """One flag: its NSQ name, the options field it fills, its kind and help text.

    ``check`` tests the value after parsing (``check_options``). ``config_key`` is the key in
    ``--config`` files and at ``/config`` (NSQ's ``cfg`` name; the flag name with ``_`` when
    empty); ``api`` says whether ``GET /config/<key>`` answers it (nsqd: only NSQ 1.3.0's own
    options); ``shown`` turns the value into what ``/config`` answers (by default durations
    in nanoseconds, as Go marshals them). ``default_text`` replaces the default shown in
    ``--help``, ``metavar`` the value placeholder; ``factory`` is set when the default is
    computed at start-up (docs/flags.md names it instead of this machine's value).
    """

    name: str
    field: str
    kind: Kind = "str"
    help: str = ""
    check: Check | None = None
    config_key: str = ""
    api: bool = True
    shown: Callable[[Any], object] | None = None
    default_text: str | None = None
    metavar: str = ""
    factory: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown flag kind {self.kind!r}")

    @property
    def key(self) -> str:
        """The key in ``--config`` files and at ``/config``."""
        return self.config_key or self.name.replace("-", "_")


def _kind_of(default: object) -> Kind:
    for python_type, kind in ((bool, "bool"), (int, "int"), (float, "float"), (list, "list")):
        if isinstance(default, python_type):
            return kind  # type: ignore[return-value]  # one of the literals above
    return "str"


class OptionDetails(TypedDict, total=False):
    """What ``option`` takes beyond name, default, help and kind: ``Option``'s fields of the
    same names, with their defaults."""

    check: Check | None
    config_key: str
    api: bool
    shown: Callable[[Any], object] | None
    default_text: str | None
    metavar: str


@overload
def option(
    name: str,
    default: T,
    help: str,
    *,
    kind: Kind | None = None,
    **details: Unpack[OptionDetails],
) -> T: ...


@overload
def option(
    name: str,
    *,
    factory: Callable[[], T],
    help: str,
    kind: Kind | None = None,
    **details: Unpack[OptionDetails],
) -> T: ...


def option(
    name: str,
    default: Any = MISSING,
    help: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    kind: Kind | None = None,
    **details: Unpack[OptionDetails],
) -> Any:
    """A dataclass field that is the flag ``name`` (see the module doc). A list default is
    copied for each instance; ``factory`` computes the default instead; ``kind`` is
    inferred from the default when not given."""
    declaration = Option(
        name,
        "",  # the field's name, filled in by ``declared``
        kind or _kind_of(default),
        help,
        factory=factory,
        **details,
    )
    metadata = {_METADATA_KEY: declaration}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    if isinstance(default, list):
        return field(default_factory=functools.partial(list, default), metadata=metadata)
    return field(default=default, metadata=metadata)


_DECLARED: dict[type, tuple[Option, ...]] = {}


def declared(cls: type) -> tuple[Option, ...]:
    """The options declared on the dataclass ``cls``, in field order."""
    found = _DECLARED.get(cls)
    if found is None:
        found = tuple(
            replace(f.metadata[_METADATA_KEY], field=f.name)
            for f in fields(cls)
            if isinstance(f.metadata.get(_METADATA_KEY), Option)
        )
        _DECLARED[cls] = found
    return found


def check_options(opts: object) -> None:
    """Run every declared ``check`` on ``opts``, in field order; the first failure raises."""
    for opt in declared(type(opts)):
        if opt.check is not None:
            opt.check(opt.name, getattr(opts, opt.field))


def config_options(cls: type) -> Mapping[str, Option]:
    """``GET /config/<key>``: the declared options it answers, by key."""
    return {opt.key: opt for opt in declared(cls) if opt.api}


def api_value(opt: Option, value: object) -> object:
    """What ``/config`` answers for ``value``: ``opt.shown(value)``, durations in Go's
    nanoseconds, anything else as it is."""
    if opt.shown is not None:
        return opt.shown(value)
    if opt.kind == "duration_ms" and isinstance(value, int):
        return value * 1_000_000
    return value


# ---- checks -------------------------------------------------------------------------------
def must(
    test: Callable[[Any], bool], message: str, error: Callable[[str], Exception] = ConfigError
) -> Check:
    """A check: ``test(value)`` holds, or ``error(message)`` is raised, with ``{flag}`` and
    ``{value}`` (``{value!r}``) in ``message`` filled in."""

    def check(flag: str, value: Any) -> None:
        if not test(value):
            raise error(message.format(flag=flag, value=value))

    return check


def each(check: Check) -> Check:
    """``check`` applied to every item of a list option."""

    def check_items(flag: str, values: Any) -> None:
        for value in values:
            check(flag, value)

    return check_items


def unless_empty(check: Check) -> Check:
    """``check`` applied only when the option is set (not ``""``, ``0`` or empty)."""

    def check_set(flag: str, value: Any) -> None:
        if value:
            check(flag, value)

    return check_set


def all_of(*checks: Check) -> Check:
    """Several checks, in order."""

    def check_all(flag: str, value: Any) -> None:
        for check in checks:
            check(flag, value)

    return check_all


def log_level_check(error: Callable[[str], Exception] = ConfigError) -> Check:
    """The ``--log-level`` check every program shares (``LOG_LEVELS``' names, any case)."""
    return must(
        lambda value: str(value).lower() in LOG_LEVELS,
        "invalid --{flag} {value!r} (debug, info, warn, error or fatal)",
        error,
    )


def shown_log_level(value: object) -> object:
    """``/config/log_level``: NSQ's number for the level (debug 1 ... fatal 5)."""
    return log_level_number(str(value))
