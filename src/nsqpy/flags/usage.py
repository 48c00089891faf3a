"""What the declarations say to people: ``--help`` text and the flags reference (docs/flags.md).

``format_help`` is the Go-style help of every daemon and tool: usage, what the program
does, then one entry per flag sorted by name (``--config`` and ``--version`` among them),
each with its value placeholder, help text and default as Go's flag package shows it (none
for false, zero, empty and list values), then ``-h, --help``. ``reference`` is a program's
section of docs/flags.md, rendered from the same declarations. Imports only the standard
library, ``nsqpy.durations`` and ``flags``' own modules.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from nsqpy.durations import format_duration
from nsqpy.flags.declare import Option
from nsqpy.flags.values import LIST_KINDS

_METAVAR = {
    "str": "string",
    "int": "int",
    "float": "float",
    "duration": "duration",
    "duration_ms": "duration",
    "list": "value",
    "float_list": "value",
}
CONFIG = Option("config", "", "str", "path to config file (TOML)")
VERSION = Option("version", "", "bool", "print version string")


def default_text(opt: Option, value: Any) -> str:
    """The default as Go's flag package shows it: nothing for false, zero, empty or lists."""
    if opt.default_text is not None:
        return opt.default_text
    if opt.kind in LIST_KINDS or value in (None, "", 0, False):
        return ""
    if opt.kind == "bool":
        return "true"
    if opt.kind == "duration":
        return format_duration(float(value))
    if opt.kind == "duration_ms":
        return format_duration(value / 1000)
    if opt.kind == "str":
        return '"' + str(value).encode("unicode_escape").decode() + '"'
    return f"{value:g}" if isinstance(value, float) else str(value)


def _head(opt: Option) -> str:
    meta = "" if opt.kind == "bool" else opt.metavar or _METAVAR[opt.kind]
    dashes = "-" if len(opt.name) == 1 else "--"
    return f"{dashes}{opt.name}" + (f" {meta}" if meta else "")


def format_help(
    prog: str,
    summary: str,
    defaults: Any,
    options: Sequence[Option],
    *,
    config_file: bool = False,
    width: int = 100,
) -> str:
    """The ``--help`` text; ``defaults`` is a fresh options object."""
    lines = [f"Usage: {prog} [flags]", "", *textwrap.wrap(summary, width), "", "Flags:"]
    entries = [*options, VERSION, *([CONFIG] if config_file else [])]
    for opt in sorted(entries, key=lambda o: o.name):
        text = opt.help
        default = default_text(opt, getattr(defaults, opt.field)) if opt.field else ""
        if default:  # kept on one line: the spaces are non-breaking while wrapping
            text += f" (default {default})".replace(" ", "\u00a0")
        lines.append(f"  {_head(opt)}")
        wrapped = textwrap.wrap(text, width, initial_indent=" " * 8, subsequent_indent=" " * 8)
        lines.extend(line.replace("\u00a0", " ") for line in wrapped)
    lines.append("  -h, --help")
    lines.append(" " * 8 + "show this help and exit")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Plain text as a Markdown table cell (``<addr>`` is no HTML tag)."""
    if text.startswith("`"):
        return text.replace("|", "\\|")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\n", " ")


def reference(
    prog: str,
    summary: str,
    defaults: Any,
    options: Sequence[Option],
    *,
    config_file: bool = False,
    config_api: bool = False,
) -> str:
    """A program's section of docs/flags.md: a Markdown table of its flags, sorted by name.

    ``config_file``: the program reads ``--config`` files (the key column); ``config_api``:
    it answers ``GET /config/<key>`` for the options marked so.
    """
    head = ["Flag", "Kind", "Default"]
    head += ["Config key"] if config_file else []
    head += ["`/config`"] if config_api else []
    rows = [f"## {prog}", "", summary, "", "| " + " | ".join([*head, "Help"]) + " |"]
    rows.append("|" + "---|" * (len(head) + 1))
    for opt in sorted(options, key=lambda o: o.name):
        if opt.factory is not None:
            default = f"computed: `{opt.factory.__name__}()`"
        elif opt.default_text is not None:
            default = opt.default_text
        else:
            shown = default_text(opt, getattr(defaults, opt.field))
            default = f"`{shown}`" if shown else ""
        cells = [f"`{_head(opt)}`", opt.kind, default]
        cells += [f"`{opt.key}`"] if config_file else []
        cells += ["yes" if opt.api else ""] if config_api else []
        rows.append("| " + " | ".join(_cell(c) for c in [*cells, opt.help]) + " |")
    if config_file:
        rows += ["", "Also `--config <file>`: a TOML file of the keys above (the flags win)."]
    return "\n".join(rows) + "\n"
