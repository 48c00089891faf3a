"""What nsqd's HTTP handlers share: the daemon they act on, and a request's arguments and body.

``HttpHost`` is what the publishing and action handlers (``nsqd.http``,
``nsqd.http_extend``) use of nsqd: the broker, the options, publishing through the group
commit, and the hook an action calls after changing delivery state. ``NsqdServer`` is one;
no handler module names it.

The preludes read a request the way nsqd's Go code does and return what they read or raise
``HttpError`` (``nsq_middleware`` writes NSQ's V1 error): query arguments as Go's
``url.ParseQuery`` reads them (``httpapi``; malformed: logged, 400 INVALID_REQUEST), the
``topic`` (400 MISSING_ARG_TOPIC, then INVALID_TOPIC on topic routes), the ``partition``
(youzan's: a decimal number, -1 for none, else 400 INVALID_ARG_PARTITION; it must name a
partition of the topic, of a topic that does not exist yet 0, else 404
PARTITION_NOT_FOUND; checked before the topic is created), and a message body (413
MSG_TOO_BIG, 400 MSG_EMPTY). Imports aiohttp, ``nsqpy.httpapi``, ``nsqd.params`` and the
broker; never the server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from typing import Protocol, TypeVar

from aiohttp import web

from nsqpy import httpapi
from nsqpy.broker.broker import Broker, Placement
from nsqpy.broker.topic import MAX_PARTITIONS, Topic
from nsqpy.errors import (
    BadPartition,
    NotLeader,
    NotWritable,
    ProtocolError,
    StorageError,
    TopicNotExist,
)
from nsqpy.httpapi import Args, HttpError, first
from nsqpy.nsqd.gate import ABSENT, HERE, TopicGate
from nsqpy.nsqd.params import parse_int64
from nsqpy.options import NsqdOptions
from nsqpy.protocol.names import is_ephemeral, valid_topic_name
from nsqpy.storage import Entry

log = logging.getLogger("nsqpy.nsqd")
T = TypeVar("T")


class HttpHost(Protocol):
    """What nsqd's publishing and action handlers use of the daemon."""

    @property
    def broker(self) -> Broker: ...

    @property
    def opts(self) -> NsqdOptions: ...

    async def publish_and_wait(
        self,
        topic: Topic,
        bodies: list[bytes],
        deliver_at: int,
        failed: type[ProtocolError],
        *,
        entries: Sequence[Entry] = ...,
        partition: int = ...,
        key: bytes = ...,
        source: str = ...,
        trace_id: int = ...,
    ) -> Placement:
        """Append, then wait for the group commit that covers it."""
        ...

    def after_change(self) -> None:
        """An action changed delivery state: write whatever connections now have."""
        ...

    @property
    def cluster(self) -> TopicGate | None:
        """In a cluster: where topics live (``nsqd.gate``); None on a single node."""
        ...


def query_args(request: web.Request) -> Args:
    """The query arguments as nsqd's url.ParseQuery reads them; 400 INVALID_REQUEST if bad
    (and one log line, as nsqd's)."""
    return httpapi.query_args(request, log_to=log)


async def read_at_most(request: web.Request, limit: int) -> bytes:
    """The body, or its first ``limit`` bytes (StreamReader.read(n) may return less)."""
    chunks: list[bytes] = []
    total = 0
    while total < limit:
        chunk = await request.content.read(limit - total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


async def read_message(request: web.Request, limit: int) -> bytes:
    """One message's body, as /pub reads it: 413 MSG_TOO_BIG past ``limit`` bytes (by its
    Content-Length, or as read), 400 MSG_EMPTY when empty."""
    if request.content_length is not None and request.content_length > limit:
        raise HttpError(413, "MSG_TOO_BIG")
    body = await read_at_most(request, limit + 1)
    if len(body) > limit:
        raise HttpError(413, "MSG_TOO_BIG")
    if not body:
        raise HttpError(400, "MSG_EMPTY")
    return body


def partition_arg(args: Args) -> int:
    """The ``partition`` argument: -1 when absent, else a partition number."""
    raw = first(args, "partition")
    if raw is None or raw == "-1":
        return -1
    value = parse_int64(raw)
    if value is None or not 0 <= value <= MAX_PARTITIONS:
        raise HttpError(400, "INVALID_ARG_PARTITION")
    return value


def checked_partition(broker: Broker, args: Args, topic_name: str) -> int:
    """``partition_arg``, and 404 PARTITION_NOT_FOUND unless the topic has it."""
    partition = partition_arg(args)
    try:
        broker.check_partition(topic_name, partition)
    except TopicNotExist:
        raise HttpError(404, "PARTITION_NOT_FOUND") from None
    return partition


def named_topic_args(
    request: web.Request, invalid: str | None = "INVALID_TOPIC"
) -> tuple[Args, str]:
    """The arguments and the ``topic`` name (MISSING_ARG_TOPIC), checked unless
    ``invalid`` is None (NSQ answers INVALID_TOPIC on topic routes and
    INVALID_ARG_TOPIC on channel ones)."""
    args = query_args(request)
    name = first(args, "topic")
    if name is None:
        raise HttpError(400, "MISSING_ARG_TOPIC")
    if invalid is not None and not valid_topic_name(name):
        raise HttpError(400, invalid)
    return args, name


async def cluster_topic(gate: TopicGate, name: str) -> bool:
    """True when the topic is usable here, created through the coordinator when the
    cluster lacks it: 404 ``E_TOPIC_NOT_EXIST`` when it cannot be (youzan's answer). False
    when only other nodes hold it (a publish, which goes to a leader)."""
    if is_ephemeral(name):
        return True
    where = gate.where(name)
    if where == ABSENT:
        try:
            await gate.prepare(name)
        except ProtocolError as exc:
            raise HttpError(404, exc.code) from None
        where = gate.where(name)
    return where == HERE


async def publish_target(host: HttpHost, request: web.Request) -> tuple[Args, Topic | str, int]:
    """For a publish (nsqd's getTopicFromQuery): arguments, a valid topic name, the topic
    (created; in a cluster through the coordinator, ``cluster_topic``) and the
    ``partition`` argument, checked before creating. In a cluster, a topic held only by
    other nodes comes back as its name (the publish is forwarded to a leader, which checks
    the partition)."""
    args, name = named_topic_args(request)
    if host.cluster is not None and not await cluster_topic(host.cluster, name):
        return args, name, partition_arg(args)
    partition = checked_partition(host.broker, args, name)
    return args, _created(host.broker, name), partition


async def forwarded(call: Awaitable[T]) -> T:
    """The leader's answer to a publish forwarded to it (``TopicGate.forward*``), its
    failures as HTTP errors: 400 with the leader's code (not leader, not writable), 404
    PARTITION_NOT_FOUND, 503 EXITING for any other (nsqd answers a failed put so)."""
    try:
        return await call
    except (NotLeader, NotWritable) as exc:
        raise HttpError(400, exc.code) from None
    except (BadPartition, TopicNotExist):
        raise HttpError(404, "PARTITION_NOT_FOUND") from None
    except ProtocolError:
        raise HttpError(503, "EXITING") from None


def _created(broker: Broker, name: str) -> Topic:
    try:
        return broker.topic(name)
    except StorageError:  # it could not be created (health NOK): as a failed put
        raise HttpError(503, "EXITING") from None
