"""Message extensions at delivery: what a stored record's extension becomes on the wire.

A record may carry a trace id, a partition key and JSON headers (``nsqpy.storage``). A
client that negotiated ``extend_support`` gets them in youzan's extended message frame
(``nsqpy.protocol.message.extend_frame``): version 4 with the headers as published, or,
for a record with a trace id or key but no headers, a header object holding the reserved
``##trace_id`` / ``##partition_key``; version 0 when the record has none. ``ExtendSink``
stands between a channel and such a client's connection and rewrites each plain frame;
clients that did not negotiate it never see anything but NSQ's plain frames. A
``SUB_ORDERED`` subscriber's frames also carry youzan's detail (``DetailSink``). Must not
import asyncio or any server.
"""

from __future__ import annotations

import json
import struct
from typing import TypeAlias

from nsqpy.broker.channel import Channel
from nsqpy.broker.client import Client, Sink
from nsqpy.protocol.extend import PARTITION_KEY_KEY, TRACE_ID_KEY
from nsqpy.protocol.message import (
    FRAME_HEAD_ID,
    FRAME_OVERHEAD,
    JSON_HEADER_EXT_VERSION,
    MAX_EXT_LENGTH,
    NO_EXT_VERSION,
    binary_id_frame,
    detail_frame,
    extend_frame,
    message_frame,
    try_decode_message_id,
)
from nsqpy.storage import Record
from nsqpy.storage.records import EXT, EXT_SIZE, parse_extension

Extension: TypeAlias = tuple[int, bytes]  # (extension version, extension bytes)
NO_EXTENSION: Extension = (NO_EXT_VERSION, b"")
_EXT_HEAD = struct.Struct(">BH")  # an extended frame's version and extension length
_ID_AT = 18  # a whole frame: size (4), type (4), timestamp (8), attempts (2), then the ID


def extension_of(record: Record) -> Extension:
    """The extension delivered with ``record`` (see the module doc)."""
    return extension_from(record.trace_id, record.partition_key, record.headers)


def extension_from(trace_id: int, partition_key: bytes, headers: bytes) -> Extension:
    """The extension delivered with a record holding these (see the module doc)."""
    if headers:
        return JSON_HEADER_EXT_VERSION, headers
    if not trace_id and not partition_key:
        return NO_EXTENSION
    doc: dict[str, str] = {}
    if trace_id:
        doc[TRACE_ID_KEY] = str(trace_id)
    if partition_key:
        doc[PARTITION_KEY_KEY] = partition_key.decode(errors="replace")
    return JSON_HEADER_EXT_VERSION, json.dumps(doc, separators=(",", ":")).encode()


def py_stored_ext_frame(
    timestamp: int, attempts: int, id_value: int, body: bytes, stored: bytes
) -> bytes | None:
    """The extended frame of a record from its stored extension: version 0 for none,
    version 4 with its headers when it has any; None for a trace id or key without headers
    (``extension_from`` builds that header object). The reference for the C
    ``stored_ext_frame``, and its fallback."""
    if not stored:
        head = b"\x00"
    else:
        if len(stored) < EXT_SIZE:
            return None
        headers = stored[EXT_SIZE + EXT.unpack_from(stored)[1] :]
        if not headers:
            return None
        if len(headers) > MAX_EXT_LENGTH:
            raise ValueError(f"extension of {len(headers)} bytes > {MAX_EXT_LENGTH}")
        head = _EXT_HEAD.pack(JSON_HEADER_EXT_VERSION, len(headers)) + headers
    msg_id = b"%016x" % id_value
    return FRAME_HEAD_ID.pack(FRAME_OVERHEAD + len(head) + len(body), 2, timestamp, attempts,
                              msg_id) + head + body  # fmt: skip


try:  # (optional, like the other C frames: see nsqpy.protocol.message)
    from nsqpy.protocol._frames import stored_ext_frame as stored_ext_frame
except ImportError:  # pragma: no cover - exercised where the extension is not built
    stored_ext_frame = py_stored_ext_frame


class ExtendSink:
    """The sink of a client with ``extend_support``: plain frames in, extended frames out,
    their IDs in youzan's binary form (``binary_id_frame``: the record's trace id in the
    last 8 bytes)."""

    def __init__(self, sink: Sink, client: Client) -> None:
        self.sink = sink
        self.client = client

    def send_extended(
        self, timestamp: int, attempts: int, id_value: int, body: bytes, stored: bytes | None
    ) -> None:
        """A message straight from the channel (``id_value``: its message ID as an integer),
        with its record's stored extension (None: not at hand, found as ``send_message``
        finds it)."""
        if stored is None:
            self.send_message(message_frame(timestamp, attempts, id_value, body))
            return
        frame = stored_ext_frame(timestamp, attempts, id_value, body, stored)
        trace_id = parse_extension(stored)[0] if stored else 0
        if frame is None:  # a trace id or partition key without headers: a header object
            version, ext = extension_from(*parse_extension(stored))
            frame = extend_frame(message_frame(timestamp, attempts, id_value, body), version, ext)
        self.sink.send_message(binary_id_frame(frame, trace_id))

    def send_message(self, frame: bytes) -> None:
        version, ext = NO_EXTENSION
        trace_id = 0
        channel = self.client.channel
        decoded = try_decode_message_id(frame[_ID_AT : _ID_AT + 16])
        if decoded is not None and isinstance(channel, Channel):
            raw = channel.stored_extension(*decoded)  # kept with the in-flight entry
            if raw is None:
                version, ext = channel.extension(*decoded)
            else:
                trace_id, key, headers = parse_extension(raw)
                version, ext = extension_from(trace_id, key, headers)
        self.sink.send_message(binary_id_frame(extend_frame(frame, version, ext), trace_id))

    def close_by_server(self) -> None:
        self.sink.close_by_server()


class DetailSink:
    """The sink of a ``SUB_ORDERED`` subscriber: each message with youzan's detail (its
    queue offset and size) in front of its body, as youzan's nsqd sends it to ordered
    subscribers and youzan's clients take it off (``detail_frame``). Stands in front of the
    connection; behind an ``ExtendSink`` for an ``extend_support`` client (``extended``:
    the frames it gets carry an extension, which the detail follows)."""

    def __init__(self, sink: Sink, *, extended: bool) -> None:
        self.sink = sink
        self.extended = extended

    def send_message(self, frame: bytes) -> None:
        self.sink.send_message(detail_frame(frame, extended=self.extended))

    def close_by_server(self) -> None:
        self.sink.close_by_server()
