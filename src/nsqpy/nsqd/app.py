"""The ``nsqd`` program: flags -> NsqdOptions -> NsqdServer, until SIGTERM/SIGINT.

A thin shell: parsing (the flags are declared on ``NsqdOptions``; the checks across them
are ``validate``'s), logging set-up, the event loop (uvloop when installed) and a
graceful shutdown that stops accepting, flushes and persists before exiting.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from nsqpy import NSQ_VERSION, __version__
from nsqpy.daemon import raise_open_files_limit, run, serve_until_signal
from nsqpy.errors import ConfigError, StorageError
from nsqpy.flags import check_options, declared, parse_flags
from nsqpy.logs import setup_daemon_logging
from nsqpy.options import NsqdOptions
from nsqpy.protocol.names import valid_topic_name

FLAGS = declared(NsqdOptions)  # every flag, declared on NsqdOptions
DESCRIPTION = "nsqd (nsqpy): the NSQ daemon that receives, keeps on disk and delivers messages"

VERSION_LINE = f"nsqd v{NSQ_VERSION} (nsqpy {__version__}, python {sys.version.split()[0]})"


def validate(opts: NsqdOptions) -> None:
    """The checks declared on each option, then those across options."""
    check_options(opts)
    if opts.max_attempts and not valid_topic_name("t" + opts.dead_letter_suffix):
        raise ConfigError(
            f"--dead-letter-suffix {opts.dead_letter_suffix!r} makes invalid topic names"
        )
    from nsqpy.nsqd.tls import TlsSettings

    TlsSettings.from_options(opts)  # unreadable certificate or key, incomplete TLS flags


def setup_logging(level: str, prefix: str) -> None:
    """nsqd's log lines (``nsqpy.logs``): prefix, time, level; one line per event."""
    setup_daemon_logging(level, prefix)


def parse_args(argv: Sequence[str]) -> NsqdOptions:
    return parse_flags(
        NsqdOptions,
        argv,
        prog="nsqd",
        description=DESCRIPTION,
        version=VERSION_LINE,
        validate=validate,
    )


async def serve(opts: NsqdOptions) -> None:
    from nsqpy.nsqd.server import NsqdServer

    await serve_until_signal(NsqdServer(opts))


MIN_OPEN_FILES = 64  # listeners, the event loop, a few clients and files


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging(opts.log_level, opts.log_prefix)
    _, open_files = raise_open_files_limit()
    log = logging.getLogger("nsqpy")
    if open_files < MIN_OPEN_FILES:
        log.error(
            "FATAL: the open files limit is %d; nsqd needs at least %d (raise it with ulimit -n)",
            open_files, MIN_OPEN_FILES,
        )  # fmt: skip
        return 1
    try:
        run(serve(opts))
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
