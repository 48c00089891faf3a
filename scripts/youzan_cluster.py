"""Youzan's own Go client publishing to and consuming from a three-node nsqpy cluster.

    python scripts/youzan_cluster.py YZCLIENT [--count N] [--kill-count N] [--kill-after S]

YZCLIENT is a small driver on youzan/go-nsq (v1.7.12.1-HA) taking
``-lookupd HOST:PORT -topic T -partition P -count N -channel C -ordered=true|false``: it
subscribes to the partition (``Config.EnableOrdered`` makes it ``SUB_ORDERED``), publishes
``N`` numbered messages to it with ``TopicProducerMgr.PublishWithPartitionId``, waits for
them and prints ``published=N consumed=M pub_errors=E dups=D out_of_order=O`` (``consumed``
counts distinct messages), exiting 1 when fewer came back than were acknowledged.

Starts a ``LocalCluster`` (its own etcd member, one nsqlookupd, three nsqd, all on
loopback), creates a topic with Youzan's form (``partition_num=2&replicator=3&multipart=true``)
and runs the driver:

1. on each partition, ordered and not, ``--count`` messages;
2. ordered and not, ``--kill-count`` messages to partition 0 of a new topic, the leader of
   that partition SIGKILLed ``--kill-after`` seconds in and restarted once another node
   leads.

Prints the driver's line for each run and a summary; exits 1 when a run lost an
acknowledged message or, in the first part, delivered anything twice or out of order.
Not run in CI (the driver is not part of this repository).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from functools import partial

from nsqpy.testing.cluster import LocalCluster

FIGURES = re.compile(
    r"published=(\d+) consumed=(\d+) pub_errors=(\d+) dups=(\d+) out_of_order=(\d+)"
)
FORM = "partition_num=2&replicator=3&multipart=true"


def create(cluster: LocalCluster, topic: str) -> None:
    status, doc = cluster.post(f"/topic/create?topic={topic}&{FORM}")
    if status != 200:
        raise SystemExit(f"creating {topic}: {status} {doc}")
    cluster.wait_for(
        lambda: all(len(p["isr"]) == 3 for p in cluster.partitions(topic).values()),
        60,
        f"{topic}'s partitions with three replicas",
    )


def leader(cluster: LocalCluster, topic: str, partition: int) -> int:
    return cluster.node_index(cluster.partitions(topic)[partition]["id"])


def start(args: argparse.Namespace, cluster: LocalCluster, topic: str, partition: int,
          count: int, ordered: bool) -> subprocess.Popen[str]:  # fmt: skip
    argv = [args.yzclient, "-lookupd", cluster.lookupd_http(), "-topic", topic,
            "-partition", str(partition), "-count", str(count),
            "-channel", "ordered" if ordered else "plain", f"-ordered={str(ordered).lower()}",
            "-timeout", f"{args.timeout}s"]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen[str], what: str) -> tuple[int, ...]:
    out, _ = proc.communicate()
    found = FIGURES.search(out)
    if found is None:
        raise SystemExit(f"{what}: the driver printed no figures:\n{out}")
    figures = tuple(int(x) for x in found.groups())
    print(f"{what}: {found.group(0)} (exit {proc.returncode})")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("yzclient")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--kill-count", type=int, default=20000)
    parser.add_argument("--kill-after", type=float, default=4.0)
    parser.add_argument("--timeout", type=int, default=300, help="each driver run's (s)")
    args = parser.parse_args()
    bad = 0
    with (
        tempfile.TemporaryDirectory(prefix="nsqpy-yz-") as tmp,
        LocalCluster(tmp, lookupds=1, lease_ttl="2s") as cluster,
    ):
        create(cluster, "yz")
        for ordered in (True, False):
            for partition in (0, 1):
                what = f"{'ordered' if ordered else 'unordered'}, partition {partition}"
                proc = start(args, cluster, "yz", partition, args.count, ordered)
                published, consumed, errors, dups, disorder = finish(proc, what)
                if (published, consumed, errors, dups, disorder) != (args.count,) * 2 + (0,) * 3:
                    bad += 1
        for ordered in (True, False):
            topic = f"yzkill{'o' if ordered else 'u'}"
            create(cluster, topic)
            victim = leader(cluster, topic, 0)
            proc = start(args, cluster, topic, 0, args.kill_count, ordered)
            try:
                time.sleep(args.kill_after)
                cluster.kill_nsqd(victim)
                moved = partial(lambda t, v: leader(cluster, t, 0) != v, topic, victim)
                cluster.wait_for(moved, 60, "a new leader")
                cluster.restart_nsqd(victim)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            what = f"{'ordered' if ordered else 'unordered'}, leader SIGKILLed"
            published, consumed, _, _, disorder = finish(proc, what)
            if consumed < published or (ordered and disorder):
                bad += 1
    print("every acknowledged message consumed" if not bad else f"{bad} runs fell short")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
