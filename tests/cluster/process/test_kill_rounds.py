"""Leader faults with real processes: 12 rounds, each the SIGKILL or the SIGSTOP/SIGCONT of
the current leader of a partition (a pause longer than its lease: another node leads
meanwhile, and the old leader, fenced, must acknowledge nothing it had not committed),
while a producer publishes and a consumer consumes through nsqlookupd; no acknowledged
message is lost.

The topic has two partitions of three replicas. The producer is a plain NSQ V2 connection
to any live nsqd (publishes the node does not lead are forwarded to the leader); when its
node is the one killed it connects to another. The consumer is nsqpy's Consumer through
lookupd, in a thread of its own. Each round kills (or pauses) the leader of one partition
(alternating; two rounds of kills, then two of pauses, and so on, so each partition sees
both), waits for another to lead, restarts (or resumes) that node and waits until
both partitions have three ISR members again. At the end every body that was answered OK must have been
consumed (duplicates allowed: at least once).
"""

from __future__ import annotations

import time

from .conftest import OwnCluster, create, leaders
from .traffic import Consuming, Producer

# Six of each, in one cluster: the Jepsen harness, in CI too, runs kills and pauses of
# leaders among its other faults with a checker of its own.
ROUNDS = 12
TOPIC = "rounds"


def test_rounds_of_leader_kills_and_pauses_lose_no_acknowledged_message(
    own_cluster: OwnCluster,
) -> None:
    cluster = own_cluster()
    assert create(cluster, TOPIC, partition_num=2, replicator=3, multipart="true") == (200, None)

    def full_isr() -> bool:
        return all(len(p["isr"]) == 3 for p in cluster.partitions(TOPIC).values())

    cluster.wait_for(full_isr, 20, "three ISR members per partition")
    producer, consumer = Producer(cluster, TOPIC), Consuming(cluster.lookupd_https(), TOPIC)
    consumer.start()
    producer.start()
    started = time.monotonic()
    try:
        for n in range(ROUNDS):
            before = len(producer.acked)
            cluster.wait_for(lambda b=before: len(producer.acked) > b + 50, 20, "publishing")  # type: ignore[misc]
            partition = n % 2
            fault = "kill" if n % 4 < 2 else "pause"
            victim = leaders(cluster, TOPIC)[partition]
            if fault == "kill":
                cluster.kill_nsqd(victim)
            else:
                cluster.pause_nsqd(victim)
            try:
                cluster.wait_for(
                    lambda p=partition, v=victim: leaders(cluster, TOPIC)[p] != v,  # type: ignore[misc]
                    20,
                    f"round {n}: partition {partition} led again",
                )
            finally:
                if fault == "pause":
                    cluster.resume_nsqd(victim)
            if fault == "kill":
                cluster.restart_nsqd(victim)
            cluster.wait_for(full_isr, 60, f"round {n}: nsqd {victim} back in the ISR")
    finally:
        producer.stop.set()
        producer.join(30)
    took = time.monotonic() - started
    acked = producer.acked
    try:
        cluster.wait_for(lambda: acked <= consumer.got, 60, "every acknowledged body consumed")
    finally:
        consumer.stop.set()
        consumer.join(30)
    print(
        f"\n{ROUNDS} leader faults (kills and pauses) in {took:.0f}s: {len(acked)} bodies acknowledged, "
        f"{len(consumer.got)} distinct consumed, producer reconnects {producer.reconnects}, "
        f"refused {set(producer.refused)}"
    )
    assert acked - consumer.got == set(), "acknowledged and never consumed"
    stuck = [r for r in producer.reconnects if "TimeoutError" in r]
    assert stuck == [], "a publish went unanswered for 20 s (a resumed node must answer)"
    assert consumer.got <= producer.sent, "consumed what was never sent"
