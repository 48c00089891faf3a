"""How close nsqd is to what any Python server could do, for the two figures bound by a
round trip per message; prints figures, asserts nothing.

A "floor" here is a do-nothing server on the same event loop nsqd runs on (uvloop, one
``asyncio.Protocol`` per connection, started as a process by this script with ``--serve``)
that speaks just enough of NSQ's protocol V2 for the client at hand:

  - ``pub``: answers each ``PUB`` (or ``MPUB``) with ``OK``; ``pub-write`` first writes the body to a
    file with ``os.pwrite``, as nsqd must before it acknowledges (its group commit);
  - ``echo``: answers ``SUB`` with ``OK``, then ``RDY`` and each ``FIN`` line with one
    200-byte message frame.

Two comparisons, each alternating the servers for ``--rounds`` rounds, medians printed:

  1. single PUB with NSQ's ``bench_writer --batch-size=1`` (2 connections, one PUB in
     flight each): Go nsqd 1.3.0, nsqpy's nsqd, and the two PUB floors;
  2. one message in flight per connection, 8 connections, the one-thread Python client of
     ``bench/consume_features.py`` (a FIN per message): the echo floor, Go nsqd and nsqpy
     with plain SUB at RDY 1, and nsqpy's SUB_ORDERED over 8 partitions (one message in
     flight per partition by design).

The tools come from ``$NSQ_GO_TOOLS`` (how to build them: ``vs_go.GO_TOOLS_HELP``).

    .venv/bin/python bench/floors.py [--rounds 3] [--runfor 4] [--messages 60000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from consume_features import drain
from nsqpy.testing import http_request
from partitions import publish
from vs_go import TOOLS, Daemon, free_port, run_tool

OK_FRAME = struct.pack(">ii", 6, 0) + b"OK"
MESSAGE_FRAME = struct.pack(">iiqH", 230, 2, 0, 1) + b"0" * 16 + b"x" * 200


class PubFloor(asyncio.Protocol):
    """PUB or MPUB (what ``bench_writer`` sends, also for one message) -> (pwrite) -> OK;
    nothing else is expected."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        self.buf = bytearray()
        self.magic = False
        self.at = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.magic:
            if len(buf) < 4:
                return
            del buf[:4]
            self.magic = True
        while True:
            nl = buf.find(b"\n")
            if nl < 0 or len(buf) < nl + 5:
                return
            (size,) = struct.unpack_from(">i", buf, nl + 1)
            if len(buf) < nl + 5 + size:
                return
            body = bytes(buf[nl + 5 : nl + 5 + size])
            del buf[: nl + 5 + size]
            if self.fd is not None:
                self.at += os.pwrite(self.fd, body, self.at)
            self.transport.write(OK_FRAME)  # type: ignore[attr-defined]


class EchoFloor(asyncio.Protocol):
    """SUB -> OK; RDY -> one message frame; then one message frame per FIN line."""

    def __init__(self) -> None:
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        data = self.tail + data
        cut = data.rfind(b"\n") + 1
        data, self.tail = data[:cut], data[cut:]
        frames = data.count(b"FIN ") + data.count(b"RDY ")
        out = OK_FRAME * data.count(b"SUB") + MESSAGE_FRAME * frames
        if out:
            self.transport.write(out)  # type: ignore[attr-defined]


def serve(kind: str, port: int, data_dir: str) -> None:
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        if kind == "echo":
            await loop.create_server(EchoFloor, "127.0.0.1", port)
        else:
            fd = os.open(Path(data_dir) / "floor.dat", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            await loop.create_server(lambda: PubFloor(fd if kind == "pub-write" else None),
                                     "127.0.0.1", port)  # fmt: skip
        print("ready", flush=True)
        await asyncio.Event().wait()

    uvloop.run(main())


class Floor:
    def __init__(self, kind: str, data_dir: Path) -> None:
        self.tcp = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind, "--port", str(self.tcp),
             "--data-dir", str(data_dir)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def single_pub(rounds: int, runfor: int, tmp: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for sub in ("go", "nsqpy"):
        (tmp / sub).mkdir()
    servers = {
        "Go nsqd": Daemon("go", TOOLS, tmp / "go"),
        "nsqpy nsqd": Daemon("nsqpy", TOOLS, tmp / "nsqpy"),
        "floor, OK only": Floor("pub", tmp),
        "floor, pwrite then OK": Floor("pub-write", tmp),
    }
    try:
        for r in range(rounds):
            for label, server in servers.items():
                rate = run_tool(TOOLS, "bench_writer", f"--nsqd-tcp-address=127.0.0.1:{server.tcp}",
                                f"--runfor={runfor}s", "--size=200", f"--topic=pub{r}",
                                "--batch-size=1")  # fmt: skip
                out.setdefault(label, []).append(rate)
                print(f"round {r} single PUB  {label:<24} {rate:>10,.0f} msgs/s", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return out


def one_in_flight(rounds: int, messages: int, tmp: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for sub in ("go2", "py2"):
        (tmp / sub).mkdir()
    go, nsqpy, echo = Daemon("go", TOOLS, tmp / "go2"), Daemon("nsqpy", TOOLS, tmp / "py2"), \
        Floor("echo", tmp)  # fmt: skip
    http = nsqpy.nsqpy.http
    try:
        for r in range(rounds):
            runs = [
                ("floor (echo)", echo.tcp, "", "SUB"),
                ("Go nsqd, SUB RDY 1", go.tcp, f"g{r}", "SUB"),
                ("nsqpy, SUB RDY 1", nsqpy.tcp, f"p{r}", "SUB"),
                ("nsqpy, SUB_ORDERED", nsqpy.tcp, f"o{r}", "SUB_ORDERED"),
            ]
            for label, port, topic, verb in runs:
                if port == nsqpy.tcp:
                    http_request("POST", f"{http}/topic/create?topic={topic}&partition_num=8")
                if topic:
                    publish(port, topic, messages, extended=False)
                rate = drain(port, topic or "floor", messages, conns=8, verb=verb, rdy=1)
                out.setdefault(label, []).append(rate)
                print(f"round {r} 1 in flight {label:<24} {rate:>10,.0f} msgs/s", flush=True)
    finally:
        for server in (go, nsqpy, echo):
            server.stop()
    return out


def report(title: str, results: dict[str, list[float]], against: str) -> None:
    print(title)
    med = {label: statistics.median(rates) for label, rates in results.items()}
    for label, rate in med.items():
        print(f"  {label:<24} {rate:>10,.0f} msgs/s  {rate / med[against]:.2f}x of {against}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runfor", type=int, default=4, help="bench_writer's run, seconds")
    ap.add_argument("--messages", type=int, default=60_000, help="per one-in-flight drain")
    ap.add_argument("--serve", choices=["pub", "pub-write", "echo"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.data_dir)
        return
    print(f"# floors: {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"{args.rounds} rounds, medians")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        pub = single_pub(args.rounds, args.runfor, Path(tmp))
        rtt = one_in_flight(args.rounds, args.messages, Path(tmp))
    report("single PUB, bench_writer --batch-size=1:", pub, "Go nsqd")
    report("one message in flight per connection, 8 connections, Python client:", rtt,
           "floor (echo)")  # fmt: skip


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
