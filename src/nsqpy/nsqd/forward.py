"""Publishes a node does not lead, handed to the partition's leader (cluster mode).

A plain NSQ client publishes to whichever nsqd it was given; in a cluster that node may
lead no partition of the topic, or not the one a partitioned ``PUB <topic> <partition>``
names. Rather than ``E_FAILED_ON_NOT_LEADER`` (Youzan's answer, which only Youzan's clients
act on), nsqd forwards the publish to the leader over NSQ's own TCP protocol (nsqpy's
``Producer``, one connection per leader) and answers its client once the leader did: a
forwarded publish is acknowledged exactly when the leader acknowledges it (after every ISR
member has it), and an error of the leader is the client's error.

Which partition: the one named, else the next partition in turn whose leader is live.
During a failover the leader may be gone for a few seconds: the forward is tried again as
the cluster view changes, for at most ``patience`` seconds, then the client gets
``E_FAILED_ON_NOT_LEADER`` (or the publish's own failure when the leader failed it). A
retry after a dropped connection may store the message twice (at least once, as for any
NSQ producer that retries). A forwarded publish is never forwarded again: the receiving
node knows the forwarder by its user agent and answers ``E_FAILED_ON_NOT_LEADER`` when it
does not lead either (views differ for a moment), so publishes never loop.

In a secure cluster (``tls``) each connection to a leader asks for TLS in its IDENTIFY and
shows the node's cluster certificate; the leader, checking it against the cluster's CA,
trusts the connection as a node of the cluster (no AUTH: the client's rights were checked
by the node it published to), and the forwarder checks the leader's the same way.

``close`` (nsqd stopping) ends every forward at once: one waiting for a leader, retrying,
or waiting for its leader's answer is refused with ``E_FAILED_ON_NOT_LEADER`` (the client
publishes again, elsewhere) and no connection is opened after it; ``in_flight`` tells the
stopping server whether any forward is still waiting for its leader.

Imports asyncio, nsqpy's client and errors; never the broker or the handlers.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from nsqpy.client.conn import IdentifyOptions
from nsqpy.client.errors import ClientError
from nsqpy.client.producer import Producer
from nsqpy.errors import NotLeader, ProtocolError
from nsqpy.nsqd.gate import FORWARD_AGENT

log = logging.getLogger("nsqpy.nsqd")

RETRY_INTERVAL = 0.2  # seconds between tries while no leader answers


@dataclass(frozen=True)
class Route:
    """Where a publish to (topic, partition) goes now: the leader's TCP address."""

    partition: int
    address: str


# (topic, partition or -1 for any, partitions tried already) -> a Route, or None when no
# partition of the topic has a live leader elsewhere now
Resolve = Callable[[str, int, frozenset[int]], Route | None]


class Forwarder:
    """Forwards publishes to leaders; ``close`` ends every connection."""

    def __init__(
        self, resolve: Resolve, *, patience: float = 10.0, connect_timeout: float = 1.0
    ) -> None:
        self._resolve = resolve
        self.patience = patience
        self.connect_timeout = connect_timeout
        self._producers: dict[str, Producer] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()  # set by ``close``: every forward ends
        self.in_flight = 0  # publishes being forwarded now
        self.forwarded = 0  # messages answered OK through a leader
        self.failed = 0  # forwards that ended in an error for the client
        # In a secure cluster, the context of its mutual TLS: each connection to a leader is
        # upgraded to it after IDENTIFY (the leader then trusts it as a node: no AUTH).
        self.tls: ssl.SSLContext | None = None

    async def publish(
        self, topic: str, partition: int, bodies: Sequence[bytes], defer_ms: int = 0
    ) -> None:
        """PUB/MPUB/DPUB ``bodies`` to ``topic`` through the leader; returns once it
        answered OK. Raises the leader's error (a ProtocolError) or NotLeader."""

        async def send(producer: Producer, route: Route) -> bytes:
            if defer_ms:
                await producer.dpub(topic, defer_ms / 1000, bodies[0])
            elif len(bodies) == 1:
                await producer.pub(topic, bodies[0], partition=route.partition)
            else:
                await producer.mpub(topic, bodies, partition=route.partition)
            return b"OK"

        await self._through(topic, partition, len(bodies), send)

    async def publish_command(
        self, topic: str, partition: int, count: int, encode: Callable[[int], bytes]
    ) -> bytes:
        """A publish the client sent in one of Youzan's forms (PUB_EXT, MPUB_EXT, PUB_TRACE,
        MPUB_TRACE): ``encode(p)`` is that command naming partition ``p``, the one whose
        leader it goes to. Returns the leader's response (``OK``, or the traced reply);
        raises as ``publish``."""

        async def send(producer: Producer, route: Route) -> bytes:
            return await producer.command(encode(route.partition))

        return await self._through(topic, partition, count, send)

    async def _through(
        self,
        topic: str,
        partition: int,
        count: int,
        send: Callable[[Producer, Route], Awaitable[bytes]],
    ) -> bytes:
        self.in_flight += 1
        try:
            deadline = time.monotonic() + self.patience
            tried: set[int] = set()
            last: ProtocolError | None = None
            while True:
                if self._closed.is_set():  # (before a producer is made: none after ``close``)
                    self.failed += 1
                    raise NotLeader(f"publish to {topic} not forwarded: nsqd is exiting")
                route = self._resolve(topic, partition, frozenset(tried))
                if route is None and tried:  # every partition was tried: over again
                    tried.clear()
                    route = self._resolve(topic, partition, frozenset())
                if route is not None:
                    try:
                        # (bounded: a leader that is paused, or answers nothing, must not
                        # hold this publish, and the client's later replies, for ever)
                        async with asyncio.timeout(max(0.05, deadline - time.monotonic())):
                            answer = await send(self._producer(route.address), route)
                    except NotLeader as exc:  # its view and ours differ for a moment
                        last = exc
                        tried.add(route.partition)
                    except ProtocolError:  # the leader's own answer is the client's
                        self.failed += 1
                        raise
                    except (ClientError, OSError) as exc:  # the leader went away (or was silent)
                        last = NotLeader(
                            f"forward to {route.address} failed: {exc or type(exc).__name__}"
                        )
                        tried.add(route.partition)
                        self._drop(route.address)
                    else:
                        self.forwarded += count
                        return answer
                if time.monotonic() >= deadline:
                    self.failed += 1
                    err = last or NotLeader(f"no live leader of topic {topic}")
                    log.warning(
                        "publish to %s not forwarded within %.0fs: %s", topic, self.patience, err
                    )
                    raise err
                try:  # the cluster view catches up meanwhile (``close`` ends the wait)
                    async with asyncio.timeout(RETRY_INTERVAL):
                        await self._closed.wait()
                except TimeoutError:
                    pass
        finally:
            self.in_flight -= 1

    def _producer(self, address: str) -> Producer:
        producer = self._producers.get(address)
        if producer is None:
            identify = IdentifyOptions(
                user_agent=FORWARD_AGENT, tls_v1=self.tls is not None, tls_context=self.tls
            )
            producer = Producer(address, connect_timeout=self.connect_timeout, identify=identify)
            self._producers[address] = producer
        return producer

    def _drop(self, address: str) -> None:
        producer = self._producers.pop(address, None)
        if producer is not None:
            task = asyncio.get_running_loop().create_task(producer.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """End every forward (each raises NotLeader) and close every connection."""
        self._closed.set()
        producers, self._producers = list(self._producers.values()), {}
        for producer in producers:  # (aborted: a TLS close waits for the peer's answer, and
            await producer.close(grace=0)  # the peer may be this node, no longer reading)
        await asyncio.gather(*self._closing, return_exceptions=True)
