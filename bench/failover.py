"""Benchmark: how long writes stop when a leader dies, and how long a restarted replica
takes to be back in the ISR (the aims: writes resume within 5 s of a leader's SIGKILL; a
restarted node is back in the ISR within 30 s, also for a 1 GB partition).

Starts a ``LocalCluster`` (etcd, 2 nsqlookupd, 3 nsqd on this machine, leases of
``--lease-ttl``), one topic with one partition and three replicas.

- ``--rounds`` kills: a producer pinned to a node that does not lead publishes one MPUB
  after another (forwarded to the leader); the leader is SIGKILLed; the figure is the
  longest time a publish waited around the kill (from the kill to the first publish
  answered by the new leader, at worst). The killed node is restarted and rejoins before
  the next round.
- Rejoin: the partition is filled to ``--rejoin-mb`` MB, a follower is SIGKILLed, more is
  published, it is restarted; the figure is the time from its restart to the ISR naming it
  again (it catches up the difference and whatever came meanwhile).

Prints one line per round and a summary. Not run in CI.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import threading
import time

from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.wire import WireClient, mpub

TOPIC = "failover"


def leader_of(cluster: LocalCluster) -> int:
    return cluster.node_index(cluster.partitions(TOPIC)[0]["id"])


def isr(cluster: LocalCluster) -> list[str]:
    return list(cluster.partitions(TOPIC)[0]["isr"])


def kill_round(cluster: LocalCluster) -> float:
    """The longest wait of a publish across one SIGKILL of the leader (seconds)."""
    leader = leader_of(cluster)
    pinned = (leader + 1) % 3
    client = WireClient(cluster.nodes[pinned].ports["TCP"], timeout=60)
    client.send(b"  V2")
    stop = threading.Event()
    waits: list[tuple[float, float]] = []  # (sent at, answered after)

    def produce() -> None:
        while not stop.is_set():
            sent = time.monotonic()
            client.send(mpub(TOPIC, [b"x" * 100] * 10))
            answer = client.read_frame()
            assert answer == (0, b"OK"), answer
            waits.append((sent, time.monotonic() - sent))

    producer = threading.Thread(target=produce)
    producer.start()
    time.sleep(1.0)
    killed = time.monotonic()
    cluster.kill_nsqd(leader)
    cluster.wait_for(lambda: leader_of(cluster) != leader, 60, "a new leader")
    time.sleep(1.0)
    stop.set()
    producer.join(60)
    client.close()
    gap = max(wait for sent, wait in waits if sent + wait >= killed)
    cluster.restart_nsqd(leader)
    cluster.wait_for(lambda: len(isr(cluster)) == 3, 120, "the killed node back in the ISR")
    return gap


def fill(cluster: LocalCluster, node: int, megabytes: int) -> None:
    client = WireClient(cluster.nodes[node].ports["TCP"], timeout=60)
    client.send(b"  V2")
    frame = mpub(TOPIC, [b"y" * 1000] * 200)
    batches = megabytes * 1_000_000 // (200 * 1000)
    inflight = 0
    for _ in range(batches):
        client.send(frame)
        inflight += 1
        if inflight >= 16:
            assert client.read_frame() == (0, b"OK")
            inflight -= 1
    for _ in range(inflight):
        assert client.read_frame() == (0, b"OK")
    client.close()


def rejoin(cluster: LocalCluster, megabytes: int) -> tuple[float, float]:
    """(seconds from restart to back in the ISR, MB it had to copy)."""
    leader = leader_of(cluster)
    epoch = cluster.partitions(TOPIC)[0]["epoch"]
    started = time.monotonic()
    fill(cluster, leader, megabytes)
    took = time.monotonic() - started
    changes = cluster.partitions(TOPIC)[0]["epoch"] - epoch  # a false failover changes it
    print(
        f"  fill: {megabytes} MB in {took:.1f}s ({megabytes / took:.0f} MB/s replicated),"
        f" replica changes meanwhile: {changes}"
    )
    follower = (leader + 1) % 3
    cluster.kill_nsqd(follower)
    gone = cluster.node_id(follower)
    cluster.wait_for(lambda: gone not in isr(cluster), 60, "the follower out of the ISR")
    extra = max(1, megabytes // 10)
    fill(cluster, leader, extra)
    started = time.monotonic()
    cluster.restart_nsqd(follower)
    cluster.wait_for(lambda: gone in isr(cluster), 600, "the follower back in the ISR")
    return time.monotonic() - started, extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="leader kills")
    parser.add_argument("--rejoin-mb", type=int, default=256, help="partition size (MB)")
    parser.add_argument("--lease-ttl", default="2s", help="nsqd's --etcd-lease-ttl")
    parser.add_argument("--secure", action="store_true", help="mutual TLS between the daemons")
    args = parser.parse_args()
    print(f"failover: {platform.node()}, {args.rounds} leader kills, lease {args.lease_ttl}"
          f"{', mutual TLS' if args.secure else ''}")  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="nsqpy-failover-") as tmp,
        LocalCluster(tmp, lease_ttl=args.lease_ttl, secure=args.secure) as cluster,
    ):
        status, _ = cluster.post(f"/topic/create?topic={TOPIC}&partition_num=1&replicator=3")
        assert status == 200
        cluster.wait_for(lambda: len(isr(cluster)) == 3, 30, "three replicas")
        time.sleep(2)
        gaps = []
        for n in range(args.rounds):
            gap = kill_round(cluster)
            gaps.append(gap)
            print(f"  round {n + 1}: writes stopped for at most {gap:.2f}s")
        print(
            f"leader SIGKILL: longest publish wait median {statistics.median(gaps):.2f}s,"
            f" max {max(gaps):.2f}s over {len(gaps)} rounds"
        )
        took, extra = rejoin(cluster, args.rejoin_mb)
        print(
            f"rejoin: a follower of a {args.rejoin_mb} MB partition, restarted after"
            f" {extra} MB more, back in the ISR {took:.2f}s after its restart"
        )


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
