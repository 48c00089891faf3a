"""nsqd's HTTP API for partitions, ordered channels and message extensions (youzan's forms).

Owns the argument parsing these share with nsqd's own routes (``partition``,
``partition_num``, ``ordered``) and three routes of youzan's nsqd:

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

Partition arguments: ``partition`` is a decimal number (-1: none) else 400
INVALID_ARG_PARTITION, and must name a partition of the topic (of a topic that does not
exist yet: 0) else 404 PARTITION_NOT_FOUND; ``partition_num`` is 1-255 else 400
INVALID_ARG_TOPIC_PARTITION_NUM; an ephemeral topic has one partition (``partition_num``
above 1: 400 INVALID_ARG_EPHEMERAL_PARTITION_NUM). Nothing is created or stored when an
argument is bad.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from aiohttp import web

from nsqpy.broker.broker import PartitionCountMismatch
from nsqpy.broker.extensions import stored_size
from nsqpy.broker.topic import MAX_PARTITIONS, EphemeralPartitions, Topic
from nsqpy.errors import (
    BadBody,
    BadPartition,
    InvalidJsonHeader,
    ProtocolError,
    PubFailed,
    StorageError,
)
from nsqpy.httpapi import v1_empty, v1_error, v1_json, v1_text
from nsqpy.nsqd.http_features import http_source
from nsqpy.nsqd.params import BOOL_PARAMS, parse_int64
from nsqpy.protocol.extend import Headers, headers_from_mapping, parse_headers
from nsqpy.protocol.message import OFFSET_BITS
from nsqpy.protocol.names import valid_channel_name, valid_topic_name
from nsqpy.storage import Entry

if TYPE_CHECKING:
    from nsqpy.nsqd.http import HttpApi

Args = dict[str, list[str]]
EXT_HEADER_PREFIX = "x-nsqext-"
_DIGITS = re.compile(r"[0-9]{1,20}")


def first(args: Args, name: str) -> str | None:
    values = args.get(name)
    return values[0] if values else None


def partition_arg(args: Args) -> int | web.Response:
    """The ``partition`` argument: -1 when absent, else a partition number."""
    raw = first(args, "partition")
    if raw is None or raw == "-1":
        return -1
    value = parse_int64(raw)
    if value is None or not 0 <= value <= MAX_PARTITIONS:
        return v1_error("INVALID_ARG_PARTITION", 400)
    return value


def checked_partition(api: HttpApi, args: Args, topic_name: str) -> int | web.Response:
    """``partition_arg``, and 404 PARTITION_NOT_FOUND unless the topic has it."""
    partition = partition_arg(args)
    if isinstance(partition, web.Response):
        return partition
    try:
        api.broker.check_partition(topic_name, partition)
    except BadPartition:
        return v1_error("PARTITION_NOT_FOUND", 404)
    return partition


def create_args(args: Args) -> tuple[int | None, bool | None] | web.Response:
    """/topic/create's ``partition_num`` and ``ordered`` (or youzan's ``orderedmulti``)."""
    partitions: int | None = None
    raw = first(args, "partition_num")
    if raw is not None:
        partitions = parse_int64(raw)
        if partitions is None or not 1 <= partitions <= MAX_PARTITIONS:
            return v1_error("INVALID_ARG_TOPIC_PARTITION_NUM", 400)
    ordered: bool | None = None
    raw = first(args, "ordered") or first(args, "orderedmulti")
    if raw is not None:
        ordered = BOOL_PARAMS.get(raw)
        if ordered is None:
            return v1_error("INVALID_ARG_ORDERED", 400)
    return partitions, ordered


def create_topic(api: HttpApi, name: str, args: Args) -> web.StreamResponse:
    """POST /topic/create with its partition arguments."""
    found = create_args(args)
    if isinstance(found, web.Response):
        return found
    try:
        api.broker.create_topic(name, *found)
    except PartitionCountMismatch:
        return v1_error("PARTITION_NUM_MISMATCH", 400)
    except EphemeralPartitions:
        return v1_error("INVALID_ARG_EPHEMERAL_PARTITION_NUM", 400)
    return v1_empty()


def request_headers(request: web.Request, args: Args) -> Headers | web.Response:
    """/pub_ext's headers: ``ext`` JSON, then ``X-Nsqext-*`` request headers over it."""
    raw = first(args, "ext")
    extra = {
        name[len(EXT_HEADER_PREFIX) :].lower(): value
        for name, value in request.headers.items()
        if name.lower().startswith(EXT_HEADER_PREFIX) and len(name) > len(EXT_HEADER_PREFIX)
    }
    if raw is None and not extra:
        return v1_error("E_INVALID_JSON_HEADER", 400)
    try:
        parsed = parse_headers(raw.encode()) if raw else Headers(b"")
        if not extra:
            return parsed
        doc = json.loads(parsed.json) if parsed.json else {}
        doc.update(extra)
        return headers_from_mapping(doc)
    except InvalidJsonHeader:
        return v1_error("E_INVALID_JSON_HEADER", 400)
    except (BadBody, UnicodeEncodeError):  # a lone surrogate, from JSON or a request header
        return v1_error("E_BAD_BODY", 400)


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

    def __init__(self, api: HttpApi) -> None:
        self.api = api
        self.broker = api.broker

    async def _message(self, request: web.Request) -> tuple[Args, Topic, int, bytes] | web.Response:
        """Body, then topic and partition arguments, as /pub reads them."""
        limit = self.api.opts.max_msg_size
        if request.content_length is not None and request.content_length > limit:
            return v1_error("MSG_TOO_BIG", 413)
        body = await self.api._read_at_most(request, limit + 1)
        if len(body) > limit:
            return v1_error("MSG_TOO_BIG", 413)
        if not body:
            return v1_error("MSG_EMPTY", 400)
        found = self.api._topic_from_query(request, with_partition=True)
        if not isinstance(found, tuple):
            return found
        args, topic, partition = found
        return args, topic, partition, body

    async def _store(
        self, request: web.Request, topic: Topic, partition: int, entry: Entry, traced: bool
    ) -> web.StreamResponse:
        if topic.deleted:
            return v1_error("EXITING", 503)
        try:
            placed = await self.api.server.publish_and_wait(
                topic, [], 0, PubFailed, entries=[entry], partition=partition,
                key=entry.partition_key, source=http_source(request),
            )  # fmt: skip
        except (ProtocolError, OSError, StorageError):
            return v1_error("EXITING", 503)
        if not traced:
            return v1_text("OK")
        msg_id = (placed.partition.number << OFFSET_BITS) | placed.first
        return v1_json(traced_doc(msg_id, entry.trace_id, placed.first, stored_size(entry)))

    async def pub_ext(self, request: web.Request) -> web.StreamResponse:
        found = await self._message(request)
        if not isinstance(found, tuple):
            return found
        args, topic, partition, body = found
        headers = request_headers(request, args)
        if isinstance(headers, web.Response):
            return headers
        entry = Entry(body, self.broker.clock(), trace_id=headers.trace_id)
        entry.partition_key, entry.headers = headers.partition_key, headers.json
        return await self._store(request, topic, partition, entry, headers.traced)

    async def pub_trace(self, request: web.Request) -> web.StreamResponse:
        found = await self._message(request)
        if not isinstance(found, tuple):
            return found
        args, topic, partition, body = found
        raw = first(args, "trace_id") or ""
        if not _DIGITS.fullmatch(raw) or int(raw) >= 1 << 64:
            return v1_error("INVALID_TRACE_ID", 400)
        entry = Entry(body, self.broker.clock(), trace_id=int(raw))
        return await self._store(request, topic, partition, entry, True)

    async def channel_setorder(self, request: web.Request) -> web.StreamResponse:
        args = self.api._args(request)
        if not isinstance(args, dict):
            return args
        tname, cname = first(args, "topic"), first(args, "channel")
        if tname is None:
            return v1_error("MISSING_ARG_TOPIC", 400)
        if not valid_topic_name(tname):
            return v1_error("INVALID_ARG_TOPIC", 400)
        if cname is None:
            return v1_error("MISSING_ARG_CHANNEL", 400)
        if not valid_channel_name(cname):
            return v1_error("INVALID_ARG_CHANNEL", 400)
        order = {"true": True, "false": False}.get(first(args, "order") or "")
        if order is None:
            return v1_error("INVALID_OPTION", 400)
        topic = self.broker.get_topic(tname)
        if topic is None:
            return v1_error("TOPIC_NOT_FOUND", 404)
        channel = topic.channels.get(cname)
        if channel is None:
            return v1_error("CHANNEL_NOT_FOUND", 404)
        channel.set_ordered(order)
        self.broker.save_metadata()
        channel.pump(self.broker.clock())
        self.api.server.after_change()
        return v1_empty()


def add_extend_routes(app: web.Application, api: HttpApi) -> None:
    """Add the routes of the module doc to nsqd's app."""
    ext = ExtendHttp(api)
    app.router.add_route("POST", "/pub_ext", ext.pub_ext)
    app.router.add_route("POST", "/pubtrace", ext.pub_trace)
    app.router.add_route("POST", "/channel/setorder", ext.channel_setorder)
