"""nsqd's HTTP API for partitions, ordered channels and message extensions (youzan's forms).

Owns /topic/create's partition arguments (``partition_num``, ``ordered``, used by
``nsqd.http``), /topic/partition/expand's (``partition_num``: never fewer; a single node
only, a cluster's topics grow through nsqlookupd) and three routes of youzan's nsqd:

    POST /pub_ext?topic=T[&partition=P]&ext=<JSON object>   body: the message
        headers also from request headers ``X-Nsqext-<name>: <value>`` (name lower-cased,
        overriding ``ext``); at least one of the two. 200 ``OK``, or when the headers hold
        ``##trace_id`` the traced reply below. 400 E_INVALID_JSON_HEADER; 400 E_BAD_BODY
        for a header value that is not valid Unicode (TCP's PUB_EXT answers the same).
    POST /pubtrace?topic=T[&partition=P]&trace_id=N           body: the message
        200 {"status": "OK", "id": ID, "trace_id": "N", "queue_offset": OFFSET,
             "rawsize": SIZE}   (ID: the message ID as a number). 400 INVALID_TRACE_ID.
    POST /channel/setorder?topic=T&channel=C&order=true|false
        400 INVALID_OPTION, 404 TOPIC_NOT_FOUND / CHANNEL_NOT_FOUND.

In a cluster, /pub_ext and /pubtrace on a node that does not lead where the message goes
are forwarded to the leader as PUB_EXT and PUB_TRACE (``nsqd.forward``), and answered as
it answered. Partition arguments: ``partition`` as ``nsqd.http_args`` reads it; ``partition_num`` is
1-255 else 400 INVALID_ARG_TOPIC_PARTITION_NUM; an ephemeral topic has one partition
(``partition_num`` above 1: 400 INVALID_ARG_EPHEMERAL_PARTITION_NUM). Nothing is created or
stored when an argument is bad. Errors are raised as ``HttpError``. Imports aiohttp, the
broker and ``nsqd.http_args`` (the daemon through its ``HttpHost``); never ``nsqd.http``.
"""

from __future__ import annotations

import json
import re
from functools import partial

from aiohttp import web

from nsqpy.broker.broker import Broker, PartitionCountMismatch
from nsqpy.broker.topic import MAX_PARTITIONS, EphemeralPartitions, Topic
from nsqpy.errors import (
    BadBody,
    InvalidJsonHeader,
    NotLeader,
    NotWritable,
    ProtocolError,
    PubFailed,
    StorageError,
)
from nsqpy.httpapi import Args, HttpError, first, v1_empty, v1_json, v1_text
from nsqpy.nsqd.http_args import (
    HttpHost,
    forwarded,
    publish_target,
    query_args,
    read_message,
)
from nsqpy.nsqd.http_features import http_source
from nsqpy.nsqd.params import BOOL_PARAMS, parse_int64
from nsqpy.protocol.extend import (
    Headers,
    PubExt,
    PubTrace,
    decode_traced_reply,
    encode_extended,
    headers_from_mapping,
    parse_headers,
)
from nsqpy.protocol.message import OFFSET_BITS, QUEUE_SIZE
from nsqpy.protocol.names import valid_channel_name, valid_topic_name
from nsqpy.storage import Entry

EXT_HEADER_PREFIX = "x-nsqext-"
_DIGITS = re.compile(r"[0-9]{1,20}")


def create_args(args: Args) -> tuple[int | None, bool | None]:
    """/topic/create's ``partition_num`` and ``ordered`` (or youzan's ``orderedmulti``)."""
    partitions: int | None = None
    raw = first(args, "partition_num")
    if raw is not None:
        partitions = parse_int64(raw)
        if partitions is None or not 1 <= partitions <= MAX_PARTITIONS:
            raise HttpError(400, "INVALID_ARG_TOPIC_PARTITION_NUM")
    ordered: bool | None = None
    raw = first(args, "ordered") or first(args, "orderedmulti")
    if raw is not None:
        ordered = BOOL_PARAMS.get(raw)
        if ordered is None:
            raise HttpError(400, "INVALID_ARG_ORDERED")
    return partitions, ordered


def create_topic(broker: Broker, name: str, args: Args) -> None:
    """POST /topic/create with its partition arguments."""
    found = create_args(args)
    try:
        broker.create_topic(name, *found)
    except PartitionCountMismatch:
        raise HttpError(400, "PARTITION_NUM_MISMATCH") from None
    except EphemeralPartitions:
        raise HttpError(400, "INVALID_ARG_EPHEMERAL_PARTITION_NUM") from None


def expand_topic(broker: Broker, topic: Topic, args: Args) -> None:
    """POST /topic/partition/expand: ``partition_num`` 1-255, not below the topic's count
    (else 400 INVALID_ARG_TOPIC_PARTITION_NUM, or E_PARTITION_NUM_REDUCED)."""
    count = create_args(args)[0]
    if count is None:
        raise HttpError(400, "MISSING_ARG_TOPIC_PARTITION_NUM")
    if count < topic.partition_count:
        raise HttpError(400, "E_PARTITION_NUM_REDUCED")
    try:
        broker.expand_topic(topic.name, count)
    except EphemeralPartitions:
        raise HttpError(400, "INVALID_ARG_EPHEMERAL_PARTITION_NUM") from None


def request_headers(request: web.Request, args: Args) -> Headers:
    """/pub_ext's headers: ``ext`` JSON, then ``X-Nsqext-*`` request headers over it."""
    raw = first(args, "ext")
    extra = {
        name[len(EXT_HEADER_PREFIX) :].lower(): value
        for name, value in request.headers.items()
        if name.lower().startswith(EXT_HEADER_PREFIX) and len(name) > len(EXT_HEADER_PREFIX)
    }
    if raw is None and not extra:
        raise HttpError(400, "E_INVALID_JSON_HEADER")
    try:
        parsed = parse_headers(raw.encode()) if raw else Headers(b"")
        if not extra:
            return parsed
        doc = json.loads(parsed.json) if parsed.json else {}
        doc.update(extra)
        return headers_from_mapping(doc)
    except InvalidJsonHeader:
        raise HttpError(400, "E_INVALID_JSON_HEADER") from None
    except (BadBody, UnicodeEncodeError):  # a lone surrogate, from JSON or a request header
        raise HttpError(400, "E_BAD_BODY") from None


def traced_doc(placed_id: int, trace_id: int, offset: int, size: int) -> dict[str, object]:
    return {
        "status": "OK",
        "id": placed_id,
        "trace_id": str(trace_id),
        "queue_offset": offset,
        "rawsize": size,
    }


class ExtendHttp:
    """The handlers of the routes in the module doc."""

    def __init__(self, host: HttpHost) -> None:
        self.host = host
        self.broker = host.broker

    async def _message(self, request: web.Request) -> tuple[Args, Topic | str, int, bytes]:
        """Body, then topic and partition arguments, as /pub reads them (in a cluster, a
        topic held only by other nodes comes back as its name: forwarded)."""
        body = await read_message(request, self.host.opts.max_msg_size)
        args, topic, partition = await publish_target(self.host, request)
        return args, topic, partition, body

    async def _store(
        self,
        request: web.Request,
        topic: Topic | str,
        partition: int,
        entry: Entry,
        cmd: PubExt | PubTrace,
        traced: bool,
    ) -> web.StreamResponse:
        """Publish ``entry`` here, or in a cluster through the leader as ``cmd`` (the same
        message in TCP's form) when this node does not lead where it goes."""
        if isinstance(topic, str):
            return await self._forward(entry, cmd, partition, traced)
        if topic.deleted:
            raise HttpError(503, "EXITING")
        try:
            placed = await self.host.publish_and_wait(
                topic, [], 0, PubFailed, entries=[entry], partition=partition,
                key=entry.partition_key, source=http_source(request),
            )  # fmt: skip
        except NotLeader as exc:  # (cluster) the partition named or keyed is led elsewhere
            if self.host.cluster is None:
                raise HttpError(400, exc.code) from None
            return await self._forward(entry, cmd, partition, traced)
        except NotWritable as exc:  # (cluster mode: youzan's answer)
            raise HttpError(400, exc.code) from None
        except (ProtocolError, OSError, StorageError):
            raise HttpError(503, "EXITING") from None
        if not traced:
            return v1_text("OK")
        msg_id = (placed.partition.number << OFFSET_BITS) | placed.first
        size = QUEUE_SIZE * max(0, placed.last - placed.first + 1)  # (0: not stored)
        return v1_json(traced_doc(msg_id, entry.trace_id, placed.first, size))

    async def _forward(
        self, entry: Entry, cmd: PubExt | PubTrace, partition: int, traced: bool
    ) -> web.StreamResponse:
        """(``nsqd.forward``) Through the leader; a traced publish is answered with the
        leader's id, offset and size."""
        gate = self.host.cluster
        assert gate is not None
        encode = partial(encode_extended, cmd)
        answer = await forwarded(
            gate.forward_command(cmd.topic, partition, 1, encode, entry.partition_key)
        )
        if not traced:
            return v1_text("OK")
        try:
            msg_id, trace_id, offset, size = decode_traced_reply(answer)
        except ValueError:  # (a leader that is not nsqpy's may answer a plain OK)
            raise HttpError(503, "EXITING") from None
        return v1_json(traced_doc(msg_id, trace_id, offset, size))

    async def pub_ext(self, request: web.Request) -> web.StreamResponse:
        args, topic, partition, body = await self._message(request)
        headers = request_headers(request, args)
        entry = Entry(body, self.broker.clock(), trace_id=headers.trace_id)
        entry.partition_key, entry.headers = headers.partition_key, headers.json
        name = topic if isinstance(topic, str) else topic.name
        cmd = PubExt(name, headers.json, body)
        return await self._store(request, topic, partition, entry, cmd, headers.traced)

    async def pub_trace(self, request: web.Request) -> web.StreamResponse:
        args, topic, partition, body = await self._message(request)
        raw = first(args, "trace_id") or ""
        if not _DIGITS.fullmatch(raw) or int(raw) >= 1 << 64:
            raise HttpError(400, "INVALID_TRACE_ID")
        entry = Entry(body, self.broker.clock(), trace_id=int(raw))
        name = topic if isinstance(topic, str) else topic.name
        cmd = PubTrace(name, int(raw), body)
        return await self._store(request, topic, partition, entry, cmd, True)

    async def channel_setorder(self, request: web.Request) -> web.StreamResponse:
        args = query_args(request)
        tname, cname = first(args, "topic"), first(args, "channel")
        if tname is None:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        if not valid_topic_name(tname):
            raise HttpError(400, "INVALID_ARG_TOPIC")
        if cname is None:
            raise HttpError(400, "MISSING_ARG_CHANNEL")
        if not valid_channel_name(cname):
            raise HttpError(400, "INVALID_ARG_CHANNEL")
        order = {"true": True, "false": False}.get(first(args, "order") or "")
        if order is None:
            raise HttpError(400, "INVALID_OPTION")
        topic = self.broker.get_topic(tname)
        if topic is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        channel = topic.channels.get(cname)
        if channel is None:
            raise HttpError(404, "CHANNEL_NOT_FOUND")
        channel.set_ordered(order)
        self.broker.save_metadata()
        channel.pump(self.broker.clock())
        self.host.after_change()
        return v1_empty()


def add_extend_routes(app: web.Application, host: HttpHost) -> None:
    """Add the routes of the module doc to nsqd's app."""
    ext = ExtendHttp(host)
    app.router.add_route("POST", "/pub_ext", ext.pub_ext)
    app.router.add_route("POST", "/pubtrace", ext.pub_trace)
    app.router.add_route("POST", "/channel/setorder", ext.channel_setorder)
