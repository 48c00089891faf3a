"""Benchmark: publish latency on one nsqd while thousands of idle clients are connected,
against none, same nsqd, same run.

Starts an nsqd on this machine. One producer sends a PUB of 200 B, waits for its OK, then
sleeps 0.5 ms, for ``--seconds``; the rounds take turns: with no other client, then with
``--idle`` more connections open (each has sent the protocol magic and nothing else),
closed again after the round. Prints p50, p99, p99.9 and the largest latency of each
round, and the ratio of the p99.9 with idle clients to the p99.9 without (best round of
each): what the server's periodic work costs per connected client shows there, as the
loop's pauses.

    .venv/bin/python bench/idle_latency.py [--idle 10000] [--seconds 6] [--rounds 2]

Each idle connection is a file descriptor in this process and in nsqd: ``--idle`` must
stay below ``ulimit -n`` (nsqd is started with a limit above it).
"""

from __future__ import annotations

import argparse
import platform
import resource
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_idle import idle_clients
from nsqpy.testing import nsqd_process

BODY = b"x" * 200


def latencies(port: int, seconds: float) -> list[float]:
    """Seconds from each PUB to its OK, one at a time, 0.5 ms apart."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"  V2")
    frame = b"PUB idle_latency\n" + struct.pack(">I", len(BODY)) + BODY
    out: list[float] = []
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            started = time.perf_counter()
            sock.sendall(frame)
            reply = b""
            while len(reply) < 10:  # size, type, "OK"
                chunk = sock.recv(64)
                if not chunk:
                    raise SystemExit("nsqd closed the producer's connection")
                reply += chunk
            if reply[8:10] != b"OK":
                raise SystemExit(f"PUB answered {reply!r}")
            out.append(time.perf_counter() - started)
            time.sleep(0.0005)
    finally:
        sock.close()
    return sorted(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle", type=int, default=10_000, help="connections open beside")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.idle <= 0:
        parser.error("--idle must be at least 1")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = args.idle + 1024
    if hard != resource.RLIM_INFINITY and wanted > hard:
        parser.error(f"--idle {args.idle} needs {wanted} descriptors; the hard limit is {hard}")
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    print(f"# {platform.machine()} {platform.python_implementation()} {platform.python_version()}, "
          f"one nsqd on this machine; one PUB of {len(BODY)} B at a time, 0.5 ms apart, "
          f"for {args.seconds:g} s; {args.idle} idle clients")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, nsqd_process(tmp, nofile=wanted) as nsqd:
        port = nsqd.tcp_port
        latencies(port, 1.0)  # warm-up (the topic is made)
        best: dict[int, float] = {}
        for _ in range(args.rounds):
            for idle in (0, args.idle):
                with idle_clients(port, idle, settle=1.0):
                    lat = latencies(port, args.seconds)
                n = len(lat)
                if not n:
                    raise SystemExit("no PUB was answered: --seconds too short?")
                p999 = lat[min(n - 1, int(n * 0.999))]
                best[idle] = min(best.get(idle, p999), p999)
                print(f"{idle:>6} idle clients: {n} PUBs, p50 {lat[n // 2] * 1e3:.3f} ms, "
                      f"p99 {lat[int(n * 0.99)] * 1e3:.3f}, p99.9 {p999 * 1e3:.3f}, "
                      f"max {lat[-1] * 1e3:.2f}", flush=True)  # fmt: skip
        ratio = best[args.idle] / best[0]
        print(f"p99.9 with {args.idle} idle clients / with none: {ratio:.2f}x "
              f"(best round of each)")  # fmt: skip


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
