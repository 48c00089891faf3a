"""The values and errors of ``nsqpy.cluster.etcd`` (re-exported there; import them from
there): ``KV``, ``Event``, the txn parts ``Compare``, ``PutOp``, ``DeleteOp``, the error
tree, and the endpoint parsing that builds gRPC's multi-address target.

Error tree::

    EtcdError
    ├── EtcdUnavailable   no member answered within the deadline (or the client is closed)
    └── Compacted         a watch's next revision was compacted away: reload and re-watch

Imports only the standard library.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal


class EtcdError(Exception):
    """Base of the errors of this module."""


class EtcdUnavailable(EtcdError):
    """No etcd member answered within the deadline; a conditional write's outcome is then
    unknown (re-read before trying again)."""


class Compacted(EtcdError):
    """A watch's revision is no longer in etcd's history: reload the state and watch again
    from the revision of that read + 1."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"etcd history compacted up to revision {compact_revision}")
        self.compact_revision = compact_revision


@dataclass(frozen=True)
class KV:
    """One key as etcd holds it; ``lease`` is 0 when no lease is attached."""

    key: str
    value: bytes
    mod_revision: int
    create_revision: int
    lease: int = 0
    version: int = 0


@dataclass(frozen=True)
class Event:
    """A change seen by a watch; a delete's ``kv`` has an empty value and its
    ``mod_revision`` is the revision of the deletion."""

    kind: Literal["put", "delete"]
    kv: KV


CompareTarget = Literal["create", "mod", "version", "value"]
CompareOp = Literal["==", "!=", "<", ">"]


@dataclass(frozen=True)
class Compare:
    """A condition of a ``txn``: ``<target> of key <op> value``."""

    key: str
    target: CompareTarget
    op: CompareOp
    value: int | bytes

    @classmethod
    def absent(cls, key: str) -> Compare:
        return cls(key, "create", "==", 0)

    @classmethod
    def present(cls, key: str) -> Compare:
        return cls(key, "create", ">", 0)

    @classmethod
    def mod_is(cls, key: str, mod_revision: int) -> Compare:
        return cls(key, "mod", "==", mod_revision)


@dataclass(frozen=True)
class PutOp:
    """A put inside a ``txn``."""

    key: str
    value: bytes
    lease: int | None = None


@dataclass(frozen=True)
class DeleteOp:
    """A delete inside a ``txn``: the key, or every key under it with ``prefix``."""

    key: str
    prefix: bool = False


TxnOp = PutOp | DeleteOp


def grpc_target(addresses: Sequence[tuple[str, int]]) -> str:
    """gRPC's multi-address target for resolved ``(ip, port)`` pairs:
    ``ipv4:a:p,b:p`` (or ``ipv6:[a]:p,…``); every address must be of one family."""
    if not addresses:
        raise ValueError("no etcd endpoint given")
    v6 = {ipaddress.ip_address(ip).version == 6 for ip, _ in addresses}
    if len(v6) > 1:
        raise ValueError(f"etcd endpoints mix IPv4 and IPv6: {list(addresses)}")
    if v6.pop():
        return "ipv6:" + ",".join(f"[{ip}]:{port}" for ip, port in addresses)
    return "ipv4:" + ",".join(f"{ip}:{port}" for ip, port in addresses)


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port`` (an ``http://`` prefix allowed, as etcdctl takes) → (host, port)."""
    text = endpoint.strip().removeprefix("http://")
    host, sep, port = text.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad etcd endpoint {endpoint!r}: want host:port")
    return host.strip("[]"), int(port)


async def resolve(endpoints: Sequence[str]) -> list[tuple[str, int]]:
    """Every endpoint's first address, IPv4 preferred."""
    loop = asyncio.get_running_loop()
    found = []
    for endpoint in endpoints:
        host, port = parse_endpoint(endpoint)
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        if not infos:
            raise ValueError(f"etcd endpoint {endpoint!r} does not resolve")
        infos.sort(key=lambda info: info[0] != socket.AF_INET)
        found.append((str(infos[0][4][0]), port))
    return found


LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class CallLatency:
    """How long the calls to etcd took, answered or not (retries included), by kind (the
    first word of the call's name: get, put, txn, delete, lease, compact...): for each, a
    count per upper bound of ``LATENCY_BUCKETS`` (cumulative, as Prometheus' histograms), the
    sum in seconds and the count."""

    def __init__(self) -> None:
        self.kinds: dict[str, tuple[list[int], list[float]]] = {}

    def record(self, what: str, seconds: float) -> None:
        kind = what.split(" ", 1)[0]
        found = self.kinds.get(kind)
        if found is None:
            found = self.kinds[kind] = ([0] * len(LATENCY_BUCKETS), [0.0, 0.0])
        counts, totals = found
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                counts[i] += 1
        totals[0] += seconds
        totals[1] += 1

    def snapshot(self) -> dict[str, tuple[list[int], float, int]]:
        """kind -> (cumulative counts per bucket, sum in seconds, count)."""
        return {k: (list(c), t[0], int(t[1])) for k, (c, t) in self.kinds.items()}
