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
    once the last is answered): round trips a second, and their ratio;
  - batches, when NSQ's ``bench_writer`` is found (``--go-tools`` or ``$NSQ_GO_TOOLS``): it
    publishes MPUB of 200 messages of 200 B for ``--runfor``, as against
    ``cluster_publish.py``'s leader, to a second set of relays that take its frames whole
    and write each batch to a file (one ``os.pwrite``, the file wrapping at 256 MiB so that
    the page cache stays warm), the leader answering at once or once both followers wrote
    it and sent an ACK: messages a second, their ratio, and the CPU each relay spent per
    batch (from ``/proc``). What a replicated publish of batches costs at the least here,
    beside a single node's ``bench_writer`` figure.

    .venv/bin/python bench/cluster_floors.py [--rate 2000] [--seconds 5] [--rounds 2]
        [--runfor 5] [--go-tools DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import cast

OK = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"  # an NSQ response frame, as nsqd sends it
ACK = b"A" * 8
LOG_WRAP = 256 << 20  # a batch relay's file: written from its start again past this
SIZE = struct.Struct(">I")


def run_loop(main: object) -> None:
    try:
        import uvloop

        uvloop.run(main)  # type: ignore[arg-type]
    except ImportError:
        asyncio.run(main)  # type: ignore[arg-type]


class Relay(asyncio.Protocol):
    """A relay's connection: its transport kept, Nagle off (each write goes at once)."""

    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Follower(Relay):
    """An ACK for every whole request received, in one write per read."""

    def __init__(self, size: int) -> None:
        self.size, self.held = size, 0

    def data_received(self, data: bytes) -> None:
        whole, self.held = divmod(self.held + len(data), self.size)
        if whole:
            self.transport.write(ACK * whole)


class Leader(Relay):
    """A client's connection: OK at once (``links`` empty), or once every link ACKed."""

    def __init__(self, size: int, links: list[FollowerLink]) -> None:
        self.size, self.held, self.links = size, 0, links
        self.answered = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
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


class FollowerLink(Relay):
    """The leader's connection to one follower: counts the ACKs."""

    def __init__(self) -> None:
        self.acked, self.held = 0, 0
        self.client: Leader | None = None
        self.on_ack: Callable[[], None] | None = None  # (a batch relay's)

    def data_received(self, data: bytes) -> None:
        whole, self.held = divmod(self.held + len(data), len(ACK))
        self.acked += whole
        if whole and self.client is not None:
            self.client.acked()
        if whole and self.on_ack is not None:
            self.on_ack()


class LogFile:
    """Where a batch relay writes each batch: one ``pwrite``, the offset wrapping."""

    def __init__(self, directory: str) -> None:
        self.fd = os.open(os.path.join(directory, "log"), os.O_RDWR | os.O_CREAT)
        self.pos = 0

    def write(self, data: bytes) -> None:
        os.pwrite(self.fd, data, self.pos)
        self.pos = (self.pos + len(data)) % LOG_WRAP


class BatchFollower(Relay):
    """Length-prefixed batches from the leader: each written to the file, an ACK each."""

    def __init__(self, log: LogFile) -> None:
        self.log, self.buf = log, bytearray()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = acks = 0
        while len(buf) - pos >= SIZE.size:
            (n,) = SIZE.unpack_from(buf, pos)
            end = pos + SIZE.size + n
            if len(buf) < end:
                break
            self.log.write(bytes(buf[pos + SIZE.size : end]))
            acks, pos = acks + 1, end
        del buf[:pos]
        if acks:
            self.transport.write(ACK * acks)


class BatchLeader(Relay):
    """A ``bench_writer`` connection: the magic, an IDENTIFY (answered OK), then MPUBs, each
    taken whole and written to the file, then answered at once (``acks`` None) or sent to
    the followers and answered once each ACKed it (``Acks``)."""

    def __init__(self, log: LogFile, acks: Acks | None) -> None:
        self.log, self.acks = log, acks
        self.buf, self.magic = bytearray(), 4

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, oks = min(self.magic, len(buf)), 0
        self.magic -= pos
        while True:
            line_end = buf.find(b"\n", pos)
            if line_end < 0 or len(buf) < line_end + 1 + SIZE.size:
                break
            body = line_end + 1 + SIZE.size
            end = body + SIZE.unpack_from(buf, line_end + 1)[0]
            if len(buf) < end:
                break
            if buf.startswith(b"MPUB ", pos):
                batch = bytes(buf[body:end])
                self.log.write(batch)
                if self.acks is not None:
                    self.acks.send(self, batch)
                else:
                    oks += 1
            else:  # (the IDENTIFY)
                oks += 1
            pos = end
        del buf[:pos]
        if oks:
            self.transport.write(OK * oks)


class Acks:
    """A batch leader's links to its followers: batches go out in order, and each is
    answered on the connection it came from once every follower ACKed it."""

    def __init__(self) -> None:
        self.links: list[FollowerLink] = []
        self.waiting: deque[BatchLeader] = deque()
        self.answered = 0

    def send(self, client: BatchLeader, batch: bytes) -> None:
        self.waiting.append(client)
        head = SIZE.pack(len(batch))
        for link in self.links:
            link.transport.writelines([head, batch])

    def acked(self) -> None:
        done = min(link.acked for link in self.links)
        while self.answered < done:
            self.answered += 1
            self.waiting.popleft().transport.write(OK)


async def serve(role: str, size: int, ports: list[int]) -> None:
    """A relay process: prints its listening port(s), then serves until stdin closes."""
    loop = asyncio.get_running_loop()
    if role.startswith("batch-"):
        await serve_batches(role, ports)
        return
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


async def serve_batches(role: str, ports: list[int]) -> None:
    """A batch relay, its file in a directory of its own; prints its port(s) as ``serve``."""
    loop = asyncio.get_running_loop()
    with tempfile.TemporaryDirectory(prefix="cluster-floors-") as directory:
        log = LogFile(directory)
        if role == "batch-follower":
            server = await loop.create_server(lambda: BatchFollower(log), "127.0.0.1", 0)
            print(server.sockets[0].getsockname()[1], flush=True)
        else:
            acks = Acks()
            for port in ports:
                _, link = await loop.create_connection(FollowerLink, "127.0.0.1", port)
                link.on_ack = acks.acked
                acks.links.append(link)
            plain = await loop.create_server(lambda: BatchLeader(log, None), "127.0.0.1", 0)
            replicated = await loop.create_server(lambda: BatchLeader(log, acks), "127.0.0.1", 0)
            print(plain.sockets[0].getsockname()[1], replicated.sockets[0].getsockname()[1],
                  flush=True)  # fmt: skip
        await loop.run_in_executor(None, sys.stdin.read)  # (the parent closes it: stop)
        os.close(log.fd)


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


def start(
    *args: str, procs: list[subprocess.Popen[str]]
) -> tuple[subprocess.Popen[str], list[int]]:
    """A relay process (put in ``procs`` at once, for the caller to stop) and its port(s)."""
    proc = subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    procs.append(proc)
    assert proc.stdout is not None
    return proc, [int(p) for p in proc.stdout.readline().split()]


def batches(writer: Path, rounds: int, runfor: float, procs: list[subprocess.Popen[str]]) -> None:
    """bench_writer against the batch relays (started here, each put in ``procs`` at once
    so that the caller stops it), plain and replicated in turn: messages a second and CPU
    per batch of each relay."""
    from cluster_publish import ops
    from vs_go import cpu_seconds

    relays, follower_ports = [], []
    for _ in range(2):
        proc, ports = start("--serve", "batch-follower", procs=procs)
        relays.append(proc)
        follower_ports += ports
    proc, (plain, replicated) = start(
        "--serve", "batch-leader", "--followers", *[str(p) for p in follower_ports], procs=procs
    )
    relays.insert(0, proc)
    best: dict[str, float] = {}
    for n in range(rounds):
        for kind, port in {"plain": plain, "replicated": replicated}.items():
            before = [cpu_seconds(relay.pid) for relay in relays]
            out = subprocess.run(
                [str(writer), f"--nsqd-tcp-address=127.0.0.1:{port}", "--topic=floor",
                 f"--runfor={runfor}s", "--size=200", "--batch-size=200"],
                capture_output=True, text=True, timeout=runfor + 60,
            )  # fmt: skip
            rate = ops(out.stdout + out.stderr)
            count = rate * runfor / 200
            cpu = [
                (cpu_seconds(r.pid) - b) * 1e6 / count for r, b in zip(relays, before, strict=True)
            ]
            shown = f"leader {cpu[0]:.0f}"
            if kind == "replicated":
                shown += f", followers {cpu[1]:.0f} and {cpu[2]:.0f}"
            print(f"round {n + 1} {kind:<10}: batches {rate:,.0f} msgs/s (bench_writer), "
                  f"CPU per batch: {shown} µs")  # fmt: skip
            best[kind] = max(best.get(kind, 0.0), rate)
    print(f"batches, replicated / plain: {best['replicated'] / best['plain']:.2f}x "
          f"({best['replicated']:,.0f} / {best['plain']:,.0f} msgs/s, best round of each)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--size", type=int, default=230, help="a PUB of 200 B is 230 bytes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runfor", type=float, default=5, help="bench_writer's seconds")
    parser.add_argument(
        "--go-tools",
        default=os.environ.get("NSQ_GO_TOOLS"),
        help="a folder of NSQ 1.3.0's Go programs, with bench_writer (default $NSQ_GO_TOOLS)",
    )
    roles = ["leader", "follower", "batch-leader", "batch-follower"]
    parser.add_argument("--serve", choices=roles, help=argparse.SUPPRESS)
    parser.add_argument("--followers", type=int, nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        run_loop(serve(args.serve, args.size, args.followers))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    print(f"# relays only: a client, a leader, two followers (uvloop), requests of {args.size} B; "
          f"{os.cpu_count()} cores")  # fmt: skip
    procs: list[subprocess.Popen[str]] = []
    try:
        follower_ports = []
        for _ in range(2):
            _, ports = start("--serve", "follower", "--size", str(args.size), procs=procs)
            follower_ports += ports
        _, (plain, replicated) = start(
            "--serve", "leader", "--size", str(args.size), "--followers",
            *[str(p) for p in follower_ports], procs=procs,
        )  # fmt: skip
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
        writer = Path(args.go_tools or "") / "bench_writer"
        if args.go_tools and writer.exists():
            batches(writer, args.rounds, args.runfor, procs)
        else:
            print(f"batches: skipped, no bench_writer in --go-tools ({args.go_tools})")
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
