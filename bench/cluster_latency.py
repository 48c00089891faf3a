"""Benchmark: publish latency with replication against without, same cluster, same run.

Starts a ``LocalCluster`` (etcd, two nsqlookupd, three nsqd on this machine) and creates
two topics of one partition led by nsqd 0, one with one replica and one with three. One
producer publishes single PUBs of ``--size`` bytes to the leader at ``--rate`` messages a
second for ``--seconds`` on one connection, each when it is due whether or not the ones
before it are answered; a publish's latency is from the moment it was due to its OK (a
publish held up counts the wait: no coordinated omission). A replicated PUB is answered once both followers have it. The
two topics take turns, ``--rounds`` times (A B A B). Prints p50, p90, p99, p99.9 and the
largest of each round, the CPU each nsqd spent per PUB in it (from ``/proc``: the leader,
nsqd 0, then the other two, which follow the replicated topic), and the ratio of the
replicated p99 to the plain one (best round of each).

    .venv/bin/python bench/cluster_latency.py [--rate 2000] [--seconds 10] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_ordered import create
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.wire import WireClient, pub


def quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(port: int, topic: str, rate: float, seconds: float, size: int) -> list[float]:
    """Each publish's latency (ms), from when it was due to its OK. A sender sends each PUB
    when it is due, whatever is still unanswered (as a producer whose callers publish at
    that rate would); the answers come in order on the connection."""
    client = WireClient(port, timeout=30)
    client.send(b"  V2")
    frame = pub(topic, b"x" * size)
    count = int(rate * seconds)
    due_at: list[float] = []
    latencies: list[float] = []
    start = time.perf_counter() + 0.01

    def send() -> None:
        for i in range(count):
            due = start + i / rate
            while (now := time.perf_counter()) < due:
                time.sleep(min(due - now, 0.0005))
            due_at.append(due)
            client.send(frame)

    sender = threading.Thread(target=send)
    sender.start()
    for i in range(count):
        answer = client.read_frame()
        done = time.perf_counter()
        if answer != (0, b"OK"):
            raise SystemExit(f"PUB to {topic}: {answer}")
        latencies.append((done - due_at[i]) * 1000)
    sender.join()
    client.close()
    return sorted(latencies)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    print(f"# one producer, PUB of {args.size} B at {args.rate:,.0f}/s for {args.seconds:g} s, "
          "pipelined; 3 nsqd + 2 nsqlookupd + etcd on this machine")  # fmt: skip
    p99: dict[int, list[float]] = {1: [], 3: []}
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp)) as cluster:
        port = cluster.nodes[0].ports["TCP"]
        for replicas in (1, 3):
            create(cluster, f"lat{replicas}", 1, replicas)
        run(port, "lat1", args.rate, 1, args.size)  # (warm up: connections, first segment)
        run(port, "lat3", args.rate, 1, args.size)
        pids = [node.proc.pid for node in cluster.nodes if node.proc is not None]
        for n in range(args.rounds):
            for replicas in (1, 3):
                before = [cpu_seconds(pid) for pid in pids]
                got = run(port, f"lat{replicas}", args.rate, args.seconds, args.size)
                used = [
                    (cpu_seconds(pid) - b) * 1e6 / len(got)
                    for pid, b in zip(pids, before, strict=True)
                ]
                p99[replicas].append(quantile(got, 0.99))
                print(f"round {n + 1} replicas={replicas}: p50 {quantile(got, 0.5):.3f} ms, "
                      f"p90 {quantile(got, 0.9):.3f}, p99 {quantile(got, 0.99):.3f}, "
                      f"p99.9 {quantile(got, 0.999):.3f}, max {got[-1]:.3f}, "
                      f"mean {statistics.fmean(got):.3f}; CPU per PUB: leader "
                      f"{used[0]:.0f} µs, followers {', '.join(f'{u:.0f}' for u in used[1:])}")  # fmt: skip
    best1, best3 = min(p99[1]), min(p99[3])
    print(
        f"p99 replicated(3) / plain: {best3 / best1:.2f}x ({best3:.3f} ms / {best1:.3f} ms, "
        "best round of each)"
    )


if __name__ == "__main__":
    main()
