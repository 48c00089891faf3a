"""Benchmark: what the extra hops of replication cost on this machine with no broker work
at all: the floor under ``cluster_latency.py`` and ``cluster_ordered.py``.

Three relay processes stand for a leader and two followers, each an asyncio protocol on
uvloop (as nsqd is) that does nothing but pass bytes on. The client sends requests of
``--size`` bytes to the "leader" on one connection; the leader answers each with a
10-byte OK:

  - plain: at once, as a single nsqd answers a PUB (the client's hop and back);
  - replicated: once it has passed the request to both "followers" and each sent back an
    8-byte ACK, as a leader answers a replicated PUB (two hops more, three processes).

No parsing, no storage, no commit: whatever the ratio between the two is here, a broker
doing real work per hop cannot do better on this machine. Two measures, A B A B:

  - latency: requests sent when due at ``--rate`` a second for ``--seconds`` (open loop,
    as ``cluster_latency.py``): p50, p99, p99.9, and the ratio of the p99s (best round);
  - one in flight (closed loop, as an ordered partition's delivery: the next goes only
    once the last is answered): round trips a second, and their ratio.

    .venv/bin/python bench/cluster_floors.py [--rate 2000] [--seconds 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

OK = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"  # an NSQ response frame, as nsqd sends it
ACK = b"A" * 8


def run_loop(main: object) -> None:
    try:
        import uvloop

        uvloop.run(main)  # type: ignore[arg-type]
    except ImportError:
        asyncio.run(main)  # type: ignore[arg-type]


class Follower(asyncio.Protocol):
    """An ACK for every whole request received, in one write per read."""

    def __init__(self, size: int) -> None:
        self.size, self.held = size, 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        whole, self.held = divmod(self.held + len(data), self.size)
        if whole:
            self.transport.write(ACK * whole)


class Leader(asyncio.Protocol):
    """A client's connection: OK at once (``links`` empty), or once every link ACKed."""

    def __init__(self, size: int, links: list[FollowerLink]) -> None:
        self.size, self.held, self.links = size, 0, links
        self.answered = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for link in self.links:
            link.client = self
        # (the links outlive a client's connection: what they ACKed before is not its)
        self.answered = min((link.acked for link in self.links), default=0)

    def data_received(self, data: bytes) -> None:
        if self.links:
            for link in self.links:  # (the bytes as they come, part of a request too: a
                link.transport.write(data)  # relay; the followers count whole ones)
            return
        whole, self.held = divmod(self.held + len(data), self.size)
        if whole:
            self.transport.write(OK * whole)

    def acked(self) -> None:
        done = min(link.acked for link in self.links)
        if done > self.answered:
            self.transport.write(OK * (done - self.answered))
            self.answered = done


class FollowerLink(asyncio.Protocol):
    """The leader's connection to one follower: counts the ACKs."""

    def __init__(self) -> None:
        self.acked, self.held = 0, 0
        self.client: Leader | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        whole, self.held = divmod(self.held + len(data), len(ACK))
        self.acked += whole
        if whole and self.client is not None:
            self.client.acked()


async def serve(role: str, size: int, ports: list[int]) -> None:
    """A relay process: prints its listening port(s), then serves until stdin closes."""
    loop = asyncio.get_running_loop()
    if role == "follower":
        server = await loop.create_server(lambda: Follower(size), "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
    else:
        plain = await loop.create_server(lambda: Leader(size, []), "127.0.0.1", 0)
        links = []
        for port in ports:
            _, link = await loop.create_connection(FollowerLink, "127.0.0.1", port)
            links.append(link)
        replicated = await loop.create_server(lambda: Leader(size, links), "127.0.0.1", 0)
        print(plain.sockets[0].getsockname()[1], replicated.sockets[0].getsockname()[1],
              flush=True)  # fmt: skip
    await loop.run_in_executor(None, sys.stdin.read)  # (the parent closes it: stop)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def open_loop(port: int, size: int, rate: float, seconds: float) -> list[float]:
    """Each request's latency (ms) from when it was due to its OK (one thread, ``select``
    between the next request's time and the next answer)."""
    sock = connect(port)
    request, count = b"x" * size, int(rate * seconds)
    due_at: list[float] = []
    out: list[float] = []
    held = 0
    start = time.perf_counter() + 0.01
    try:
        while len(out) < count:
            now = time.perf_counter()
            wait: float | None = None
            if len(due_at) < count:
                due = start + len(due_at) / rate
                if now >= due:
                    due_at.append(due)
                    sock.sendall(request)
                    continue
                wait = due - now
            if not select.select([sock], [], [], wait)[0]:
                continue
            got = len(sock.recv(65536))
            if not got:
                raise SystemExit("the leader closed the connection")
            done = time.perf_counter()
            whole, held = divmod(held + got, len(OK))
            for _ in range(whole):
                out.append((done - due_at[len(out)]) * 1000)
    finally:
        sock.close()
    return sorted(out)


def one_in_flight(port: int, size: int, seconds: float) -> float:
    """Round trips a second with one request outstanding at a time."""
    sock = connect(port)
    request, count = b"x" * size, 0
    end = time.perf_counter() + seconds
    started = time.perf_counter()
    try:
        while time.perf_counter() < end:
            sock.sendall(request)
            got = 0
            while got < len(OK):
                chunk = sock.recv(64)
                if not chunk:
                    raise SystemExit("the leader closed the connection")
                got += len(chunk)
            count += 1
    finally:
        sock.close()
    return count / (time.perf_counter() - started)


def quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start(*args: str) -> tuple[subprocess.Popen[str], list[int]]:
    proc = subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, [int(p) for p in proc.stdout.readline().split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--size", type=int, default=230, help="a PUB of 200 B is 230 bytes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serve", choices=["leader", "follower"], help=argparse.SUPPRESS)
    parser.add_argument("--followers", type=int, nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        run_loop(serve(args.serve, args.size, args.followers))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    print(f"# relays only: a client, a leader, two followers (uvloop), requests of {args.size} B; "
          f"{os.cpu_count()} cores")  # fmt: skip
    procs: list[subprocess.Popen[str]] = []
    try:
        follower_ports = []
        for _ in range(2):
            proc, ports = start("--serve", "follower", "--size", str(args.size))
            procs.append(proc)
            follower_ports += ports
        proc, (plain, replicated) = start(
            "--serve", "leader", "--size", str(args.size), "--followers",
            *[str(p) for p in follower_ports],
        )  # fmt: skip
        procs.append(proc)
        kinds = {"plain": plain, "replicated": replicated}
        open_loop(plain, args.size, args.rate, 1)  # (warm up)
        open_loop(replicated, args.size, args.rate, 1)
        p99: dict[str, list[float]] = {kind: [] for kind in kinds}
        trips: dict[str, list[float]] = {kind: [] for kind in kinds}
        for n in range(args.rounds):
            for kind, port in kinds.items():
                got = open_loop(port, args.size, args.rate, args.seconds)
                p99[kind].append(quantile(got, 0.99))
                print(f"round {n + 1} {kind:<10}: p50 {quantile(got, 0.5):.3f} ms, "
                      f"p99 {quantile(got, 0.99):.3f}, p99.9 {quantile(got, 0.999):.3f}, "
                      f"max {got[-1]:.3f}")  # fmt: skip
            for kind, port in kinds.items():
                rate = one_in_flight(port, args.size, args.seconds)
                trips[kind].append(rate)
                print(f"round {n + 1} {kind:<10}: one in flight {rate:,.0f} round trips/s")
        best_plain, best_replicated = min(p99["plain"]), min(p99["replicated"])
        print(f"p99 replicated / plain: {best_replicated / best_plain:.2f}x "
              f"({best_replicated:.3f} ms / {best_plain:.3f} ms, best round of each)")  # fmt: skip
        ratio = max(trips["replicated"]) / max(trips["plain"])
        print(f"one in flight, replicated / plain: {ratio:.2f}x (best round of each)")
    finally:
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
