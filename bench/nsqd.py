"""Benchmark nsqd end to end on this machine: prints figures, asserts nothing.

Starts a real ``nsqd`` process (data in a temp dir), then with light clients (pre-encoded
commands, frames counted without building per-message objects, several processes where
one client would be the bottleneck) measures, for 200-byte messages:

  - MPUB in batches of 200: msgs/s
  - single PUB round trips (one in flight per connection, several connections): msgs/s
  - SUB + FIN draining a backlog: msgs/s
  - end-to-end latency p50/p99 at a steady publish rate
  - nsqd CPU seconds per million messages for each phase
  - nsqd peak RSS with a backlog of N messages (default 1,000,000)

Usage: .venv/bin/python bench/nsqd.py [--messages N] [--backlog N] [--procs N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from nsqpy.testing import http_request, nsqd_process

SIZE = 200
BODY = b"x" * SIZE


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"  V2")
    return s


def read_frames(sock: socket.socket, buf: bytearray) -> list[tuple[int, bytes]]:
    """The whole frames received so far (type, data); a partial frame stays in ``buf``."""
    data = sock.recv(1 << 20)
    if not data:
        raise ConnectionError("closed")
    buf += data
    out = []
    pos = 0
    while len(buf) - pos >= 8:
        size, ftype = struct.unpack_from(">ii", buf, pos)
        if len(buf) - pos < 4 + size:
            break
        out.append((ftype, bytes(buf[pos + 8 : pos + 4 + size])))
        pos += 4 + size
    del buf[:pos]
    return out


def mpub_worker(port: int, topic: str, batches: int, pipeline: int = 8) -> None:
    payload = struct.pack(">i", 200) + (struct.pack(">i", SIZE) + BODY) * 200
    cmd = f"MPUB {topic}\n".encode() + struct.pack(">i", len(payload)) + payload
    sock = connect(port)
    buf = bytearray()
    sent = acked = 0
    while acked < batches:
        while sent < batches and sent - acked < pipeline:
            sock.sendall(cmd)
            sent += 1
        for ftype, data in read_frames(sock, buf):
            if ftype == 0 and data == b"_heartbeat_":
                sock.sendall(b"NOP\n")
                continue
            assert ftype == 0, data
            acked += 1
    sock.close()


def pub_worker(port: int, topic: str, count: int) -> None:
    cmd = f"PUB {topic}\n".encode() + struct.pack(">i", SIZE) + BODY
    sock = connect(port)
    buf = bytearray()
    for _ in range(count):
        sock.sendall(cmd)
        got = False
        while not got:
            for ftype, data in read_frames(sock, buf):
                if ftype == 0 and data == b"_heartbeat_":
                    sock.sendall(b"NOP\n")
                    continue
                got = True
    sock.close()


def sub_worker(port: int, topic: str, channel: str, count: int, rdy: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    sock = connect(port)
    sock.sendall(f"SUB {topic} {channel}\nRDY {rdy}\n".encode())
    buf = bytearray()
    got = 0
    latencies: list[int] = []
    fin = bytearray()
    while got < count:
        frames = read_frames(sock, buf)
        fin.clear()
        now = time.time_ns()
        for ftype, data in frames:
            if ftype == 2:
                got += 1
                fin += b"FIN " + data[10:26] + b"\n"
                if len(latencies) < 200_000:
                    latencies.append(now - struct.unpack_from(">q", data, 0)[0])
            elif data == b"_heartbeat_":
                fin += b"NOP\n"
        if fin:
            sock.sendall(fin)
    out.put(latencies)
    sock.close()


def run_procs(
    target: object,
    args_list: list[tuple[object, ...]],
    results: mp.Queue | None = None,  # type: ignore[type-arg]
) -> float:
    """Run one process per argument tuple; the time until all are done.

    A process that put a big item on ``results`` cannot exit before the item is read, so
    one result per process is drained before joining (else the join deadlocks).
    """
    procs = [mp.Process(target=target, args=args) for args in args_list]  # type: ignore[arg-type]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    if results is not None:
        for _ in procs:
            results.put(results.get())
    for p in procs:
        p.join()
    return time.perf_counter() - t0


def phase(name: str, pid: int, n: int, fn: object) -> None:
    c0 = cpu_seconds(pid)
    elapsed = fn()  # type: ignore[operator]
    cpu = cpu_seconds(pid) - c0
    print(
        f"{name:<34} {n / elapsed:>10,.0f} msgs/s {n * SIZE / elapsed / 1e6:>7.1f} MB/s "
        f"  nsqd CPU {cpu / n * 1e6:>6.1f} s per million",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--pub-messages", type=int, default=20_000)
    ap.add_argument("--backlog", type=int, default=1_000_000)
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args()
    print(
        f"# nsqpy nsqd bench: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"# {SIZE}-byte messages; client and server share the machine")
    with tempfile.TemporaryDirectory() as tmp, nsqd_process(Path(tmp) / "data") as nsqd:
        assert nsqd.proc is not None
        pid, port = nsqd.proc.pid, nsqd.tcp_port
        n = args.messages // 200 * 200
        per = n // 200 // args.procs
        phase(
            "MPUB x200",
            pid,
            per * 200 * args.procs,
            lambda: run_procs(mpub_worker, [(port, "mpub", per) for _ in range(args.procs)]),
        )
        q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
        total = per * 200 * args.procs
        phase(
            "SUB+FIN from backlog (RDY 2500)",
            pid,
            total,
            lambda: run_procs(sub_worker, [(port, "mpub", "c", total, 2500, q)], q),
        )
        q.get()
        pn = args.pub_messages
        conns = 8
        phase(
            f"PUB round trip ({conns} conns)",
            pid,
            pn // conns * conns,
            lambda: run_procs(pub_worker, [(port, "pub", pn // conns) for _ in range(conns)]),
        )
        # latency at a steady rate: one subscriber, a paced publisher
        rate, count = 5000, 10000
        lat_q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
        sub = mp.Process(target=sub_worker, args=(port, "lat", "c", count, 200, lat_q))
        http_request("POST", f"{nsqd.http}/channel/create?topic=lat&channel=c")
        sub.start()
        sock = connect(port)
        buf = bytearray()
        cmd = b"PUB lat\n" + struct.pack(">i", SIZE) + BODY
        t0 = time.perf_counter()
        for i in range(count):
            target = t0 + i / rate
            while time.perf_counter() < target:
                pass
            sock.sendall(cmd)
            read_frames(sock, buf)
        lat = sorted(lat_q.get())
        sub.join()
        print(
            f"{f'e2e latency at {rate} msgs/s':<34} p50 {lat[len(lat) // 2] / 1e6:.2f} ms  "
            f"p99 {lat[int(len(lat) * 0.99)] / 1e6:.2f} ms",
            flush=True,
        )
        # backlog memory
        batches = args.backlog // 200 // args.procs
        run_procs(mpub_worker, [(port, "backlog", batches) for _ in range(args.procs)])
        print(
            f"{f'peak RSS with {batches * 200 * args.procs} backlogged':<34} "
            f"{peak_rss_mb(pid):.1f} MB",
            flush=True,
        )


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
