"""nsqd's log-read API in-process: the routes on an aiohttp app over a real broker and log.

The broker's logs are written directly (append + flush), the routes are added to a bare
app with NSQ's middleware, and replies are decoded with the Spark side's decoder, so
encoder and decoder are checked against each other (the golden bytes and the plain-Python
decoders are tested in tests/protocol/test_protocol_logread.py; here the numpy decoders
are also checked against those).
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqpy.httpapi import nsq_middleware
from nsqpy.nsqd.logread import add_logread_routes, cut_batches
from nsqpy.nsqd.server import NsqdServer
from nsqpy.options import NsqdOptions
from nsqpy.protocol.logread import LogRecord, decode_columns, encode_columns
from nsqpy.protocol.logread import decode_batches as decode_batches_plain
from nsqpy.spark import wire
from nsqpy.spark.wire import BadLogReply, decode_batches, decode_chunk, to_record_batch
from nsqpy.storage import Entry, PartitionLog, RawBatch, Record
from nsqpy.storage import records as layout
from nsqpy.testing import AsyncWire, FakeClock, eventually

T0 = 1_700_000_000_000_000_000  # FakeClock's start, ns


def make_server(tmp_path: Path, clock: FakeClock, **overrides: object) -> NsqdServer:
    opts = NsqdOptions(
        tcp_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        data_path=str(tmp_path / "data"),
        broadcast_address="127.0.0.1",
    )
    for key, value in overrides.items():
        setattr(opts, key, value)
    return NsqdServer(opts, clock=clock)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def server(tmp_path: Path, clock: FakeClock) -> NsqdServer:
    return make_server(tmp_path, clock, max_bytes_per_file=600)


@pytest.fixture
async def client(server: NsqdServer) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    app = web.Application(middlewares=[nsq_middleware])
    add_logread_routes(app, server)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client
    server.broker.close()


def publish(server: NsqdServer, clock: FakeClock, topic: str, bodies: list[bytes]) -> None:
    """One record per body, 1 ms apart, written at once (as a group commit would)."""
    log = server.broker.topic(topic).log
    for body in bodies:
        clock.advance_ms(1)
        log.append([Entry(body, timestamp=clock())])
    log.flush()


async def get(
    client: TestClient[web.Request, web.Application], path: str
) -> tuple[int, bytes, dict[str, str]]:
    resp = await client.get(path)
    return resp.status, await resp.read(), dict(resp.headers)


# -- the binary layout ---------------------------------------------------------------------


def test_decode_round_trip_with_extensions() -> None:
    recs = [
        Record(10, T0 + 1_500, 0, 0, b"plain"),
        Record(11, T0 + 2_999, 0, 1, b"traced", trace_id=0xABC, headers=b'{"a": "x", "n": 2}'),
        Record(12, T0 + 3_000, T0 + 9, 0, b"", partition_key=b"key", headers=b"not json"),
    ]
    chunk = decode_chunk(encode_columns(recs))
    assert chunk.count == 3
    assert chunk.deliver_at.tolist() == [0, 0, T0 + 9]
    assert chunk.flags.tolist() == [0, 1, 0]
    rows = to_record_batch(chunk, "t", 2).to_pylist()
    assert [r["offset"] for r in rows] == [10, 11, 12]
    assert [r["body"] for r in rows] == [b"plain", b"traced", b""]
    assert [r["id"] for r in rows] == ["%016x" % ((2 << 54) | o) for o in (10, 11, 12)]
    assert [r["trace_id"] for r in rows] == [None, "0000000000000abc", None]
    assert [r["headers"] for r in rows] == [None, [("a", "x"), ("n", "2")], None]
    assert [r["timestamp"].timestamp() * 1_000_000 for r in rows] == [
        (T0 + 1_500) // 1000,
        (T0 + 2_999) // 1000,
        (T0 + 3_000) // 1000,
    ]
    assert to_record_batch(chunk, "t", 2, limit=1).num_rows == 1


@given(
    bodies=st.lists(st.binary(max_size=40), max_size=8),
    cut=st.integers(min_value=0, max_value=400),
)
def test_truncated_replies_are_rejected_cleanly(bodies: list[bytes], cut: int) -> None:
    data = encode_columns([Record(i, i, 0, 0, b) for i, b in enumerate(bodies)])
    if cut < len(data):
        with pytest.raises(BadLogReply):
            decode_chunk(data[:cut])
    with pytest.raises(BadLogReply):
        decode_chunk(data + b"x")  # trailing bytes


@given(data=st.binary(max_size=300))
def test_garbage_replies_never_crash_the_decoder(data: bytes) -> None:
    try:
        chunk = decode_chunk(b"NQLR\x01\x00\x00\x00" + data)
    except BadLogReply:
        return
    assert chunk.count >= 0


# -- format=batches: the log's own batches --------------------------------------------------

MIXED = [
    Entry(b"plain"),
    Entry(b"traced", trace_id=0xABC, headers=b'{"a": "x", "n": 2}'),
    Entry(b"", deliver_at=T0 + 9, partition_key=b"key", headers=b"not json"),
    Entry(b"k" * 300, flags=1, partition_key=b"only-a-key"),
    Entry(b"last", trace_id=7),
]


def columns(chunk: wire.Chunk) -> dict[str, list[object]]:
    rows = to_record_batch(chunk, "t", 1).to_pylist()
    return {
        "rows": rows,
        "deliver_at": chunk.deliver_at.tolist(),
        "flags": chunk.flags.tolist(),
        "timestamps": chunk.timestamps.tolist(),
    }


def test_batches_decode_like_the_columns(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "log")
    log.append(MIXED)  # one batch with every kind of record
    log.append_bodies([b"same-%03d" % i for i in range(50)], timestamp=T0)  # same-size batch
    log.append_bodies([b"a", b"bb", b"ccc"], timestamp=T0 + 5)  # different sizes
    log.flush()
    for start in (0, 2, 5, 30, 56):
        raw = log.read_raw(start, 1 << 20, verify=True)
        from_batches = decode_batches(raw.data)
        from_columns = decode_chunk(encode_columns(log.read(start, 1000, 1 << 20)))
        assert from_batches.count == from_columns.count == 58 - start
        assert columns(from_batches) == columns(from_columns)
    only_same = log.read_raw(5, 1 << 20, verify=True)
    data, count = cut_batches(only_same, 50)  # the same-size batch alone: the 2-D path
    assert count == 50
    assert decode_batches(data).bodies.to_pylist() == [b"same-%03d" % i for i in range(50)]
    assert decode_batches(b"").count == 0
    log.close()


def test_cut_batches_reseals_the_last_batch(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "log")
    log.append(MIXED)
    log.append_bodies([b"x%d" % i for i in range(10)])
    log.flush()
    raw = log.read_raw(0, 1 << 20, verify=True)
    assert cut_batches(raw, 100) == (raw.data, 15)
    for limit in (1, 4, 5, 6, 14):
        data, count = cut_batches(raw, limit)
        assert count == limit
        assert RawBatch(0, count, data).records() == log.read(0, limit)  # every CRC checked
        assert decode_batches(data).offsets.tolist() == list(range(limit))
    log.close()


@given(
    sizes=st.lists(st.integers(0, 60), min_size=1, max_size=6),
    cut=st.integers(min_value=0, max_value=600),
    flip=st.integers(min_value=0, max_value=600),
)
def test_damaged_batches_are_rejected_cleanly(sizes: list[int], cut: int, flip: int) -> None:
    records = [Entry(b"b" * n, trace_id=n, headers=b"{}" if n % 2 else b"") for n in sizes]
    data = layout_batch(records)
    assert decode_batches(data).bodies.to_pylist() == [b"b" * n for n in sizes]
    if 0 < cut < len(data):  # (nothing at all is a valid reply: no records)
        with pytest.raises(BadLogReply):
            decode_batches(data[:cut])
    if flip < len(data):
        damaged = bytearray(data)
        damaged[flip] ^= 0x40
        with pytest.raises(BadLogReply):
            decode_batches(bytes(damaged))


def layout_batch(entries: list[Entry]) -> bytes:
    from nsqpy.storage.encode import encode_entries

    parts, _ = encode_entries(entries, 0, 1, T0)
    return b"".join(bytes(p) for p in parts)


@given(data=st.binary(max_size=300))
def test_garbage_batches_never_crash_the_decoder(data: bytes) -> None:
    try:
        chunk = decode_batches(data)
    except BadLogReply:
        return
    assert chunk.count >= 0


def chunk_records(chunk: wire.Chunk) -> list[LogRecord]:
    """A Chunk as the plain-Python decoders' records (keys are not in a Chunk: b"")."""
    return [
        LogRecord(o, t, d, f, b, tr, b"", h or b"")
        for o, t, d, f, b, tr, h in zip(
            chunk.offsets.tolist(),
            chunk.timestamps.tolist(),
            chunk.deliver_at.tolist(),
            chunk.flags.tolist(),
            chunk.bodies.to_pylist(),
            chunk.trace_ids.tolist(),
            chunk.headers.to_pylist(),
            strict=True,
        )
    ]


def decoded(decode: Callable[[bytes], object], data: bytes) -> object:
    try:
        return decode(data)
    except BadLogReply:
        return BadLogReply


@given(
    sizes=st.lists(st.integers(0, 60), min_size=1, max_size=6),
    flip=st.integers(min_value=0, max_value=600),
    bit=st.integers(0, 7),
)
def test_the_numpy_decoders_read_what_the_plain_ones_read(
    sizes: list[int], flip: int, bit: int
) -> None:
    """Whole or with one bit flipped, both decoders accept the same bodies, equally."""
    entries = [Entry(b"b" * n, trace_id=n, headers=b"{}" if n % 2 else b"") for n in sizes]
    batches = layout_batch(entries)
    columnar = encode_columns([Record(*r[:8]) for r in decode_batches_plain(batches)])
    for data, numpy_decode, plain_decode in (
        (batches, decode_batches, decode_batches_plain),
        (columnar, decode_chunk, decode_columns),
    ):
        bodies = [data]
        if flip < len(data):
            damaged = bytearray(data)
            damaged[flip] ^= 1 << bit
            bodies.append(bytes(damaged))
        for body in bodies:
            chunk = decoded(numpy_decode, body)
            plain = decoded(plain_decode, body)
            if chunk is BadLogReply or plain is BadLogReply:
                assert chunk is plain
            else:
                assert isinstance(chunk, wire.Chunk) and isinstance(plain, list)
                assert chunk_records(chunk) == [r._replace(partition_key=b"") for r in plain]


def sealed(records: bytes, n: int, base: int = 0) -> bytes:
    """A batch whose header and CRCs are right around whatever ``records`` holds."""
    from crc32c import crc32c

    head = layout.batch_header(base, 1, n, len(records), crc32c(records), 0)
    return bytes(head) + records


def test_well_sealed_nonsense_is_rejected_cleanly() -> None:
    good = layout_batch([Entry(b"abc", trace_id=1, partition_key=b"k"), Entry(b"de")])
    first = good[layout.BATCH_SIZE :]
    one = layout.RECORD.unpack_from(first, 0)
    cases = [
        sealed(first, 3),  # says three records, holds two
        sealed(first, 2, base=5),  # offsets do not follow the base
        sealed(b"\x01\x00\x00\x00" * 9, 9),  # records too short for their fields
        sealed(b"\xff\xff\x00\x00" + first[4:], 2),  # a length past the end
        sealed(first[:34] + struct.pack("<I", one[0]) + first[38:], 2),  # extension too long
        sealed(first[:46] + b"\xff\xff" + first[48:], 2),  # a key longer than its extension
    ]
    for i, data in enumerate(cases):
        with pytest.raises(BadLogReply):
            decode_batches(data)
            pytest.fail(f"case {i} decoded")


# -- the routes ----------------------------------------------------------------------------


async def test_read_returns_what_was_published(
    server: NsqdServer, clock: FakeClock, client: TestClient[web.Request, web.Application]
) -> None:
    publish(server, clock, "events", [b"m%d" % i for i in range(20)])
    status, body, headers = await get(
        client, "/log/read?topic=events&partition=0&offset=5&max_count=4"
    )
    assert status == 200
    assert headers["Content-Type"] == "application/x-nsqpy-log; version=1"
    assert headers["X-NSQ-Next-Offset"] == "9" and headers["X-NSQ-Record-Count"] == "4"
    assert (headers["X-NSQ-Low-Watermark"], headers["X-NSQ-High-Watermark"]) == ("0", "20")
    chunk = decode_chunk(body)
    assert chunk.offsets.tolist() == [5, 6, 7, 8]
    assert chunk.timestamps.tolist() == [T0 + (o + 1) * 1_000_000 for o in (5, 6, 7, 8)]
    rows = to_record_batch(chunk, "events", 0).to_pylist()
    assert [r["body"] for r in rows] == [b"m5", b"m6", b"m7", b"m8"]


async def test_read_in_batches_format(
    server: NsqdServer, clock: FakeClock, client: TestClient[web.Request, web.Application]
) -> None:
    log = server.broker.topic("events").log
    log.append_bodies([b"m%d" % i for i in range(10)], timestamp=T0)
    log.append(MIXED)
    log.flush()
    path = "/log/read?topic=events&format=batches"
    status, body, headers = await get(client, f"{path}&offset=3&max_count=9")
    assert status == 200
    assert headers["Content-Type"] == "application/x-nsqpy-log-batches; version=2"
    # (the server's segments are tiny: a reply stops at the end of a segment)
    assert headers["X-NSQ-Next-Offset"] == "10" and headers["X-NSQ-Record-Count"] == "7"
    chunk = decode_batches(body)
    assert chunk.offsets.tolist() == list(range(3, 10))
    assert chunk.bodies.to_pylist() == [b"m%d" % i for i in range(3, 10)]
    _, columnar, _ = await get(client, "/log/read?topic=events&offset=3&max_count=7")
    assert columns(chunk) == columns(decode_chunk(columnar))
    status, body, headers = await get(client, f"{path}&offset=10&max_count=2")
    assert (status, headers["X-NSQ-Next-Offset"], headers["X-NSQ-Record-Count"]) == (200, "12", "2")
    assert decode_batches(body).bodies.to_pylist() == [b"plain", b"traced"]
    status, body, headers = await get(client, f"{path}&offset=15")
    assert (status, body, headers["X-NSQ-Next-Offset"]) == (200, b"", "15")
    status, body, _ = await get(client, f"{path}&offset=16")
    assert status == 416
    status, body, _ = await get(client, "/log/read?topic=events&offset=0&format=arrow")
    assert (status, json.loads(body)["message"]) == (400, "INVALID_ARG_FORMAT")


async def test_read_bounds_and_the_end(
    server: NsqdServer, clock: FakeClock, client: TestClient[web.Request, web.Application]
) -> None:
    publish(server, clock, "t", [b"x" * 100] * 5)
    _, body, headers = await get(client, "/log/read?topic=t&offset=0&max_bytes=1")
    assert decode_chunk(body).count == 1  # at least one record, even above max_bytes
    _, body, headers = await get(client, "/log/read?topic=t&offset=1&max_bytes=300")
    assert decode_chunk(body).offsets.tolist() == [1, 2]
    _, body, headers = await get(client, "/log/read?topic=t&offset=0&max_count=99999999")
    assert decode_chunk(body).count == 5 and headers["X-NSQ-Next-Offset"] == "5"
    status, body, headers = await get(client, "/log/read?topic=t&offset=5")
    assert status == 200 and decode_chunk(body).count == 0
    assert headers["X-NSQ-Next-Offset"] == "5"
    status, body, _ = await get(client, "/log/read?topic=t&offset=6")
    assert status == 416
    assert json.loads(body) == {"message": "OFFSET_OUT_OF_RANGE", "offset": 6, "low": 0, "high": 5}


async def test_offsets_removed_by_retention_are_out_of_range(
    server: NsqdServer, clock: FakeClock, client: TestClient[web.Request, web.Application]
) -> None:
    publish(server, clock, "old", [b"y" * 100 for _ in range(30)])
    log = server.broker.topic("old").log
    low = log.retain(20, clock())
    assert 0 < low <= 20
    status, body, _ = await get(client, "/log/read?topic=old&offset=0")
    assert status == 416
    assert json.loads(body) == {
        "message": "OFFSET_OUT_OF_RANGE",
        "offset": 0,
        "low": low,
        "high": 30,
    }
    status, body, _ = await get(client, f"/log/read?topic=old&offset={low}&max_count=1")
    assert status == 200 and decode_chunk(body).offsets.tolist() == [low]
    log.sync()
    status, body, _ = await get(client, "/log/watermarks?topic=old")
    assert json.loads(body)["partitions"] == [
        {"partition": 0, "low": low, "high": 30, "durable": 30}
    ]


async def test_watermarks_and_offset_for_time(
    server: NsqdServer, clock: FakeClock, client: TestClient[web.Request, web.Application]
) -> None:
    server.broker.topic("empty")
    status, body, headers = await get(client, "/log/watermarks?topic=empty")
    assert status == 200 and headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    assert json.loads(body) == {
        "topic": "empty",
        "node": "127.0.0.1:0",  # broadcast address and HTTP port (not listening here)
        "partitions": [{"partition": 0, "low": 0, "high": 0, "durable": 0}],
    }
    publish(server, clock, "timed", [b"a", b"b", b"c", b"d"])  # at T0 + 1, 2, 3, 4 ms
    t0_ms = T0 // 1_000_000
    for ts_ms, offset in [(0, 0), (t0_ms + 1, 0), (t0_ms + 3, 2), (t0_ms + 4, 3), (t0_ms + 5, 4)]:
        status, body, _ = await get(
            client, f"/log/offset_for_time?topic=timed&partition=0&ts_ms={ts_ms}"
        )
        assert status == 200
        assert json.loads(body) == {
            "topic": "timed",
            "partition": 0,
            "offset": offset,
            "low": 0,
            "high": 4,
        }


async def test_ephemeral_topics_are_readable(
    server: NsqdServer, clock: FakeClock, client: TestClient[web.Request, web.Application]
) -> None:
    publish(server, clock, "mem#ephemeral", [b"e1", b"e2", b"e3"])
    status, body, _ = await get(client, "/log/read?topic=mem%23ephemeral&offset=0")
    assert status == 200
    rows = to_record_batch(decode_chunk(body), "mem#ephemeral", 0).to_pylist()
    assert [r["body"] for r in rows] == [b"e1", b"e2", b"e3"]
    path = "/log/read?topic=mem%23ephemeral&format=batches&offset=1&max_count=1"
    status, body, headers = await get(client, path)
    assert status == 200 and headers["X-NSQ-Next-Offset"] == "2"
    assert decode_batches(body).bodies.to_pylist() == [b"e2"]


def mpub_body(bodies: list[bytes]) -> bytes:
    frames = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    payload = struct.pack(">i", len(bodies)) + frames
    return struct.pack(">i", len(payload)) + payload


def channel_state(server: NsqdServer, topic: str, channel: str) -> dict[str, object]:
    """What a consumer group depends on: cursor, queue, in-flight set and counters."""
    ch = server.broker.topics[topic].channels[channel]
    (client,) = ch.consumers
    return {
        "cursor": (ch.cursor.confirmed, ch.cursor.next_read),
        "depth": ch.depth,
        "in_flight": sorted(ch.in_flight),
        "counts": (ch.message_count, ch.finish_count, ch.requeue_count, ch.timeout_count),
        "client": (client.in_flight_count, client.ready_count, client.finish_count),
    }


async def test_reads_never_move_a_channel(tmp_path: Path) -> None:
    """A subscribed client holds messages in flight while the log is read all over."""
    server = make_server(tmp_path, FakeClock(T0))
    await server.start()
    sub = pub = None
    try:
        pub = await AsyncWire.connect(server.tcp_port)
        sub = await AsyncWire.connect(server.tcp_port)
        await sub.send(b"SUB busy workers\n")
        assert await sub.read_frame() == (0, b"OK")
        await pub.send(b"MPUB busy\n" + mpub_body([b"m%d" % i for i in range(10)]))
        assert await pub.read_frame() == (0, b"OK")
        await sub.send(b"RDY 4\n")
        ids = [(await sub.read_frame())[1][10:26] for _ in range(4)]  # 4 in flight
        await sub.send(b"RDY 0\nFIN " + ids[0] + b"\n")  # one finished, three held
        ch = server.broker.topics["busy"].channels["workers"]
        await eventually(lambda: ch.finish_count == 1)
        before = channel_state(server, "busy", "workers")
        assert before["depth"] == 6 and len(before["in_flight"]) == 3  # type: ignore[arg-type]

        base = f"http://127.0.0.1:{server.http_port}"
        async with ClientSession() as http:
            for path in (
                "/log/read?topic=busy&offset=0",
                "/log/read?topic=busy&offset=3&max_count=2",
                "/log/read?topic=busy&offset=0&format=batches",
                "/log/read?topic=busy&offset=9",
                "/log/read?topic=busy&offset=10",
                "/log/watermarks?topic=busy",
                "/log/offset_for_time?topic=busy&ts_ms=0",
            ):
                async with http.get(base + path) as resp:
                    assert resp.status == 200, path
                    await resp.read()
            async with http.get(base + "/stats?format=json&topic=busy") as resp:
                stats = await resp.json()
        assert channel_state(server, "busy", "workers") == before
        (topic,) = stats["topics"]
        (channel,) = topic["channels"]
        assert (channel["depth"], channel["in_flight_count"]) == (6, 3)
        assert channel["clients"][0]["finish_count"] == 1
        assert channel["message_count"] == 10 and channel["requeue_count"] == 0
        await sub.send(b"RDY 10\n")  # the consumer goes on where it was: m4..m9 next
        bodies = [(await sub.read_frame())[1][26:] for _ in range(6)]
        assert bodies == [b"m%d" % i for i in range(4, 10)]
    finally:
        for wire in (sub, pub):
            if wire is not None:
                await wire.close()
        await server.stop()


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/log/read?offset=0", 400, "MISSING_ARG_TOPIC"),
        ("/log/read?topic=bad!name&offset=0", 400, "INVALID_ARG_TOPIC"),
        ("/log/read?topic=nope&offset=0", 404, "TOPIC_NOT_FOUND"),
        ("/log/read?topic=here", 400, "MISSING_ARG_OFFSET"),
        ("/log/read?topic=here&offset=-1", 400, "INVALID_ARG_OFFSET"),
        ("/log/read?topic=here&offset=1e3", 400, "INVALID_ARG_OFFSET"),
        ("/log/read?topic=here&offset=%D9%A3", 400, "INVALID_ARG_OFFSET"),  # Arabic-Indic 3
        ("/log/read?topic=here&offset=99999999999999999999", 400, "INVALID_ARG_OFFSET"),
        ("/log/read?topic=here&offset=0&max_count=0", 400, "INVALID_ARG_MAX_COUNT"),
        ("/log/read?topic=here&offset=0&max_bytes=x", 400, "INVALID_ARG_MAX_BYTES"),
        ("/log/read?topic=here&offset=0&partition=1", 404, "PARTITION_NOT_FOUND"),
        ("/log/read?topic=here&offset=0&partition=1024", 400, "INVALID_ARG_PARTITION"),
        ("/log/read?topic=here&offset=0&partition=+0", 400, "INVALID_ARG_PARTITION"),
        ("/log/watermarks", 400, "MISSING_ARG_TOPIC"),
        ("/log/watermarks?topic=nope", 404, "TOPIC_NOT_FOUND"),
        ("/log/offset_for_time?topic=here", 400, "MISSING_ARG_TS_MS"),
        ("/log/offset_for_time?topic=here&ts_ms=-5", 400, "INVALID_ARG_TS_MS"),
        ("/log/offset_for_time?topic=here&ts_ms=9223372036855", 400, "INVALID_ARG_TS_MS"),
    ],
)
async def test_bad_arguments(
    server: NsqdServer,
    client: TestClient[web.Request, web.Application],
    path: str,
    status: int,
    message: str,
) -> None:
    server.broker.topic("here")
    got, body, headers = await get(client, path)
    assert (got, json.loads(body)["message"]) == (status, message)
    assert headers["X-NSQ-Content-Type"] == "nsq; version=1.0"


async def test_only_get_is_allowed(client: TestClient[web.Request, web.Application]) -> None:
    resp = await client.post("/log/read?topic=t&offset=0", data=b"x")
    assert resp.status == 405 and (await resp.json())["message"] == "METHOD_NOT_ALLOWED"


TOKENS = [*"0123456789-+.eE x%&=#_abcdef\u0663", "topic=", "offset=", "partition=", "max_count="]
QUERY_TEXT = st.lists(st.sampled_from(TOKENS), max_size=20).map("".join)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    route=st.sampled_from(["/log/read", "/log/watermarks", "/log/offset_for_time"]),
    query=QUERY_TEXT,
)
async def test_garbage_queries_get_4xx_never_500(
    server: NsqdServer,
    clock: FakeClock,
    client: TestClient[web.Request, web.Application],
    route: str,
    query: str,
) -> None:
    if "g" not in server.broker.topics:
        publish(server, clock, "g", [b"1", b"2", b"3"])
    for prefix in ("", "topic=g&"):
        resp = await client.get(f"{route}?{prefix}{query}")
        assert resp.status in (200, 400, 404, 416), (route, query, resp.status)
        if resp.status != 200:
            assert "message" in await resp.json()
