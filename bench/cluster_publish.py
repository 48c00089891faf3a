"""Benchmark: publishing to a replicated partition against an unreplicated one, same
cluster, same run (issue 19: replication must not undo group commit).

Starts a ``LocalCluster`` (etcd, 2 nsqlookupd, 3 nsqd, all on this machine), creates a
topic with one replica and one with two (one partition each), and publishes MPUB batches to
each topic's leader over one pipelined TCP connection (``--inflight`` batches outstanding),
counting only acknowledged messages. Prints messages/s and the replicated/plain ratio.
``--sync-every`` etc. are nsqd's defaults (fsync on its schedule, not per batch).
"""

from __future__ import annotations

import argparse
import platform
import socket
import struct
import tempfile
import time

from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.wire import mpub


def publish(port: int, topic: str, batches: int, batch: int, size: int, inflight: int) -> float:
    body = b"x" * size
    frame = mpub(topic, [body] * batch)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"  V2")
    buf = bytearray()
    sent = acked = 0
    started = time.perf_counter()
    while acked < batches:
        while sent < batches and sent - acked < inflight:
            sock.sendall(frame)
            sent += 1
        buf += sock.recv(1 << 16)
        while len(buf) >= 8:
            (length,) = struct.unpack(">I", buf[:4])
            if len(buf) < 4 + length:
                break
            kind, data = struct.unpack(">I", buf[4:8])[0], bytes(buf[8 : 4 + length])
            del buf[: 4 + length]
            if kind == 0 and data == b"_heartbeat_":
                sock.sendall(b"NOP\n")
                continue
            assert kind == 0 and data == b"OK", (kind, data)
            acked += 1
    elapsed = time.perf_counter() - started
    sock.close()
    return batches * batch / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--inflight", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"# {platform.machine()} {platform.python_implementation()} {platform.python_version()}, "
          f"3 nsqd + 2 nsqlookupd + etcd on this machine; MPUB x{args.batch} of {args.size} B, "
          f"{args.inflight} in flight")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(tmp, lease_ttl="10s") as cluster:
        for name, replicas in (("plain", 1), ("replicated", 2)):
            status, _ = cluster.post(
                f"/topic/create?topic={name}&partition_num=1&replicator={replicas}"
            )
            assert status == 200, status
        time.sleep(1.0)  # (the nodes take up their partitions)
        leader = {name: cluster.node_index(cluster.partitions(name)[0]["id"])
                  for name in ("plain", "replicated")}  # fmt: skip
        results: dict[str, list[float]] = {"plain": [], "replicated": []}
        for _ in range(args.rounds):
            for name in ("plain", "replicated"):
                port = cluster.nodes[leader[name]].ports["TCP"]
                rate = publish(port, name, args.batches, args.batch, args.size, args.inflight)
                results[name].append(rate)
        for name, rates in results.items():
            shown = " / ".join(f"{r:,.0f}" for r in rates)
            print(f"{name:<11} {shown} msgs/s")
        ratio = max(results["replicated"]) / max(results["plain"])
        print(f"replicated / plain: {ratio:.2f}x (best of {args.rounds})")


if __name__ == "__main__":
    main()
