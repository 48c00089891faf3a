"""The ``nsqd`` program: flags -> NsqdOptions -> NsqdServer, until SIGTERM/SIGINT.

A thin shell (``nsqpy.daemon.DaemonProgram``: parsing, with the flags declared on
``NsqdOptions`` and the checks across them in ``validate``), logging set-up, the event loop
and a graceful shutdown that stops accepting, flushes and persists before exiting. Beyond
the other daemons' shell, ``main`` raises the open files limit first and turns a failing
disk or any other fatal error into one line too.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nsqpy.daemon import DaemonProgram, raise_open_files_limit, run
from nsqpy.errors import ConfigError, StorageError
from nsqpy.flags import check_options
from nsqpy.logs import setup_daemon_logging
from nsqpy.options import NsqdOptions
from nsqpy.protocol.names import valid_topic_name

if TYPE_CHECKING:
    from nsqpy.nsqd.server import NsqdServer

DESCRIPTION = "nsqd (nsqpy): the NSQ daemon that receives, keeps on disk and delivers messages"


def validate(opts: NsqdOptions) -> None:
    """The checks declared on each option, then those across options."""
    check_options(opts)
    if opts.max_attempts and not valid_topic_name("t" + opts.dead_letter_suffix):
        raise ConfigError(
            f"--dead-letter-suffix {opts.dead_letter_suffix!r} makes invalid topic names"
        )
    from nsqpy.nsqd.tls import TlsSettings

    TlsSettings.from_options(opts)  # unreadable certificate or key, incomplete TLS flags


def _server(opts: NsqdOptions) -> NsqdServer:
    from nsqpy.nsqd.server import NsqdServer  # the whole daemon: not needed for --help

    return NsqdServer(opts)


PROGRAM = DaemonProgram("nsqd", DESCRIPTION, NsqdOptions, validate, _server)
FLAGS = PROGRAM.flags  # every flag, declared on NsqdOptions
parse_args = PROGRAM.parse_args

MIN_OPEN_FILES = 64  # listeners, the event loop, a few clients and files


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    setup_daemon_logging(opts.log_level, opts.log_prefix)
    _, open_files = raise_open_files_limit()
    log = logging.getLogger("nsqpy")
    if open_files < MIN_OPEN_FILES:
        log.error(
            "FATAL: the open files limit is %d; nsqd needs at least %d (raise it with ulimit -n)",
            open_files, MIN_OPEN_FILES,
        )  # fmt: skip
        return 1
    try:
        run(PROGRAM.serve(opts))
    except (OSError, StorageError) as exc:  # a port or the data path is taken, a disk fails
        log.error("FATAL: %s", exc)
        return 1
    except ConfigError as exc:
        print(f"nsqd: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # anything else: one clear line, the traceback at debug level
        log.error("FATAL: %s: %s", type(exc).__name__, exc)
        log.debug("FATAL", exc_info=True)
        return 1
    return 0
