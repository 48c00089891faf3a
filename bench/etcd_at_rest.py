"""Benchmark: what a cluster at rest costs etcd and each nsqd.

Starts a ``LocalCluster`` (its own etcd, one nsqlookupd, three nsqd, leases of 3 s as in
production), creates ``--topics`` topics of ``--partitions`` partitions x 3 replicas,
waits until every ISR is full, lets it settle, then for ``--seconds`` publishes nothing
and measures:

- etcd revisions per second (every write to etcd is one);
- etcd's database: its file size and the part in use, and their growth extrapolated to an
  hour;
- each nsqd's CPU (user + system, from /proc) as a share of one core;
- each nsqd's writes of its report (``/info``'s ``node_reports_written``);
- what etcd sends its clients (its /metrics), mostly the watch events every daemon gets.

Then ``--busy-seconds`` with a producer publishing to every partition in turn (one MPUB of
10 messages per partition per round), and the same figures: a busy cluster writes its
reports as ends move, and the coordinator's compaction (``--compact-interval``) keeps the
database flat. Prints one line per figure. Not run in CI.

    .venv/bin/python bench/etcd_at_rest.py                  # ~3 minutes
    .venv/bin/python bench/etcd_at_rest.py --seconds 600    # a longer rest
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import threading
import time
import urllib.request
from typing import Any

from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.wire import WireClient, mpub

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def etcd_status(cluster: LocalCluster) -> dict[str, Any]:
    status = cluster.etcd.status(0, timeout=5.0)
    assert status is not None, "etcd does not answer"
    return status


def etcd_sent_bytes(cluster: LocalCluster) -> float:
    """What etcd has sent its clients (watch events included), from its /metrics."""
    url = f"http://{cluster.etcd.endpoint(0)}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("etcd_network_client_grpc_sent_bytes_total")
    )


def settled(cluster: LocalCluster, topics: list[str], partitions: int) -> bool:
    for topic in topics:
        parts = cluster.partitions(topic)
        if len(parts) != partitions or any(len(p["isr"]) != 3 for p in parts.values()):
            return False
    return True


def measure(cluster: LocalCluster, seconds: float, what: str) -> None:
    pids = [node.pid for node in cluster.nodes]
    reports = [int(cluster.nsqd_json(i, "/info")["node_reports_written"]) for i in range(3)]
    before, cpu = etcd_status(cluster), [cpu_seconds(pid) for pid in pids]
    sent = etcd_sent_bytes(cluster)
    start = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - start
    after, cpu_after = etcd_status(cluster), [cpu_seconds(pid) for pid in pids]
    sent = etcd_sent_bytes(cluster) - sent
    revisions = int(after["header"]["revision"]) - int(before["header"]["revision"])
    size = int(after.get("dbSize", 0)) - int(before.get("dbSize", 0))
    in_use = int(after.get("dbSizeInUse", 0)) - int(before.get("dbSizeInUse", 0))
    per_hour = 3600 / elapsed
    print(f"{what}: {elapsed:.0f} s")
    print(f"  etcd revisions/s          {revisions / elapsed:.3f}  ({revisions} revisions)")
    print(f"  etcd db size              {int(after.get('dbSize', 0)) / 1e6:.2f} MB, "
          f"growth {size * per_hour / 1e6:+.2f} MB/hour")  # fmt: skip
    print(f"  etcd db in use            {int(after.get('dbSizeInUse', 0)) / 1e6:.2f} MB, "
          f"growth {in_use * per_hour / 1e6:+.2f} MB/hour")  # fmt: skip
    print(f"  etcd sent to its clients  {sent / elapsed / 1e3:.1f} kB/s, "
          f"{sent / elapsed / 1e3 / 4:.1f} kB/s per daemon (4 watch it)")  # fmt: skip
    shares = [(b - a) / elapsed * 100 for a, b in zip(cpu, cpu_after, strict=True)]
    print("  nsqd CPU, % of a core     " + "  ".join(f"{s:.1f}" for s in shares))
    now = [int(cluster.nsqd_json(i, "/info")["node_reports_written"]) for i in range(3)]
    print("  reports written           " + "  ".join(
        str(b - a) for a, b in zip(reports, now, strict=True)))  # fmt: skip


def busy(cluster: LocalCluster, topics: list[str], partitions: int, stop: threading.Event) -> None:
    """MPUBs of 10 small messages to every partition in turn, through each one's leader."""
    clients: dict[int, WireClient] = {}
    sent = 0
    while not stop.is_set():
        for topic in topics:
            for p, entry in cluster.partitions(topic).items():
                node = cluster.node_index(entry["id"])
                client = clients.get(node)
                if client is None:
                    client = clients[node] = WireClient(
                        cluster.nodes[node].ports["TCP"], timeout=30
                    )
                    client.send(b"  V2")
                client.send(mpub(topic, [b"m" * 100] * 10, partition=p))
                assert client.read_frame() == (0, b"OK")
                sent += 10
                if stop.is_set():
                    break
    for client in clients.values():
        client.close()
    print(f"  (published {sent} messages)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=60.0, help="at rest")
    parser.add_argument("--busy-seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=15.0)
    parser.add_argument("--compact-interval", default="30s", help="nsqlookupd's")
    args = parser.parse_args()
    print(f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="nsqpy-bench-") as tmp:
        cluster = LocalCluster(
            tmp, nodes=3, lookupds=1, lease_ttl="3s",
            lookupd_flags=[f"--etcd-compact-interval={args.compact_interval}"],
        )  # fmt: skip
        with cluster:
            topics = [f"rest{i}" for i in range(args.topics)]
            start = time.monotonic()
            for topic in topics:
                status, body = cluster.post(
                    f"/topic/create?topic={topic}&partition_num={args.partitions}"
                    "&replicator=3&multipart=true"
                )
                assert status == 200, body
            cluster.wait_for(lambda: settled(cluster, topics, args.partitions), 300, "ISR full")
            print(f"{args.topics} topics x {args.partitions} partitions x 3 replicas: every "
                  f"ISR full after {time.monotonic() - start:.1f} s")  # fmt: skip
            time.sleep(args.settle)
            measure(cluster, args.seconds, "at rest")
            if args.busy_seconds > 0:
                stop = threading.Event()
                producer = threading.Thread(
                    target=busy, args=(cluster, topics, args.partitions, stop)
                )
                producer.start()
                try:
                    measure(cluster, args.busy_seconds, "busy")
                finally:
                    stop.set()
                    producer.join()


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
