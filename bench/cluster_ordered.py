"""Benchmark ordered delivery in a cluster: prints figures, asserts nothing.

Starts a real three-node cluster on this machine (etcd, two nsqlookupd, three nsqd:
``nsqpy.testing.cluster.LocalCluster``) and creates two topics of ``--partitions`` (1)
partitions led by nsqd 0: one with one replica, one with three. Publishes N 200-byte messages to each, then
drains them from nsqd 0 with one client, RDY 500, FIN per message:

  - plain SUB, one replica, then three replicas
  - SUB_ORDERED (one message in flight), one replica, then three: with replicas, each
    next message waits until both followers have taken the cursor that finished the last
    one (CURSORS / CURSORS_ACK), so ordered delivery pays a round trip to the followers
    per message of a partition; a subscriber of several partitions has one message of
    each in flight, so their round trips overlap

With ``--channels C``, each topic has C idle channels more; with ``--deferred D``, one more
channel ("held") whose consumer requeued D messages for 50 minutes before the drains, so
its delayed store holds D entries. Every channel's cursor, deferred entries with it, is
what a follower must keep; an ordered FIN moves only the ordered channel's.

Usage: .venv/bin/python bench/cluster_ordered.py [--messages N] [--partitions P]
    [--channels C] [--deferred D]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.wire import WireClient
from partitions import drain, publish

HOLD_MS = 3_000_000  # (50 minutes: the requeued messages stay deferred through the run)


def create(cluster: LocalCluster, topic: str, partitions: int, replicas: int) -> None:
    query = urlencode({
        "topic": topic, "partition_num": partitions, "replicator": replicas,
        "multipart": "true", "suggest_leader": cluster.node_id(0),
    })  # fmt: skip
    status, body = cluster.post(f"/topic/create?{query}", None)
    if status != 200:
        raise SystemExit(f"create {topic}: {status} {body}")

    def led_by_node_0() -> bool:
        parts = cluster.partitions(topic)
        return len(parts) == partitions and all(
            cluster.node_index(p["id"]) == 0 and len(p["isr"]) == replicas for p in parts.values()
        )

    def placed() -> bool:
        parts = cluster.partitions(topic)
        return len(parts) == partitions and all(len(p["isr"]) == replicas for p in parts.values())

    # (the coordinator spreads the leads: the ones elsewhere are moved to nsqd 0)
    cluster.wait_for(placed, 30, f"{topic}'s partitions with {replicas} in the ISR")
    for number, info in cluster.partitions(topic).items():
        if cluster.node_index(info["id"]) != 0:
            move = urlencode({
                "topic": topic, "partition": number, "move_from": info["id"],
                "move_to": cluster.node_id(0), "move_leader": str(replicas > 1).lower(),
            })  # fmt: skip
            status, body = cluster.post(f"/topic/partition/move?{move}", None)
            if status != 200:
                raise SystemExit(f"move {topic}/{number}: {status} {body}")
    cluster.wait_for(led_by_node_0, 60, f"{topic} led by nsqd 0 with {replicas} in the ISR")


def hold(port: int, topic: str, channel: str, count: int) -> None:
    """Take ``count`` messages of ``channel`` and requeue each for ``HOLD_MS``."""
    wire = WireClient(port, timeout=60)
    wire.send(b"  V2")
    wire.send(f"SUB {topic} {channel}\n".encode())
    assert wire.read_frame() == (0, b"OK")
    wire.send(f"RDY {min(count, 2500)}\n".encode())  # (nsqd's --max-rdy-count; a REQ frees one)
    held = 0
    while held < count:
        kind, data = wire.read_frame()
        if kind == 2:
            wire.send(b"REQ " + data[10:26] + f" {HOLD_MS}\n".encode())
            held += 1
        elif data == b"_heartbeat_":
            wire.send(b"NOP\n")
    wire.close()  # (after the REQs it sent: nsqd takes them first)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=1, help="of each topic, all led by nsqd 0")
    ap.add_argument("--channels", type=int, default=0, help="idle channels more on each topic")
    ap.add_argument("--deferred", type=int, default=0, help="messages held by one channel more")
    args = ap.parse_args()
    n, parts = args.messages, args.partitions
    if args.deferred > n:
        ap.error("--deferred holds some of the --messages published: at most that many")
    print(f"# nsqpy ordered delivery in a cluster: {platform.node()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; {n} messages of 200 bytes, "
          f"{parts} partition(s), {args.channels} idle channel(s), {args.deferred} messages "
          "held deferred by another, all processes on this machine")  # fmt: skip
    channels = ["plain", "ordered", *(f"idle{i}" for i in range(args.channels))]
    if args.deferred:
        channels.append("held")
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp)) as cluster:
        port = cluster.nodes[0].ports["TCP"]
        for replicas in (1, 3):
            topic = f"r{replicas}"
            create(cluster, topic, parts, replicas)
            for channel in channels:
                status, _ = cluster.request(
                    "POST", cluster.nsqd_http(0), f"/channel/create?topic={topic}&channel={channel}"
                )
                if status != 200:
                    raise SystemExit(f"channel {topic}/{channel}: {status}")
            publish(port, topic, n, extended=False)
            if args.deferred:
                hold(port, topic, "held", args.deferred)
        time.sleep(1.5)  # the channels' cursors reach the followers
        results: dict[tuple[str, int], float] = {}
        for verb, channel in (("SUB", "plain"), ("SUB_ORDERED", "ordered")):
            for replicas in (1, 3):
                seconds = drain(port, f"r{replicas}", channel, n, verb, False)
                results[(verb, replicas)] = n / seconds
                print(f"{verb:<12} {replicas} replica(s) {n / seconds:>12,.0f} msgs/s")
        for verb in ("SUB", "SUB_ORDERED"):
            ratio = results[(verb, 3)] / results[(verb, 1)]
            print(f"{verb:<12} three replicas / one: {ratio:.2f}x")


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
