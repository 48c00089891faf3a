"""The sink's publishing: Arrow batches of rows -> MPUB and deferred PUB calls to nsqd.

Owns ``Publisher``: rows with a ``body`` (binary or string) and optional ``topic``,
``partition_key`` and ``defer_ms`` columns are grouped per (topic, partition key) into
binary ``/mpub`` bodies of at most ``mpubMaxBytes``; rows with ``defer_ms`` > 0 go out
one by one as ``/pub?defer=`` (HTTP DPUB). Each call returns once nsqd has written the
messages. At-least-once: a Spark task that fails after some calls and is retried
publishes those rows again; nothing is ever lost silently. Other columns are ignored.
The connection is any ``NsqdConn`` (``nsqpy.spark.nsqhttp.NsqdHttp`` in production).
Imports the standard library and pyarrow; never pyspark.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from nsqpy.errors import ConfigError, NsqError
from nsqpy.protocol.names import valid_topic_name

MPUB_OVERHEAD = 4  # the count field; each message adds 4 bytes of size before its body


class NsqdConn(Protocol):
    """What ``Publisher`` needs of its connection to nsqd (``NsqdHttp``, or a test double)."""

    def mpub(self, topic: str, bodies: Sequence[bytes], partition_key: bytes = b"") -> None: ...

    def pub(self, topic: str, body: bytes, defer_ms: int = 0) -> None: ...


class BadRow(NsqError):
    """A row the sink cannot publish (no body, empty body, no topic, bad defer)."""


@dataclass
class PublishCounts:
    """What one task published: messages by MPUB and by deferred PUB, and HTTP calls."""

    messages: int = 0
    deferred: int = 0
    calls: int = 0


def check_sink_columns(
    names: Iterable[str], types: dict[str, pa.DataType], has_topic: bool
) -> None:
    """ConfigError unless ``body`` is there with a usable type and a topic can be found."""
    names = list(names)
    if "body" not in names:
        raise ConfigError("the nsq sink needs a column named body (binary or string)")
    body = types["body"]
    if not (pa.types.is_binary(body) or pa.types.is_string(body) or _is_large(body)):
        raise ConfigError(f"column body must be binary or string, not {body}")
    if "topic" not in names and not has_topic:
        raise ConfigError("the nsq sink needs option topic or a column named topic")
    defer = types.get("defer_ms")
    if defer is not None and not pa.types.is_integer(defer):
        raise ConfigError(f"column defer_ms must be an integer type, not {defer}")


def _is_large(t: pa.DataType) -> bool:
    return bool(pa.types.is_large_binary(t) or pa.types.is_large_string(t))


def _as_bytes(column: pa.Array | pa.ChunkedArray) -> list[bytes | None]:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.large_binary())
    return column.to_pylist()  # type: ignore[no-any-return]


@dataclass
class Publisher:
    """Buffers rows per (topic, partition key) and publishes them in MPUB-sized groups."""

    conn: NsqdConn
    default_topic: str | None
    max_bytes: int
    counts: PublishCounts = field(default_factory=PublishCounts)
    _groups: dict[tuple[str, bytes], list[bytes]] = field(default_factory=dict)
    _sizes: dict[tuple[str, bytes], int] = field(default_factory=dict)

    def add(self, batch: pa.RecordBatch) -> None:
        """Publish (or buffer) every row of ``batch``."""
        names = batch.schema.names
        bodies = _as_bytes(batch.column("body"))
        n = len(bodies)
        topics = batch.column("topic").to_pylist() if "topic" in names else [None] * n
        keys = _as_bytes(batch.column("partition_key")) if "partition_key" in names else [None] * n
        defers = batch.column("defer_ms").to_pylist() if "defer_ms" in names else [None] * n
        for body, topic, key, defer in zip(bodies, topics, keys, defers, strict=True):
            name = topic if topic is not None else self.default_topic
            if name is None or not valid_topic_name(name):
                raise BadRow(f"row has no valid topic ({name!r}) and option topic is not set")
            if not body:
                raise BadRow(f"row for topic {name} has an empty or null body")
            if defer is not None and defer < 0:
                raise BadRow(f"row for topic {name} has a negative defer_ms {defer}")
            if defer:
                self.conn.pub(name, body, int(defer))
                self.counts.deferred += 1
                self.counts.calls += 1
                continue
            self._buffer((name, key or b""), body)

    def _buffer(self, group: tuple[str, bytes], body: bytes) -> None:
        size = self._sizes.get(group, MPUB_OVERHEAD)
        if group in self._groups and size + 4 + len(body) > self.max_bytes:
            self._send(group)
            size = MPUB_OVERHEAD
        self._groups.setdefault(group, []).append(body)
        self._sizes[group] = size + 4 + len(body)

    def _send(self, group: tuple[str, bytes]) -> None:
        bodies = self._groups.pop(group, [])
        self._sizes.pop(group, None)
        if not bodies:
            return
        self.conn.mpub(group[0], bodies, partition_key=group[1])
        self.counts.messages += len(bodies)
        self.counts.calls += 1

    def flush(self) -> PublishCounts:
        """Publish everything still buffered; returns the counts."""
        for group in list(self._groups):
            self._send(group)
        return self.counts
