"""Benchmark: replicated publishing while many other clients are connected to the leader,
against none, same cluster, same run (a commit must cost nothing per idle client).

Starts a ``LocalCluster`` (etcd, one nsqlookupd, three nsqd on this machine), creates a
topic of one partition with three replicas, and publishes MPUB batches to its leader over
one pipelined connection (``--inflight`` batches outstanding; a batch counts once both
followers have it), as ``cluster_publish.py`` does. The rounds take turns: with no other
client, then with ``--idle`` more connections open on the leader (each has sent the
protocol magic and nothing else: a consumer between messages costs the same), closed again
after the round. Prints messages/s of each round and the ratio of the best with idle
clients to the best without.

    .venv/bin/python bench/cluster_idle.py [--idle 3000] [--rounds 2] [--batches 1500]

Each idle connection is a file descriptor in this process and in the leader: ``--idle``
must stay below ``ulimit -n``.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_publish import publish
from nsqpy.testing.cluster import LocalCluster

TOPIC = "idle_bench"


@contextlib.contextmanager
def idle_clients(port: int, count: int, settle: float) -> Iterator[None]:
    """``count`` connections to 127.0.0.1:``port`` that sent the protocol magic and
    nothing else, for the block; ``settle`` seconds after opening them all (the server has
    taken them) and after closing them (it has let them go)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port))
            socks.append(sock)
            sock.sendall(b"  V2")
        time.sleep(settle)
        yield
    finally:
        for sock in socks:
            sock.close()
        if socks:
            time.sleep(settle)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle", type=int, default=3000, help="connections open beside")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--inflight", type=int, default=16)
    args = parser.parse_args()
    if args.idle <= 0:
        parser.error("--idle must be at least 1")
    print(f"# {platform.machine()} {platform.python_implementation()} {platform.python_version()}, "
          f"3 nsqd + 1 nsqlookupd + etcd on this machine; MPUB x{args.batch} of {args.size} B, "
          f"{args.inflight} in flight, 3 replicas; {args.idle} idle clients")  # fmt: skip
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(tmp, lookupds=1, lease_ttl="10s") as cluster,
    ):
        status, _ = cluster.post(f"/topic/create?topic={TOPIC}&partition_num=1&replicator=3")
        assert status == 200, status
        cluster.wait_for(lambda: len(cluster.partitions(TOPIC)[0]["isr"]) == 3, 30, "the ISR")
        port = cluster.nodes[cluster.node_index(cluster.partitions(TOPIC)[0]["id"])].ports["TCP"]
        publish(port, TOPIC, args.batches // 5, args.batch, args.size, args.inflight)  # warm-up
        results: dict[int, list[float]] = {0: [], args.idle: []}
        for _ in range(args.rounds):
            for idle in results:
                with idle_clients(port, idle, settle=0.5):
                    rate = publish(port, TOPIC, args.batches, args.batch, args.size, args.inflight)
                results[idle].append(rate)
                print(f"{idle:>6} idle clients: {rate:>12,.0f} msgs/s", flush=True)
        ratio = max(results[args.idle]) / max(results[0])
        print(f"with {args.idle} idle clients / with none: {ratio:.2f}x (best of {args.rounds})")


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
