"""Youzan's extended publish commands on nsqd's TCP side: their records and traced reply.

Owns what ``V2Connection`` needs beyond NSQ's verbs for PUB_EXT, MPUB_EXT, PUB_TRACE and
MPUB_TRACE: the ``Entry`` records to store (headers checked: a bad one is the non-fatal
E_INVALID_JSON_HEADER and nothing of the command is stored; ``##trace_id`` and
``##partition_key`` become the record's trace id and key) and youzan's traced reply
(``OK`` with the first message's ID, the trace id, its offset and the records' size),
sent for PUB_TRACE/MPUB_TRACE and for a PUB_EXT with ``##trace_id``. Publishing itself is
the connection's (through ``Broker.append_entries``, like every publish). Imports the
protocol and broker layers only.
"""

from __future__ import annotations

from nsqpy.broker.broker import Placement
from nsqpy.protocol.extend import (
    MpubExt,
    MpubTrace,
    PubExt,
    PubTrace,
    encode_traced_reply,
    parse_headers,
)
from nsqpy.protocol.frames import encode_response
from nsqpy.protocol.message import OFFSET_BITS, QUEUE_SIZE
from nsqpy.storage import Entry

Extended = PubExt | MpubExt | PubTrace | MpubTrace


def extended_entries(cmd: Extended, now: int) -> tuple[list[Entry], bool]:
    """The records to store, and whether the reply is youzan's traced one."""
    if isinstance(cmd, PubTrace):
        return [Entry(cmd.body, now, trace_id=cmd.trace_id)], True
    if isinstance(cmd, MpubTrace):
        pairs = zip(cmd.trace_ids, cmd.bodies, strict=True)
        return [Entry(body, now, trace_id=trace) for trace, body in pairs], True
    raws = [cmd.header] if isinstance(cmd, PubExt) else cmd.headers
    bodies = [cmd.body] if isinstance(cmd, PubExt) else cmd.bodies
    entries: list[Entry] = []
    traced = False
    for raw, body in zip(raws, bodies, strict=True):
        h = parse_headers(raw)  # E_INVALID_JSON_HEADER (not fatal): nothing is stored
        traced = traced or (h.traced and isinstance(cmd, PubExt))
        entry = Entry(body, now, trace_id=h.trace_id, partition_key=h.partition_key)
        entry.headers = h.json
        entries.append(entry)
    return entries, traced


def traced_reply(placed: list[Placement], entries: list[Entry]) -> bytes:
    """The traced reply frame: the first message's ID and offset, the trace id (of a
    single message; 0 for several) and their size in the queue (the next offset is the
    offset + the size, as in youzan's reply, whose offsets count bytes)."""
    first = placed[0]
    msg_id = (first.partition.number << OFFSET_BITS) | first.first
    trace_id = entries[0].trace_id if len(entries) == 1 else 0
    size = QUEUE_SIZE * sum(max(0, p.last - p.first + 1) for p in placed)  # (as stored)
    return encode_response(encode_traced_reply(msg_id, trace_id, first.first, size))
