"""Issue 19's proof with real processes: 20 rounds of SIGKILL of the current leader of a
partition while a producer publishes and a consumer consumes through nsqlookupd, then 20
rounds of SIGSTOP/SIGCONT (a pause longer than its lease: another node leads meanwhile,
and the old leader, fenced, must acknowledge nothing it had not committed); no
acknowledged message is lost.

The topic has two partitions of three replicas. The producer is a plain NSQ V2 connection
to any live nsqd (publishes the node does not lead are forwarded to the leader); when its
node is the one killed it connects to another. The consumer is nsqpy's Consumer through
lookupd, in a thread of its own. Each round kills (or pauses) the leader of one partition
(alternating), waits for another to lead, restarts (or resumes) that node and waits until
both partitions have three ISR members again. At the end every body that was answered OK must have been
consumed (duplicates allowed: at least once).
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from nsqpy.client import Consumer, Message
from nsqpy.testing import WireClient, mpub
from nsqpy.testing.cluster import LocalCluster

from .conftest import OwnCluster, create, leaders

ROUNDS = 20
TOPIC = "rounds"


class Producer(threading.Thread):
    """MPUBs of 5 unique bodies, one after another, to any live nsqd."""

    def __init__(self, cluster: LocalCluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stop = threading.Event()
        self.acked: set[bytes] = set()
        self.sent: set[bytes] = set()
        self.refused: list[tuple[int, bytes]] = []
        self.reconnects: list[str] = []  # why the producer connected again

    def run(self) -> None:
        n, node, client = 0, 0, None
        while not self.stop.is_set():
            if client is None:
                node = (node + 1) % 3
                try:
                    client = WireClient(self.cluster.nodes[node].ports["TCP"], timeout=20)
                    client.send(b"  V2")
                except (OSError, KeyError):
                    client = None
                    time.sleep(0.05)
                    continue
            bodies = [b"r%07d" % (n + j) for j in range(5)]
            n += 5
            self.sent.update(bodies)
            try:
                client.send(mpub(TOPIC, bodies))
                answer = client.read_frame()
            except OSError as exc:  # (ConnectionError: its node was killed)
                client.close()
                client = None
                self.reconnects.append(f"nsqd {node}: {type(exc).__name__}")
                continue
            if answer == (0, b"OK"):
                self.acked.update(bodies)
            else:
                self.refused.append(answer)
            time.sleep(0.002)
        if client is not None:
            client.close()


class Consuming(threading.Thread):
    """nsqpy's Consumer through lookupd, on an event loop of its own."""

    def __init__(self, lookupds: list[str]) -> None:
        super().__init__(daemon=True)
        self.lookupds = lookupds
        self.got: set[bytes] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        asyncio.run(self._consume())

    async def _consume(self) -> None:
        async def handler(message: Message) -> None:
            self.got.add(message.body)

        async with Consumer(
            TOPIC, "rounds", handler, lookupd_http_addresses=self.lookupds, max_in_flight=200
        ):
            while not self.stop.is_set():
                await asyncio.sleep(0.1)


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_twenty_leader_faults_lose_no_acknowledged_message(
    own_cluster: OwnCluster, fault: str
) -> None:
    cluster = own_cluster()
    assert create(cluster, TOPIC, partition_num=2, replicator=3, multipart="true") == (200, None)

    def full_isr() -> bool:
        return all(len(p["isr"]) == 3 for p in cluster.partitions(TOPIC).values())

    cluster.wait_for(full_isr, 20, "three ISR members per partition")
    producer, consumer = Producer(cluster), Consuming(cluster.lookupd_https())
    consumer.start()
    producer.start()
    started = time.monotonic()
    try:
        for n in range(ROUNDS):
            before = len(producer.acked)
            cluster.wait_for(lambda b=before: len(producer.acked) > b + 50, 20, "publishing")  # type: ignore[misc]
            partition = n % 2
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
        f"\n{ROUNDS} leader faults ({fault}) in {took:.0f}s: {len(acked)} bodies acknowledged, "
        f"{len(consumer.got)} distinct consumed, producer reconnects {producer.reconnects}, "
        f"refused {set(producer.refused)}"
    )
    assert acked - consumer.got == set(), "acknowledged and never consumed"
    stuck = [r for r in producer.reconnects if "TimeoutError" in r]
    assert stuck == [], "a publish went unanswered for 20 s (a resumed node must answer)"
    assert consumer.got <= producer.sent, "consumed what was never sent"
