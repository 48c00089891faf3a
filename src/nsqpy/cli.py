"""The ``nsqpy`` command: a subcommand for each daemon and tool, and ``run`` for a local stack.

``nsqpy nsqd …`` is exactly the ``nsqd`` program (same flags), and so on for each daemon
and tool. ``nsqpy run`` (``make run``) starts nsqlookupd, an nsqd registered with it and an
nsqadmin reading that lookupd, in one process, on the embedded defaults (4160/4161,
4150/4151, 4171 on 127.0.0.1; Go-style flags override host, ports and data path), prints
the addresses and the nsqadmin URL, prefixes each log line with its daemon's name, and
stops cleanly with status 0 on Ctrl-C or SIGTERM. A port already taken is one line on
stderr and status 1, never a traceback.
"""

from __future__ import annotations

import asyncio
import importlib
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nsqpy.flags import (
    FlagError,
    check_options,
    declared,
    format_help,
    log_level_check,
    must,
    option,
    parse_into,
)

if TYPE_CHECKING:
    from nsqpy.lookupd.daemon import NsqLookupd
    from nsqpy.nsqadmin.server import NsqAdmin
    from nsqpy.nsqd.server import NsqdServer

# subcommand -> (module with main(argv), one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "nsqd": ("nsqpy.nsqd.app", "the NSQ daemon: receives, stores and delivers messages"),
    "nsqlookupd": ("nsqpy.lookupd.app", "the discovery daemon: who has which topic"),
    "nsqadmin": ("nsqpy.nsqadmin.app", "the web UI and JSON API to administer a cluster"),
    "nsq_tail": ("nsqpy.tools.tail", "print the messages of a topic to stdout"),
    "to_nsq": ("nsqpy.tools.to_nsq", "publish lines from stdin to a topic"),
    "nsq_to_file": ("nsqpy.tools.to_file", "archive a topic to rotating, optionally gzipped files"),
    "nsq_to_http": ("nsqpy.tools.to_http", "deliver a topic's messages to HTTP endpoints"),
    "nsq_to_nsq": ("nsqpy.tools.nsq_to_nsq", "forward a topic to other nsqd"),
    "nsq_stat": ("nsqpy.tools.stat", "a periodic table of a topic/channel's depth and rates"),
    "pipeline": ("nsqpy.spark.cli", "Spark pipelines: archive, replay, transform"),
    "spark": ("nsqpy.spark.package", "what a Spark cluster's executors need: spark package"),
    "channel": ("nsqpy.tools.channel", "replay a channel (setoffset), set its dead-letter limit"),
    "jepsen": ("nsqpy.jepsen.cli", "fault-test a cluster in network namespaces (root)"),
    "cert": ("nsqpy.tools.cert", "make a secure cluster's certificates: its CA, nodes, clients"),
}

RUN_SUMMARY = (
    "Run a local NSQ stack in one process until Ctrl-C or SIGTERM: nsqlookupd, an nsqd "
    "registered with it, and nsqadmin reading that nsqlookupd. Prints every address."
)
# Log-line prefixes of the embedded daemons, by logger name (broker and storage are nsqd's).
LOG_PREFIXES = {
    "": "[nsqpy] ",
    "nsqpy.nsqd": "[nsqd] ",
    "nsqpy.broker": "[nsqd] ",
    "nsqpy.storage": "[nsqd] ",
    "nsqpy.lookupd": "[nsqlookupd] ",
    "nsqpy.nsqadmin": "[nsqadmin] ",
}


def _check_host(flag: str, host: str) -> None:
    if not host or any(c in host for c in "/:[] "):
        raise FlagError(f"--{flag} {host!r} is not an IPv4 address or host name")


_PORT = must(lambda v: 0 <= v <= 65535, "--{flag} {value} out of range 0-65535", FlagError)


@dataclass
class RunOptions:
    """``nsqpy run``'s flags: NSQ's embedded defaults on loopback."""

    host: str = option(
        "host",
        "127.0.0.1",
        "address every daemon listens on (0.0.0.0 for all interfaces)",
        check=_check_host,
    )
    data_path: str = option("data-path", "./data", "where nsqd keeps its data")
    nsqd_tcp_port: int = option(
        "nsqd-tcp-port", 4150, "nsqd's TCP port (0 picks a free port)", check=_PORT
    )
    nsqd_http_port: int = option("nsqd-http-port", 4151, "nsqd's HTTP port", check=_PORT)
    lookupd_tcp_port: int = option("lookupd-tcp-port", 4160, "nsqlookupd's TCP port", check=_PORT)
    lookupd_http_port: int = option(
        "lookupd-http-port", 4161, "nsqlookupd's HTTP port", check=_PORT
    )
    nsqadmin_http_port: int = option(
        "nsqadmin-http-port", 4171, "nsqadmin's HTTP port", check=_PORT
    )
    log_level: str = option(
        "log-level",
        "info",
        "log level: debug, info, warn, error, or fatal",
        check=log_level_check(FlagError),
    )


RUN_FLAGS = declared(RunOptions)


class StartError(Exception):
    """A daemon of the stack could not start (one line for the user)."""


def _check_ports_free(opts: RunOptions) -> None:
    """Each fixed port must be free (bound as the daemons bind: SO_REUSEADDR), else StartError."""
    for opt in RUN_FLAGS:
        port = getattr(opts, opt.field)
        if opt.kind != "int" or port == 0:
            continue
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((opts.host, port))
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise StartError(
                    f"cannot listen on {opts.host}:{port}: {reason.lower()} "
                    f"(choose another port with --{opt.name})"
                ) from None


async def _start(name: str, start: Callable[[], Awaitable[None]], flag: str) -> None:
    try:
        await start()
    except OSError as exc:
        reason = exc.strerror or " ".join(str(exc).split())
        raise StartError(f"{name} cannot listen: {reason} (choose another port with {flag})")


def _print_addresses(
    host: str, lookupd: NsqLookupd, nsqd: NsqdServer, admin: NsqAdmin, data_path: str
) -> None:
    shown = socket.gethostname() if host == "0.0.0.0" else host
    admin_url = f"http://{shown}:{admin.http_port}"
    rows = [
        ("nsqlookupd", f"TCP {shown}:{lookupd.tcp_port}  HTTP http://{shown}:{lookupd.http_port}"),
        ("nsqd", f"TCP {shown}:{nsqd.tcp_port}  HTTP http://{shown}:{nsqd.http_port}"),
        ("nsqadmin", f"HTTP {admin_url}"),
        ("data", data_path),
    ]
    for name, text in rows:
        print(f"{name:<11} {text}")
    print(f"Open {admin_url}/ for nsqadmin. Ctrl-C to stop.", flush=True)


async def _run_stack(opts: RunOptions) -> None:
    """Start the three daemons, wait for SIGINT/SIGTERM, stop them in reverse order."""
    from nsqpy.daemon import settle_gc
    from nsqpy.lookupd.app import NsqLookupd, NsqLookupdOptions
    from nsqpy.nsqadmin.app import NsqAdmin, NsqAdminOptions
    from nsqpy.nsqd.server import NsqdServer
    from nsqpy.options import NsqdOptions

    host = opts.host
    dial = "127.0.0.1" if host == "0.0.0.0" else host
    broadcast = socket.gethostname() if host == "0.0.0.0" else host
    stoppers: list[Callable[[], Awaitable[None]]] = []
    try:
        lookupd = NsqLookupd(
            NsqLookupdOptions(
                tcp_address=f"{host}:{opts.lookupd_tcp_port}",
                http_address=f"{host}:{opts.lookupd_http_port}",
                broadcast_address=broadcast,
            )
        )
        await _start("nsqlookupd", lookupd.start, "--lookupd-tcp-port/--lookupd-http-port")
        stoppers.append(lookupd.stop)
        nsqd = NsqdServer(
            NsqdOptions(
                tcp_address=f"{host}:{opts.nsqd_tcp_port}",
                http_address=f"{host}:{opts.nsqd_http_port}",
                data_path=opts.data_path,
                broadcast_address=broadcast,
                lookupd_tcp_addresses=[f"{dial}:{lookupd.tcp_port}"],
                log_level=opts.log_level,
            )
        )
        stoppers.append(nsqd.stop)  # also after a failed start: it closes the broker
        await _start("nsqd", nsqd.start, "--nsqd-tcp-port/--nsqd-http-port")
        admin = NsqAdmin(
            NsqAdminOptions(
                http_address=f"{host}:{opts.nsqadmin_http_port}",
                lookupd_http_addresses=[f"{dial}:{lookupd.http_port}"],
            )
        )
        await _start("nsqadmin", admin.start, "--nsqadmin-http-port")
        stoppers.append(admin.stop)
        _print_addresses(host, lookupd, nsqd, admin, opts.data_path)
        settle_gc()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        print("stopping…", flush=True)
    finally:
        for stopper in reversed(stoppers):
            await stopper()


def run_main(argv: Sequence[str]) -> int:
    """``nsqpy run``: exit 0 after Ctrl-C/SIGTERM, 1 when a daemon cannot start, 2 on bad flags."""
    opts = RunOptions()
    try:
        parsed = parse_into(opts, RUN_FLAGS, argv)
        if parsed.action == "run":
            check_options(opts)
    except FlagError as exc:
        print(f"nsqpy run: {exc}", file=sys.stderr)
        return 2
    if parsed.action == "help":
        sys.stdout.write(format_help("nsqpy run", RUN_SUMMARY, RunOptions(), RUN_FLAGS))
        return 0
    if parsed.action == "version":
        from nsqpy import NSQ_VERSION, __version__

        print(f"nsqpy {__version__} (NSQ v{NSQ_VERSION})")
        return 0
    from nsqpy.daemon import run
    from nsqpy.logs import setup_daemon_logging

    setup_daemon_logging(opts.log_level, LOG_PREFIXES)
    try:
        _check_ports_free(opts)
        run(_run_stack(opts))
    except StartError as exc:
        print(f"nsqpy run: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a signal before the handlers were installed
        return 0
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print("usage: nsqpy <command> [flags]\n\ncommands:")
        print(f"  {'run':<14}a local nsqlookupd + nsqd + nsqadmin (make run)")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:<14}{text}")
        print("\n'nsqpy <command> --help' shows a command's flags.")
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name == "run":
        return run_main(rest)
    if name not in COMMANDS:
        print(f"nsqpy: unknown command {name!r}; see 'nsqpy --help'", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    result = module.main(rest)
    return int(result or 0)
