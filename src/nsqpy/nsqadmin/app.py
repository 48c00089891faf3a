"""The ``nsqadmin`` program: flags -> NsqAdminOptions -> NsqAdmin, until SIGTERM/SIGINT.

A thin shell: flag parsing (SPEC 5.3, Go style, ``--config`` TOML; plus nsqpy's
``--stats-sample-interval`` and ``--stats-history-size`` for the built-in graphs),
logging set-up (``nsqpy.logs``: one line per event, so garbage sent to the HTTP port costs
one log line, never a traceback), the event loop (uvloop when installed) and a clean exit with status 0 on a
signal. Bad flags exit with status 2 and a message, a listener that cannot bind with
status 1; never a traceback. Re-exports ``NsqAdmin`` and ``NsqAdminOptions`` so ``nsqpy
run`` can embed the daemon.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from nsqpy import NSQ_VERSION, __version__
from nsqpy.daemon import run, serve_until_signal
from nsqpy.flags import parse_flags
from nsqpy.logs import setup_daemon_logging
from nsqpy.nsqadmin.options import FLAGS, NsqAdminOptions, validate
from nsqpy.nsqadmin.server import NsqAdmin

DESCRIPTION = "nsqadmin (nsqpy): web UI and JSON API to administer an NSQ cluster"
VERSION_LINE = f"nsqadmin v{NSQ_VERSION} (nsqpy {__version__}, python {sys.version.split()[0]})"

__all__ = ["FLAGS", "NsqAdmin", "NsqAdminOptions", "main", "parse_args"]


def parse_args(argv: Sequence[str]) -> NsqAdminOptions:
    """Flags (and ``--config``) into options; exits 2 with a message when one is bad."""
    return parse_flags(
        NsqAdminOptions,
        argv,
        prog="nsqadmin",
        description=DESCRIPTION,
        version=VERSION_LINE,
        validate=validate,
    )


async def serve(opts: NsqAdminOptions) -> None:
    await serve_until_signal(NsqAdmin(opts))


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    setup_daemon_logging(opts.log_level, opts.log_prefix)
    try:
        run(serve(opts))
    except OSError as exc:
        logging.getLogger("nsqpy").error(
            "FATAL: failed to listen on %s - %s", opts.http_address, exc
        )
        return 1
    except KeyboardInterrupt:
        return 0
    return 0
