"""The ``nsqlookupd`` program: flags -> NsqLookupdOptions -> NsqLookupd, until SIGTERM/SIGINT.

A thin shell (``nsqpy.daemon.DaemonProgram``): flag parsing (SPEC 5.2; the flags are
declared on ``NsqLookupdOptions``), logging set-up, the event loop and a clean exit with
status 0 on a signal. Bad flags exit with status 2 and a message, a listener that cannot
bind with status 1; never a traceback. Re-exports ``NsqLookupd`` and ``NsqLookupdOptions``
for callers.
"""

from __future__ import annotations

import sys

from nsqpy.daemon import DaemonProgram
from nsqpy.lookupd.daemon import NsqLookupd
from nsqpy.lookupd.options import NsqLookupdOptions, validate

DESCRIPTION = "nsqlookupd (nsqpy): the discovery daemon that knows which nsqd has which topic"
PROGRAM = DaemonProgram("nsqlookupd", DESCRIPTION, NsqLookupdOptions, validate, NsqLookupd)
FLAGS = PROGRAM.flags  # every flag, declared on NsqLookupdOptions
parse_args = PROGRAM.parse_args
main = PROGRAM.main

__all__ = ["FLAGS", "NsqLookupd", "NsqLookupdOptions", "main", "parse_args"]


if __name__ == "__main__":
    sys.exit(main())
