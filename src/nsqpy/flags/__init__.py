"""Flags declared once: every option of every daemon and tool, and the one parser that reads them.

An option is declared on the field of its program's options dataclass with ``option(...)``
(``declare``): flag name, default, help text, kind, per-value check, ``--config``/``/config``
key. From those declarations come the command-line parser (``parse``: Go's flag rules,
``--config`` TOML files), ``--help`` and docs/flags.md (``usage``), the ``GET /config``
answers (``config_options``, ``api_value``) and the checks (``check_options``). ``values``
holds what a flag's text means, once: Go's booleans, durations, ``host:port``, NSQ's log
levels.

Layout: ``values`` <- ``declare`` <- ``usage`` <- ``parse``; nothing here imports a daemon,
a tool, asyncio or the network (only the standard library, ``nsqpy.errors`` and
``nsqpy.durations``), so ``--help`` stays instant.
"""

from __future__ import annotations

from nsqpy.flags.declare import (
    Check,
    Option,
    all_of,
    api_value,
    check_options,
    config_options,
    declared,
    each,
    log_level_check,
    must,
    option,
    shown_log_level,
    unless_empty,
)
from nsqpy.flags.parse import Parsed, UnknownArgument, load_config, parse_flags, parse_into
from nsqpy.flags.usage import format_help, reference
from nsqpy.flags.values import (
    KINDS,
    LOG_LEVELS,
    FlagError,
    Kind,
    check_cluster_id,
    check_endpoints,
    check_host_port,
    etcd_endpoints,
    from_config,
    from_text,
    listen_host_port,
    log_level_number,
    parse_bool,
    split_host_port,
)

__all__ = [
    "KINDS",
    "LOG_LEVELS",
    "Check",
    "FlagError",
    "Kind",
    "Option",
    "Parsed",
    "UnknownArgument",
    "all_of",
    "api_value",
    "check_cluster_id",
    "check_endpoints",
    "check_host_port",
    "check_options",
    "config_options",
    "declared",
    "each",
    "etcd_endpoints",
    "format_help",
    "from_config",
    "from_text",
    "listen_host_port",
    "load_config",
    "log_level_check",
    "log_level_number",
    "must",
    "option",
    "parse_bool",
    "parse_flags",
    "parse_into",
    "reference",
    "shown_log_level",
    "split_host_port",
    "unless_empty",
]
