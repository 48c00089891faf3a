"""The ``nsqlookupd`` program: flags -> NsqLookupdOptions -> NsqLookupd, until SIGTERM/SIGINT.

A thin shell: flag parsing (SPEC 5.2, Go style, ``--config`` TOML; the flags are declared
on ``NsqLookupdOptions``), logging set-up, the event loop (uvloop when installed) and a
clean exit with status 0 on a signal. Bad flags exit with status 2 and a message, a
listener that cannot bind with status 1; never a traceback. Re-exports ``NsqLookupd`` and ``NsqLookupdOptions`` for callers.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from nsqpy import NSQ_VERSION, __version__
from nsqpy.daemon import run, serve_until_signal
from nsqpy.flags import declared, parse_flags
from nsqpy.logs import setup_daemon_logging
from nsqpy.lookupd.daemon import NsqLookupd
from nsqpy.lookupd.options import NsqLookupdOptions, validate

FLAGS = declared(NsqLookupdOptions)  # every flag, declared on NsqLookupdOptions
DESCRIPTION = "nsqlookupd (nsqpy): the discovery daemon that knows which nsqd has which topic"

VERSION_LINE = f"nsqlookupd v{NSQ_VERSION} (nsqpy {__version__}, python {sys.version.split()[0]})"

__all__ = ["FLAGS", "NsqLookupd", "NsqLookupdOptions", "main", "parse_args"]


def parse_args(argv: Sequence[str]) -> NsqLookupdOptions:
    """Flags (and ``--config``) into options; exits 2 with a message when one is bad."""
    return parse_flags(
        NsqLookupdOptions,
        argv,
        prog="nsqlookupd",
        description=DESCRIPTION,
        version=VERSION_LINE,
        validate=validate,
    )


def setup_logging(level: str, prefix: str) -> None:
    """nsqlookupd's log lines (``nsqpy.logs``): prefix, time, level; one line per event."""
    setup_daemon_logging(level, prefix)


async def serve(opts: NsqLookupdOptions) -> None:
    """Run until SIGINT or SIGTERM, then stop cleanly."""
    await serve_until_signal(NsqLookupd(opts))


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging(opts.log_level, opts.log_prefix)
    try:
        run(serve(opts))
    except OSError as exc:
        logging.getLogger("nsqpy.lookupd").error("FATAL: %s", exc)
        return 1
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
