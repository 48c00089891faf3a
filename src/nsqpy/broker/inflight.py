"""A message in flight: what a channel partition keeps of it from delivery to FIN, REQ or timeout.

Owns ``InFlight`` (its owner, attempts, deadline, when it was delivered, its publish
timestamp, its body, its record's extension as stored, and whether it came from the log or
the deferred set), the two ``source`` values, and ``push_timeout``: how a channel
partition's heap of deadlines stays proportional to what is in flight. A leaf: imports only the broker's ``Client``, so that the channel
modules, the policy and the features can all name it. Must not import asyncio or any server.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from nsqpy.broker.client import Client

FROM_LOG, FROM_DEFERRED = 0, 1  # where an in-flight message came from
# Stale timeout entries tolerated beyond twice the in-flight count before a rebuild.
TIMEOUT_SLACK = 4096


@dataclass(slots=True)
class InFlight:
    client: Client
    attempts: int
    deadline: int
    delivered: int
    timestamp: int
    body: bytes
    source: int
    ext: bytes = b""  # the record's extension as stored (what extended frames carry)


def stored_ext(item: InFlight) -> bytes | None:
    """The record's stored extension when the in-flight entry has it (b"": none), None when
    it is not known there (a deferred message of an ephemeral channel keeps only its body)."""
    return item.ext if item.ext or item.source == FROM_LOG else None


def push_timeout(
    heap: list[tuple[int, int]], in_flight: dict[int, InFlight], deadline: int, offset: int
) -> None:
    """Remember the deadline the in-flight table already holds for ``offset``.

    FIN, REQ and TOUCH leave their old entries in the heap (skipped when they come
    due); when those outnumber the live ones the heap is rebuilt from the in-flight
    table (which includes this deadline), so it stays proportional to what is in
    flight rather than to what was delivered within one msg_timeout."""
    if len(heap) > 2 * len(in_flight) + TIMEOUT_SLACK:
        heap[:] = [(item.deadline, off) for off, item in in_flight.items()]
        heapq.heapify(heap)
        return
    heapq.heappush(heap, (deadline, offset))
