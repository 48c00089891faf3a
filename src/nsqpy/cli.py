"""The ``nsqpy`` command: a subcommand for each daemon and tool, and ``run`` for a local stack.

``nsqpy nsqd …`` is exactly the ``nsqd`` program (same flags), and so on for each
daemon and tool. ``nsqpy run`` starts nsqlookupd and an nsqd registered with it in one
process on the embedded defaults, prints the addresses, and stops cleanly on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import signal
import sys
from collections.abc import Sequence

# subcommand -> (module with main(argv), one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "nsqd": ("nsqpy.nsqd.app", "the NSQ daemon: receives, stores and delivers messages"),
    "nsqlookupd": ("nsqpy.lookupd.app", "the discovery daemon: who has which topic"),
}


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nsqpy run",
        description="Run a local stack (nsqlookupd + nsqd) on the default ports until Ctrl-C.",
    )
    parser.add_argument("--data-path", default="./data", help="where nsqd keeps its data")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    return parser


async def _run_stack(data_path: str, host: str) -> None:
    from nsqpy.lookupd.app import NsqLookupd, NsqLookupdOptions
    from nsqpy.nsqd.server import NsqdServer
    from nsqpy.options import NsqdOptions

    lookupd = NsqLookupd(
        NsqLookupdOptions(
            tcp_address=f"{host}:4160", http_address=f"{host}:4161", broadcast_address=host
        )
    )
    await lookupd.start()
    nsqd = NsqdServer(
        NsqdOptions(
            tcp_address=f"{host}:4150",
            http_address=f"{host}:4151",
            data_path=data_path,
            broadcast_address=host,
            lookupd_tcp_addresses=[f"{host}:4160"],
        )
    )
    await nsqd.start()
    print(f"nsqlookupd  TCP {host}:{lookupd.tcp_port}  HTTP http://{host}:{lookupd.http_port}")
    print(f"nsqd        TCP {host}:{nsqd.tcp_port}  HTTP http://{host}:{nsqd.http_port}")
    print(f"data        {data_path}")
    print("Ctrl-C to stop.", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("stopping…", flush=True)
    await nsqd.stop()
    await lookupd.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print("usage: nsqpy <command> [flags]\n\ncommands:")
        print(f"  {'run':<14}a local nsqlookupd + nsqd on the default ports (make run)")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:<14}{text}")
        print("\n'nsqpy <command> --help' shows a command's flags.")
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name == "run":
        ns = _run_parser().parse_args(rest)
        from nsqpy.nsqd.app import run, setup_logging

        setup_logging("info", "")
        run(_run_stack(ns.data_path, ns.host))
        return 0
    if name not in COMMANDS:
        print(f"nsqpy: unknown command {name!r}; see 'nsqpy --help'", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    result = module.main(rest)
    return int(result or 0)
