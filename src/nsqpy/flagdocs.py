"""docs/flags.md: the flags of every daemon and tool, rendered from their declarations.

``render()`` is the whole page; ``python -m nsqpy.flagdocs`` rewrites docs/flags.md (run it
after changing an option), and tests/test_flag_docs.py fails while the file differs from
``render()``, so the page cannot drift from the code. Imports every program's options (the
top of the layer stack, like ``nsqpy.cli``); nothing imports this module.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nsqpy.cli import RUN_SUMMARY, RunOptions
from nsqpy.flags import declared, reference
from nsqpy.lookupd import app as lookupd_app
from nsqpy.lookupd.options import NsqLookupdOptions
from nsqpy.nsqadmin import app as nsqadmin_app
from nsqpy.nsqadmin.options import NsqAdminOptions
from nsqpy.nsqd import app as nsqd_app
from nsqpy.options import NsqdOptions
from nsqpy.tools import nsq_to_nsq, stat, tail, to_file, to_http, to_nsq

PAGE = Path(__file__).resolve().parents[2] / "docs" / "flags.md"

INTRO = """# Flags

Every flag of nsqpy's daemons and tools, generated from their declarations by
`python -m nsqpy.flagdocs` (do not edit by hand: `tests/test_flag_docs.py` fails when this
page and the code differ). Each option is declared once, on the field of its program's
options dataclass (`nsqpy.flags.option`); the same declaration drives the parser, `--help`,
`--config` files, `GET /config/<key>` and this page.

Flags follow Go's `flag` package, as NSQ's do: `-name value`, `--name value`,
`--name=value`; booleans as `--name` or `--name=false` (Go's `strconv.ParseBool`: `1 t T
TRUE true True 0 f F FALSE false False`); durations in Go syntax (`250ms`, `90s`,
`1m30s`); a repeated flag collects a list. Kinds: `duration` and `duration_ms` are both Go
durations (kept in seconds by the tools, in milliseconds by the daemons); `float_list` also
takes comma-separated numbers. A default computed at start-up names the function that
computes it.
"""


def render() -> str:
    """The whole of docs/flags.md."""
    sections = [
        INTRO,
        reference(
            "nsqd",
            nsqd_app.DESCRIPTION,
            NsqdOptions(),
            declared(NsqdOptions),
            config_file=True,
            config_api=True,
        ),
        reference(
            "nsqlookupd",
            lookupd_app.DESCRIPTION,
            NsqLookupdOptions(),
            declared(NsqLookupdOptions),
            config_file=True,
        ),
        reference(
            "nsqadmin",
            nsqadmin_app.DESCRIPTION,
            NsqAdminOptions(),
            declared(NsqAdminOptions),
            config_file=True,
            config_api=True,
        ),
    ]
    for spec in (tail.SPEC, to_nsq.SPEC, to_file.SPEC, to_http.SPEC, nsq_to_nsq.SPEC, stat.SPEC):
        sections.append(reference(spec.name, spec.summary, spec.options(), declared(spec.options)))
    sections.append(reference("nsqpy run", RUN_SUMMARY, RunOptions(), declared(RunOptions)))
    return "\n".join(sections)


def main() -> int:
    PAGE.write_text(render())
    print(f"wrote {PAGE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
