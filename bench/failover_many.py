"""Benchmark: many partitions at once, created and failed over.

Starts a ``LocalCluster`` (its own etcd, one nsqlookupd, three nsqd, leases of
``--lease-ttl``), then:

- creates ``--topics`` topics of ``--partitions`` partitions x ``--replicas`` replicas
  and times it until every partition took a publish (each partition's leader, as lookupd
  names it, is sent ``PUB <topic> <partition>`` until it answers OK);
- SIGKILLs the nsqd leading the most partitions and times it until every partition took a
  publish again (the lease must expire first: ``--lease-ttl`` after the kill at most),
  and what etcd sent each daemon meanwhile (its watch events, from etcd's /metrics).

Prints both, and how many partitions the killed node led. Not run in CI.

    .venv/bin/python bench/failover_many.py                       # 4 x 255 x 3
    .venv/bin/python bench/failover_many.py --topics 12 --partitions 250
"""

from __future__ import annotations

import argparse
import os
import platform
import struct
import sys
import tempfile
import time
from pathlib import Path

from nsqpy.durations import parse_duration
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.wire import WireClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from etcd_at_rest import etcd_sent_bytes


def writable(cluster: LocalCluster, topics: list[str], partitions: int, deadline: float) -> float:
    """Publish once to every partition through its leader until each answered OK; the
    time it took (seconds, from now). Each round sends every pending partition's PUB to
    its leader without waiting (one connection per node, answers in order), then reads
    the answers: the partitions are tried all at once, not one after another."""
    started = time.monotonic()
    pending = {(t, p) for t in topics for p in range(partitions)}
    clients: dict[int, WireClient] = {}
    try:
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} partitions not writable, e.g. {min(pending)}")
            leaders = {t: cluster.partitions(t) for t in topics}
            sent: dict[int, list[tuple[str, int]]] = {}
            for topic, p in sorted(pending):
                entry = leaders[topic].get(p)
                if entry is None or not entry.get("id"):
                    continue
                try:
                    node = cluster.node_index(entry["id"])
                except (KeyError, ValueError):
                    continue
                if not cluster.running(cluster.nodes[node]):
                    continue
                sent.setdefault(node, []).append((topic, p))
            for node, batch in sent.items():
                try:
                    client = clients.get(node)
                    if client is None:
                        client = clients[node] = WireClient(
                            cluster.nodes[node].ports["TCP"], timeout=30
                        )
                        client.send(b"  V2")
                    client.send(b"".join(b"PUB %s %d\n" % (t.encode(), p)
                                         + struct.pack(">i", 1) + b"x" for t, p in batch))  # fmt: skip
                    for key in batch:
                        if client.read_frame() == (0, b"OK"):
                            pending.discard(key)
                except OSError:
                    clients.pop(node, None)
            if pending:
                time.sleep(0.05)
    finally:
        for client in clients.values():
            client.close()
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=255, help="per topic")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--lease-ttl", default="3s", help="nsqd's --etcd-lease-ttl")
    args = parser.parse_args()
    ttl = parse_duration(args.lease_ttl)
    print(f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"lease {args.lease_ttl}")  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="nsqpy-bench-") as tmp,
        LocalCluster(tmp, nodes=3, lookupds=1, lease_ttl=args.lease_ttl) as cluster,
    ):
        topics = [f"many{i}" for i in range(args.topics)]
        started = time.monotonic()
        for topic in topics:
            status, body = cluster.post(
                f"/topic/create?topic={topic}&partition_num={args.partitions}"
                f"&replicator={args.replicas}&multipart=true"
            )
            assert status == 200, body
        took = writable(cluster, topics, args.partitions, started + 600)
        total = args.topics * args.partitions
        print(f"created {args.topics} x {args.partitions} x {args.replicas}: every "
              f"partition writable {time.monotonic() - started:.1f} s after the first "
              f"create (the last {took:.1f} s publishing)")  # fmt: skip
        cluster.wait_for(
            lambda: all(len(p["isr"]) == args.replicas
                        for t in topics for p in cluster.partitions(t).values()),
            300, "every ISR full",
        )  # fmt: skip
        led: dict[int, int] = {}
        for topic in topics:
            for entry in cluster.partitions(topic).values():
                node = cluster.node_index(entry["id"])
                led[node] = led.get(node, 0) + 1
        victim = max(led, key=lambda n: led[n])
        sent = etcd_sent_bytes(cluster)
        killed = time.monotonic()
        cluster.kill_nsqd(victim)
        writable(cluster, topics, args.partitions, killed + 600)
        after = time.monotonic() - killed
        watchers = len(cluster.nodes) - 1 + len(cluster.lookupds)
        per_daemon = (etcd_sent_bytes(cluster) - sent) / after / watchers / 1000
        print(f"killed the nsqd leading {led[victim]} of {total} partitions: every "
              f"partition writable {after:.1f} s after the kill, at most "
              f"{after - (ttl * 2 / 3):.1f} s after its lease expired (it expires "
              f"{ttl * 2 / 3:.0f}-{ttl:.0f} s after the kill)")  # fmt: skip
        print(f"etcd sent each daemon {per_daemon:.1f} kB/s meanwhile (watch events, "
              f"the elections' and ISR changes' among them; {watchers} daemons)")  # fmt: skip


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
