"""Traffic that runs while a test disturbs a cluster: a producer and a consumer, each in a
thread of its own, recording every body sent, acknowledged and consumed.

- ``Producer``: MPUBs of 5 unique bodies, one after another, over a plain V2 connection to
  any live nsqd (a publish the node does not lead is forwarded); when its node goes away it
  connects to the next one. ``ack_times`` (monotonic) lets a test measure write gaps.
- ``Consuming``: nsqpy's Consumer through lookupd, on an event loop of its own.

``check_nothing_lost`` waits until every acknowledged body was consumed, stops both and
asserts at-least-once: nothing acknowledged missing, nothing consumed that was never sent.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

from nsqpy.client import Consumer, Message
from nsqpy.testing import WireClient, mpub
from nsqpy.testing.cluster import LocalCluster


class Producer(threading.Thread):
    """MPUBs of 5 unique bodies to ``topic`` (to ``partition``, if given), one after another,
    to any live nsqd."""

    def __init__(
        self, cluster: LocalCluster, topic: str, prefix: bytes = b"r", partition: int | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.topic = topic
        self.prefix = prefix
        self.partition = partition
        self.stop = threading.Event()
        self.acked: set[bytes] = set()
        self.sent: set[bytes] = set()
        self.ack_times: list[float] = []
        self.refused: list[tuple[int, bytes]] = []
        self.reconnects: list[str] = []  # why the producer connected again

    def run(self) -> None:
        n, node, client = 0, 0, None
        while not self.stop.is_set():
            if client is None:
                node = (node + 1) % len(self.cluster.nodes)
                try:
                    client = WireClient(self.cluster.nodes[node].ports["TCP"], timeout=20)
                    client.send(b"  V2")
                except (OSError, KeyError):
                    client = None
                    time.sleep(0.05)
                    continue
            bodies = [self.prefix + b"%07d" % (n + j) for j in range(5)]
            n += 5
            self.sent.update(bodies)
            try:
                client.send(mpub(self.topic, bodies, self.partition))
                answer = client.read_frame()
            except OSError as exc:  # (ConnectionError: its node was stopped)
                client.close()
                client = None
                self.reconnects.append(f"nsqd {node}: {type(exc).__name__}")
                continue
            if answer == (0, b"OK"):
                self.acked.update(bodies)
                self.ack_times.append(time.monotonic())
            else:
                self.refused.append(answer)
            time.sleep(0.002)
        if client is not None:
            client.close()

    def wait_for_more(self, count: int = 50, timeout: float = 20) -> None:
        before = len(self.acked)
        self.cluster.wait_for(lambda: len(self.acked) >= before + count, timeout, "publishing")

    def longest_gap(self, since: float) -> float:
        """The longest time without an acknowledgement after ``since`` (monotonic)."""
        times = [since, *(t for t in self.ack_times if t > since)]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


class Consuming(threading.Thread):
    """nsqpy's Consumer of ``topic``/``channel`` through lookupd."""

    def __init__(self, lookupds: list[str], topic: str, channel: str = "c") -> None:
        super().__init__(daemon=True)
        self.lookupds = lookupds
        self.topic = topic
        self.channel = channel
        self.got: set[bytes] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        asyncio.run(self._consume())

    async def _consume(self) -> None:
        async def handler(message: Message) -> None:
            self.got.add(message.body)

        async with Consumer(
            self.topic, self.channel, handler, lookupd_http_addresses=self.lookupds,
            max_in_flight=200, lookupd_poll_interval=1.0,
        ):  # fmt: skip
            while not self.stop.is_set():
                await asyncio.sleep(0.1)


def start_traffic(cluster: LocalCluster, topic: str) -> tuple[Producer, Consuming]:
    producer, consumer = Producer(cluster, topic), Consuming(cluster.lookupd_https(), topic)
    consumer.start()
    producer.start()
    producer.wait_for_more()
    return producer, consumer


def check_nothing_lost(
    cluster: LocalCluster, producer: Producer, consumer: Consuming, timeout: float = 60,
    others: tuple[Producer, ...] = (),
) -> None:  # fmt: skip
    """Stop publishing (``producer`` and the ``others``), wait until every acknowledged body
    is consumed, stop consuming; assert at-least-once delivery."""
    producers = (producer, *others)
    for each in producers:
        each.stop.set()
    for each in producers:
        each.join(30)
    acked = set().union(*(each.acked for each in producers))
    sent = set().union(*(each.sent for each in producers))
    try:
        cluster.wait_for(lambda: acked <= consumer.got, timeout, "every acknowledged body consumed")
    except TimeoutError as exc:  # name what is missing: the first few, and how many
        missing = sorted(acked - consumer.got)
        text = f"{exc}: {len(missing)} of {len(acked)} missing, first {missing[:8]}"
        raise TimeoutError(text) from exc
    finally:
        consumer.stop.set()
        consumer.join(30)
    assert all(each.acked for each in producers), "nothing was acknowledged"
    assert acked - consumer.got == set(), "acknowledged and never consumed"
    assert consumer.got <= sent, "consumed what was never sent"
