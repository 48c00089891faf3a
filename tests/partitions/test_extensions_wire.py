"""Message extensions through the wire (in-process nsqd): youzan's PUB_EXT/MPUB_EXT,
PUB_TRACE/MPUB_TRACE, /pub_ext and /pubtrace; headers stored in the record, delivered in
extended frames to ``extend_support`` clients only.
"""

from __future__ import annotations

import json
import struct

import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.protocol.extend import (
    decode_traced_reply,
    encode_mpub_ext,
    encode_mpub_trace,
    encode_pub_ext,
    encode_pub_trace,
)
from nsqpy.protocol.message import JSON_HEADER_EXT_VERSION, NO_EXT_VERSION
from nsqpy.testing import AsyncWire, FakeClock, eventually, identify

from .conftest import connect, create_topic, err, http, message, post, subscribe

EXTEND = {"extend_support": True}


async def test_pub_ext_headers_reach_extend_clients_and_only_them(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "e", 2)
    for channel in ("ext", "plain"):
        assert await post(nsqd, f"/channel/create?topic=e&channel={channel}") == (200, b"")
    p = await AsyncWire.connect(nsqd.tcp_port)
    await p.send(encode_pub_ext("e", {"app": "shop", "##partition_key": "u1"}, b"with"))
    assert await p.read_frame() == (0, b"OK")
    await p.send(encode_pub_ext("e", b"", b"without", partition=0))
    assert await p.read_frame() == (0, b"OK")
    ext = await subscribe(nsqd.tcp_port, "SUB e ext", fields=EXTEND)
    plain = await subscribe(nsqd.tcp_port, "SUB e plain")
    got = {}
    for _ in range(2):
        msg = await message(ext, extended=True)
        got[msg.body] = (msg.ext_version, msg.ext)
    assert got == {
        b"with": (JSON_HEADER_EXT_VERSION, b'{"app": "shop", "##partition_key": "u1"}'),
        b"without": (NO_EXT_VERSION, b""),
    }
    bodies = {(await message(plain)).body for _ in range(2)}
    assert bodies == {b"with", b"without"}  # plain frames: the body is exactly the message
    records = [r for part in nsqd.broker.topics["e"].partitions for r in part.log.read(0, 10)]
    (stored,) = [r for r in records if r.body == b"with"]
    assert stored.partition_key == b"u1"
    assert json.loads(stored.headers) == {"app": "shop", "##partition_key": "u1"}


async def test_identify_reply_names_extend_support_only_when_asked(nsqd: NsqdServer) -> None:
    for fields, expect in (({"extend_support": True}, True), ({}, None)):
        wire = await AsyncWire.connect(nsqd.tcp_port)
        body = json.dumps({"feature_negotiation": True, **fields}).encode()
        await wire.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        ftype, data = await wire.read_frame()
        assert ftype == 0 and json.loads(data).get("extend_support") is expect


async def test_mpub_ext_keeps_each_messages_headers_and_splits_by_key(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "m", 4)
    p = await AsyncWire.connect(nsqd.tcp_port)
    messages = [({"##partition_key": k, "n": str(i)}, b"%s%d" % (k.encode(), i)) for i, k in
                enumerate(["a", "b", "a", "c", "b", "a"])]  # fmt: skip
    await p.send(encode_mpub_ext("m", messages))
    assert await p.read_frame() == (0, b"OK")
    topic = nsqd.broker.topics["m"]
    by_key: dict[bytes, list[bytes]] = {}
    for part in topic.partitions:
        for record in part.log.read(0, 10):
            assert json.loads(record.headers)["##partition_key"] == record.partition_key.decode()
            by_key.setdefault(record.partition_key, []).append(record.body)
    assert by_key == {b"a": [b"a0", b"a2", b"a5"], b"b": [b"b1", b"b4"], b"c": [b"c3"]}


async def test_pub_trace_reply_and_stored_trace_id(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "tr", 2)
    p = await AsyncWire.connect(nsqd.tcp_port)
    await p.send(encode_pub_trace("tr", 987654321, b"traced", partition=1))
    ftype, data = await p.read_frame()
    assert ftype == 0
    msg_id, trace_id, offset, size = decode_traced_reply(data)
    assert (msg_id >> 54, offset, trace_id) == (1, 0, 987654321)
    assert size == 1  # its size in the queue: the next message is at offset + size
    (record,) = nsqd.broker.topics["tr"].partitions[1].log.read(0, 5)
    assert (record.trace_id, record.body) == (987654321, b"traced")
    # ##trace_id in a PUB_EXT header gets the traced reply too
    await p.send(encode_pub_ext("tr", {"##trace_id": "42"}, b"ext", partition=1))
    ftype, data = await p.read_frame()
    assert decode_traced_reply(data)[1:3] == (42, 1)
    await p.send(encode_mpub_trace("tr", [(7, b"a"), (8, b"b")], partition=0))
    ftype, data = await p.read_frame()
    assert decode_traced_reply(data) == (0, 0, 0, 2)  # two messages: the next is at 0 + 2
    records = nsqd.broker.topics["tr"].partitions[0].log.read(0, 5)
    assert [(r.trace_id, r.body) for r in records] == [(7, b"a"), (8, b"b")]
    # an extend client sees the trace id as the reserved header
    s = await subscribe(nsqd.tcp_port, "SUB tr c 1", fields=EXTEND)
    first = await message(s, extended=True)
    assert (first.body, json.loads(first.ext)) == (b"traced", {"##trace_id": "987654321"})


BAD_HEADERS = [
    b"[1, 2]",
    b"not json",
    b'{"a": 1}',
    b'{"a": null}',
    b'{"": "x"}',
    b'{"bad\\nname": "x"}',
    b'{"##trace_id": "12x"}',
    b'{"##trace_id": 12}',
    b'{"##trace_id": "18446744073709551616"}',
    b'{"a": NaN}',
    b"\xff\xfe",
    b'"just a string"',
]


@pytest.mark.parametrize("raw", BAD_HEADERS)
async def test_bad_header_json_is_refused_without_closing_and_nothing_is_stored(
    nsqd: NsqdServer, raw: bytes
) -> None:
    p = await AsyncWire.connect(nsqd.tcp_port)
    await p.send(encode_pub_ext("h", raw, b"body"))
    ftype, data = await p.read_frame()
    assert ftype == 1 and data.startswith(b"E_INVALID_JSON_HEADER"), data
    await p.send(encode_pub_ext("h", {"ok": "yes"}, b"fine"))  # the connection stays open
    assert await p.read_frame() == (0, b"OK")
    records = nsqd.broker.topics["h"].partitions[0].log.read(0, 10)
    assert [r.body for r in records] == [b"fine"]


async def test_bad_extended_bodies_are_fatal_body_errors(nsqd: NsqdServer) -> None:
    for line, body, code in (
        (b"PUB_EXT x\n", b"\x00", b"E_BAD_BODY"),  # no room for the header length
        (b"PUB_EXT x\n", b"\x00\x09{}", b"E_BAD_BODY"),  # header longer than the body
        (b"PUB_TRACE x\n", b"12345678", b"E_BAD_BODY"),  # a trace id and no body
        (b"PUB_EXT x 99999\n", b"\x00\x00b", b"E_BAD_PARTITION"),
    ):
        w = await AsyncWire.connect(nsqd.tcp_port)
        await w.send(line + struct.pack(">i", len(body)) + body)
        ftype, data = await w.read_frame()
        assert ftype == 1 and data.startswith(code), (line, data)
        await w.expect_closed()
    assert "x" not in nsqd.broker.topics


async def test_http_pub_ext_with_param_and_request_headers(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "hx", 2)
    ext = json.dumps({"a": "1", "b": "2"})
    status, body = await http(
        nsqd, "POST", f"/pub_ext?topic=hx&partition=1&ext={ext}", b"msg",
        headers={"X-Nsqext-B": "over", "X-NSQEXT-Trace-Me": "yes"},
    )  # fmt: skip
    assert (status, body) == (200, b"OK")
    (record,) = nsqd.broker.topics["hx"].partitions[1].log.read(0, 5)
    assert json.loads(record.headers) == {"a": "1", "b": "over", "trace-me": "yes"}
    status, body = await http(
        nsqd, "POST", "/pub_ext?topic=hx&partition=0", b"t", headers={"X-Nsqext-##trace_id": "5"}
    )
    doc = json.loads(body)
    assert status == 200 and doc["status"] == "OK" and doc["trace_id"] == "5"
    assert doc["id"] == doc["queue_offset"] == 0
    for path in (
        "/pub_ext?topic=hx",  # no headers at all
        "/pub_ext?topic=hx&ext=[1]",
        '/pub_ext?topic=hx&ext={"a":2}',
        '/pub_ext?topic=hx&ext={"":"v"}',
    ):
        assert await http(nsqd, "POST", path, b"m") == (
            400,
            err("E_INVALID_JSON_HEADER"),
        ), path
    assert sum(p.log.flushed_offset for p in nsqd.broker.topics["hx"].partitions) == 2


async def test_http_pubtrace(nsqd: NsqdServer) -> None:
    status, body = await post(nsqd, "/pubtrace?topic=ht&trace_id=123", b"m")
    assert status == 200
    assert json.loads(body) == {
        "status": "OK",
        "id": 0,
        "trace_id": "123",
        "queue_offset": 0,
        "rawsize": 1,
    }
    for bad in ("", "x", "-1", "18446744073709551616"):
        got = await post(nsqd, f"/pubtrace?topic=ht&trace_id={bad}", b"m")
        assert got == (400, err("INVALID_TRACE_ID")), bad
    assert nsqd.broker.topics["ht"].log.flushed_offset == 1


async def test_requeued_and_deferred_messages_keep_their_extension(nsqd: NsqdServer) -> None:
    p = await AsyncWire.connect(nsqd.tcp_port)
    await p.send(encode_pub_ext("rq", {"k": "v"}, b"m"))
    assert await p.read_frame() == (0, b"OK")
    s = await connect(nsqd.tcp_port, EXTEND)
    await s.send(b"SUB rq c\n")
    assert await s.read_frame() == (0, b"OK")
    await s.send(b"RDY 1\n")
    first = await message(s, extended=True)
    await s.send(b"REQ " + first.id + b" 0\n")
    again = await message(s, extended=True)
    assert (again.attempts, again.ext, again.body) == (2, b'{"k": "v"}', b"m")


async def test_ephemeral_topic_delivers_headers_after_the_topic_let_go(nsqd: NsqdServer) -> None:
    """An ephemeral topic forgets what its channels took into their own queues; the
    headers of a message delivered later still reach an extend_support client."""
    assert await post(nsqd, "/topic/create?topic=e%23ephemeral") == (200, b"")
    assert await post(nsqd, "/channel/create?topic=e%23ephemeral&channel=c") == (200, b"")
    p = await AsyncWire.connect(nsqd.tcp_port)
    await p.send(encode_pub_ext("e#ephemeral", {"app": "x", "##trace_id": "5"}, b"one"))
    assert (await p.read_frame())[0] == 0
    part = nsqd.broker.topics["e#ephemeral"].partitions[0]
    assert part.log.low_watermark == 1  # the channel took it; the topic let go
    s = await subscribe(nsqd.tcp_port, "SUB e#ephemeral c", fields=EXTEND)
    msg = await message(s, extended=True)
    assert msg.body == b"one" and json.loads(msg.ext) == {"app": "x", "##trace_id": "5"}
    await s.send(b"FIN " + msg.id + b"\n")
    await eventually_finished(nsqd, "e#ephemeral")
    nsqd.broker.housekeeping()
    assert part.extras(0) == (0, b"", b"")  # forgotten once every channel confirmed it


async def eventually_finished(nsqd: NsqdServer, topic: str) -> None:
    channel = nsqd.broker.topics[topic].channels["c"]
    await eventually(lambda: channel.finish_count == 1, what="the FIN processed")


async def test_youzan_clients_header_names_with_dots_are_taken(nsqd: NsqdServer) -> None:
    """youzan/go-nsq's compressed messages carry ``nsq.client.compress`` and
    ``nsq.msg.size``: taken over TCP and HTTP, stored as published, delivered to an
    extend_support consumer as they came."""
    headers = {"nsq.client.compress": "1", "nsq.msg.size": "42", "a b/c:d": "v"}
    p = await AsyncWire.connect(nsqd.tcp_port)
    await p.send(encode_pub_ext("dots", headers, b"zipped"))
    assert await p.read_frame() == (0, b"OK")
    status, _ = await http(
        nsqd, "POST", "/pub_ext?topic=dots", b"over http", headers={"X-Nsqext-nsq.msg.size": "9"}
    )
    assert status == 200
    s = await subscribe(nsqd.tcp_port, "SUB dots c", fields=EXTEND)
    first, second = await message(s, extended=True), await message(s, extended=True)
    assert (first.body, json.loads(first.ext)) == (b"zipped", headers)
    assert (second.body, json.loads(second.ext)) == (b"over http", {"nsq.msg.size": "9"})


async def test_a_consumer_with_a_desired_tag_gets_only_messages_of_that_tag(
    nsqd: NsqdServer,
) -> None:
    """youzan's dispatch tags: a consumer that IDENTIFYs a ``desired_tag`` gets only the
    messages whose ``##client_dispatch_tag`` header is that tag; a consumer with none gets
    the untagged ones, and the tagged ones too once no consumer of their tag is
    subscribed. A tagged message waits while its tag's consumers are busy."""
    await create_topic(nsqd, "tags", 1)
    tagged = await subscribe(nsqd.tcp_port, "SUB tags c", rdy=10,
                             fields={**EXTEND, "desired_tag": "blue"})  # fmt: skip
    plain = await subscribe(nsqd.tcp_port, "SUB tags c", rdy=10, fields=EXTEND)
    pub = await AsyncWire.connect(nsqd.tcp_port)
    for i in range(3):
        await pub.send(encode_pub_ext("tags", {"##client_dispatch_tag": "blue"}, b"b%d" % i))
        assert await pub.read_frame() == (0, b"OK")
        await pub.send(encode_pub_ext("tags", {"app": "x"}, b"p%d" % i))
        assert await pub.read_frame() == (0, b"OK")
    blue = [await message(tagged, extended=True) for _ in range(3)]
    other = [await message(plain, extended=True) for _ in range(3)]
    assert [m.body for m in blue] == [b"b0", b"b1", b"b2"]
    assert [m.body for m in other] == [b"p0", b"p1", b"p2"]
    assert await tagged.frame_within(0.2) is None and await plain.frame_within(0.2) is None
    for m in blue:
        await tagged.send(b"FIN " + m.id + b"\n")
    await tagged.close()  # no consumer of "blue" any more: its messages go to the others
    await eventually(lambda: len(nsqd.broker.topics["tags"].channels["c"].consumers) == 1, 5)
    await pub.send(encode_pub_ext("tags", {"##client_dispatch_tag": "blue"}, b"b3"))
    assert await pub.read_frame() == (0, b"OK")
    assert (await message(plain, extended=True)).body == b"b3"


async def test_requeued_with_a_delay_a_message_keeps_to_its_tag(
    nsqd: NsqdServer, clock: FakeClock
) -> None:
    """A message REQ'd with a delay comes back from the deferred set by the same dispatch
    rule: a tagged one to its tag's consumer, an untagged one to a consumer of none."""
    await create_topic(nsqd, "later", 1)
    tagged = await subscribe(nsqd.tcp_port, "SUB later c", rdy=10,
                             fields={**EXTEND, "desired_tag": "blue"})  # fmt: skip
    plain = await subscribe(nsqd.tcp_port, "SUB later c", rdy=10, fields=EXTEND)
    pub = await AsyncWire.connect(nsqd.tcp_port)
    await pub.send(encode_pub_ext("later", {"##client_dispatch_tag": "blue"}, b"b"))
    assert await pub.read_frame() == (0, b"OK")
    await pub.send(encode_pub_ext("later", {"app": "x"}, b"p"))
    assert await pub.read_frame() == (0, b"OK")
    for _ in range(3):
        blue, other = await message(tagged, extended=True), await message(plain, extended=True)
        assert (blue.body, other.body) == (b"b", b"p")
        await tagged.send(b"REQ " + blue.id + b" 1000\n")
        await plain.send(b"REQ " + other.id + b" 1000\n")
        channel = nsqd.broker.topics["later"].channels["c"]  # (the time moves once both are in)
        await eventually(lambda c=channel: c.deferred_count == 2, 5, what="both REQs taken")  # type: ignore[misc]
        clock.advance_ms(1001)


async def test_a_desired_tag_longer_than_youzans_limit_is_refused(nsqd: NsqdServer) -> None:
    wire = await AsyncWire.connect(nsqd.tcp_port)
    await wire.send(identify({"desired_tag": "t" * 101}))
    ftype, data = await wire.read_frame()
    assert ftype == 1 and data.startswith(b"E_BAD_BODY IDENTIFY invalid tag len 101")


async def test_a_tagged_message_waits_for_a_consumer_of_its_tag(nsqd: NsqdServer) -> None:
    """The only consumer of tag "blue" has no RDY left: the next blue message waits for
    it, not given to the untagged consumer, and what follows it in the partition waits
    behind it (youzan's nsqd hands a partition's messages out in order, one at a time);
    a FIN frees both."""
    await create_topic(nsqd, "tagwait", 1)
    tagged = await subscribe(nsqd.tcp_port, "SUB tagwait c", rdy=1,
                             fields={**EXTEND, "desired_tag": "blue"})  # fmt: skip
    plain = await subscribe(nsqd.tcp_port, "SUB tagwait c", rdy=10, fields=EXTEND)
    pub = await AsyncWire.connect(nsqd.tcp_port)
    for tag, body in (("blue", b"b0"), ("", b"p0"), ("blue", b"b1"), ("", b"p1")):
        await pub.send(
            encode_pub_ext("tagwait", {"##client_dispatch_tag": tag} if tag else b"", body)
        )
        assert await pub.read_frame() == (0, b"OK")
    first = await message(tagged, extended=True)
    assert first.body == b"b0" and (await message(plain, extended=True)).body == b"p0"
    assert await plain.frame_within(0.3) is None and await tagged.frame_within(0.1) is None
    await tagged.send(b"FIN " + first.id + b"\n")
    assert (await message(tagged, extended=True)).body == b"b1"
    assert (await message(plain, extended=True)).body == b"p1"


async def test_an_extend_support_client_gets_youzans_binary_ids_with_the_trace_id(
    nsqd: NsqdServer,
) -> None:
    """youzan's message ID on the wire for an ``extend_support`` client: the ID as a
    uint64, then the message's trace id as a uint64 (youzan/go-nsq's GetTraceID reads bytes
    8 to 16). Its FIN, REQ and TOUCH echo those 16 bytes, which may hold a newline or a
    space (offset 10 is 0x0a, 32 is a space): read by length. A plain client keeps NSQ's
    hex IDs."""
    await create_topic(nsqd, "bin", 1)
    s = await subscribe(nsqd.tcp_port, "SUB bin c", rdy=40, fields=EXTEND)
    plain = await subscribe(nsqd.tcp_port, "SUB bin other", rdy=1)
    pub = await AsyncWire.connect(nsqd.tcp_port)
    for i in range(34):
        await pub.send(encode_pub_trace("bin", 1000 + i, b"m%d" % i))
        await pub.read_frame()
    got = [await message(s, extended=True) for _ in range(34)]
    for i, msg in enumerate(got):
        assert struct.unpack(">QQ", msg.id) == (i, 1000 + i), msg.id
    assert got[10].id[7:8] == b"\n" and got[32].id[7:8] == b" "
    await s.send(b"TOUCH " + got[10].id + b"\nREQ " + got[32].id + b" 0\n")
    for msg in got:
        if msg is not got[32]:
            await s.send(b"FIN " + msg.id + b"\n")
    again = await message(s, extended=True)
    assert again.body == b"m32" and again.attempts == 2
    await s.send(b"FIN " + again.id + b"\n")
    await eventually(lambda: nsqd.broker.topics["bin"].channels["c"].depth == 0, 5)
    assert await s.frame_within(0.2) is None  # (no error frame: every FIN found its message)
    assert (await message(plain)).id == b"%016x" % 0
