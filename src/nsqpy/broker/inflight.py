"""A message in flight: what a channel partition keeps of it from delivery to FIN, REQ or timeout.

Owns ``InFlight`` (its owner, attempts, deadline, when it was delivered, its publish
timestamp, its body, its record's extension as stored, and whether it came from the log or
the deferred set) and the two
``source`` values. A leaf: imports only the broker's ``Client``, so that the channel
modules, the policy and the features can all name it. Must not import asyncio or any server.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsqpy.broker.client import Client

FROM_LOG, FROM_DEFERRED = 0, 1  # where an in-flight message came from


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
