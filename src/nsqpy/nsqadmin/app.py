"""The ``nsqadmin`` program: flags -> NsqAdminOptions -> NsqAdmin, until SIGTERM/SIGINT.

A thin shell (``nsqpy.daemon.DaemonProgram``): flag parsing (SPEC 5.3; plus nsqpy's
``--stats-sample-interval`` and ``--stats-history-size`` for the built-in graphs), logging
set-up (``nsqpy.logs``: one line per event, so garbage sent to the HTTP port costs one log
line, never a traceback), the event loop and a clean exit with status 0 on a signal. Bad
flags exit with status 2 and a message, a listener that cannot bind with status 1; never a
traceback. Re-exports ``NsqAdmin`` and ``NsqAdminOptions`` so ``nsqpy run`` can embed the
daemon.
"""

from __future__ import annotations

from nsqpy.daemon import DaemonProgram
from nsqpy.nsqadmin.options import FLAGS, NsqAdminOptions, validate
from nsqpy.nsqadmin.server import NsqAdmin

DESCRIPTION = "nsqadmin (nsqpy): web UI and JSON API to administer an NSQ cluster"


def _cannot_listen(opts: NsqAdminOptions, exc: OSError) -> str:
    return f"failed to listen on {opts.http_address} - {exc}"


PROGRAM = DaemonProgram(
    "nsqadmin", DESCRIPTION, NsqAdminOptions, validate, NsqAdmin, fatal=_cannot_listen
)
parse_args = PROGRAM.parse_args
main = PROGRAM.main

__all__ = ["FLAGS", "NsqAdmin", "NsqAdminOptions", "main", "parse_args"]
