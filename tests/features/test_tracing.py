"""Tracing: switched on at run time, each traced message's life kept in a bounded store."""

from __future__ import annotations

import json
import time
from array import array
from pathlib import Path

import aiohttp

from nsqpy.broker.broker import Broker
from nsqpy.broker.client import Client
from nsqpy.options import NsqdOptions
from nsqpy.protocol.message import encode_message_id
from nsqpy.protocol.state import SUBSCRIBED
from nsqpy.storage.tracestore import TraceEvent, TraceStore
from nsqpy.testing import (
    AsyncWire,
    FakeClock,
    FrameSink,
    NsqdServers,
    http_get,
    http_request,
    nsqd_process,
    pub,
    publish,
    read_message,
    subscriber,
    wait_for,
)

from .conftest import Http, finish_traced_message

BIG_TRACE_ID = (1 << 64) - 1


async def test_a_traced_message_life_from_publish_to_finish(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession, clock: FakeClock
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    assert (await http.post("/topic/create?topic=tr"))[0] == 200
    assert await http.post("/message/trace/enable?topic=tr") == (
        200,
        {"topic": "tr", "channel": "", "trace": True},
    )
    sub = await subscriber(nsqd.tcp_port, "tr", "c", rdy=1, msg_timeout_ms=1000)
    assert await http.post(f"/pub?topic=tr&trace_id={BIG_TRACE_ID}", b"hello") == (200, "OK")
    _, _, msg_id, _ = await read_message(sub)
    await sub.send(b"REQ " + msg_id + b" 0\n")
    assert (await read_message(sub)).attempts == 2
    clock.advance_ms(1500)
    assert (await read_message(sub)).attempts == 3
    await sub.send(b"FIN " + msg_id + b"\n")
    await http.settled("tr", "c")

    status, doc = await http.get(f"/message/trace?topic=tr&id={msg_id.decode()}")
    assert status == 200
    events = doc["events"]
    assert [(e["event"], e["channel"], e["attempts"]) for e in events] == [
        ("published", "", 0),
        ("delivered", "c", 1),
        ("requeued", "c", 1),
        ("delivered", "c", 2),
        ("timed_out", "c", 2),
        ("delivered", "c", 3),
        ("finished", "c", 3),
    ]
    assert {(e["trace_id"], e["id"], e["topic"], e["offset"]) for e in events} == {
        (BIG_TRACE_ID, msg_id.decode(), "tr", 0)
    }
    assert events[0]["client"].startswith("http@127.0.0.1")
    remote = (await http.channel("tr", "c"))["clients"][0]["remote_address"]
    assert {e["client"] for e in events[1:]} == {f"127.0.0.1@{remote}"}
    assert events[2]["detail"] == "delay_ms=0"
    stamps = [e["timestamp"] for e in events]
    assert stamps == sorted(stamps) and stamps[-1] - stamps[0] == 1_500_000_000
    assert await http.get(f"/message/trace?trace_id={BIG_TRACE_ID}") == (200, doc)

    producer = await AsyncWire.connect(nsqd.tcp_port)  # a TCP publish names its client
    await producer.send(pub("tr", b"by tcp"))
    assert await producer.read_frame() == (0, b"OK")
    _, _, tcp_id, _ = await read_message(sub)
    await sub.send(b"FIN " + tcp_id + b"\n")
    await http.settled("tr", "c")
    _, tcp_doc = await http.get(f"/message/trace?topic=tr&id={tcp_id.decode()}")
    published = tcp_doc["events"][0]
    assert (published["event"], published["trace_id"]) == ("published", 0)
    assert published["client"].startswith("127.0.0.1@127.0.0.1:")

    assert (await http.post("/message/trace/disable?topic=tr"))[0] == 200
    await publish(nsqd.tcp_port, pub("tr", b"untraced"))
    _, _, other, _ = await read_message(sub)
    await sub.send(b"FIN " + other + b"\n")
    await http.settled("tr", "c")
    assert await http.get(f"/message/trace?topic=tr&id={other.decode()}") == (200, {"events": []})


async def test_channel_tracing_takes_the_trace_id_from_the_record(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    a = await subscriber(nsqd.tcp_port, "ch", "a")
    b = await subscriber(nsqd.tcp_port, "ch", "b")
    assert (await http.post("/message/trace/enable?topic=ch&channel=a"))[0] == 200
    assert (await http.channel("ch", "a"))["trace"] is True
    assert "trace" not in await http.channel("ch", "b")
    assert (await http.post("/pub?topic=ch&trace_id=7", b"x"))[0] == 200
    for wire in (a, b):
        _, _, msg_id, _ = await read_message(wire)
        await wire.send(b"FIN " + msg_id + b"\n")
    await http.settled("ch", "a")
    await http.settled("ch", "b")
    status, doc = await http.get("/message/trace?trace_id=7&topic=ch")
    assert status == 200
    assert [(e["event"], e["channel"], e["trace_id"]) for e in doc["events"]] == [
        ("delivered", "a", 7),
        ("finished", "a", 7),
    ]
    assert nsqd.broker.topics["ch"].log.read(0, 1)[0].trace_id == 7  # kept in the log record


async def test_nothing_is_written_while_nothing_is_traced(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    sub = await subscriber(nsqd.tcp_port, "quiet", "c")
    assert (await http.post("/pub?topic=quiet&trace_id=5", b"x"))[0] == 200
    _, _, msg_id, _ = await read_message(sub)
    await sub.send(b"FIN " + msg_id + b"\n")
    await http.settled("quiet", "c")
    assert await http.get("/message/trace?trace_id=5") == (200, {"events": []})
    assert not (nsqd.broker.data_path / "trace.sqlite").exists()
    assert nsqd.broker.features.tracer._thread is None


def test_the_store_keeps_at_most_its_bound(tmp_path: Path) -> None:
    def event(i: int) -> TraceEvent:
        return TraceEvent(i // 2, "t", "c", 0, i, f"0:{i:x}", i % 2, "delivered", "me", 1)

    store = TraceStore(tmp_path / "trace.sqlite", max_records=5)
    for start in (0, 4, 8):  # (two events of each time share a row)
        store.append([event(i) for i in range(start, start + 4)])
    assert store.count() == 5
    assert store.by_message("t", 0, 8) == [event(8)]
    assert store.by_message("t", 0, 6) == []  # the oldest went first, also half a row
    assert [e.offset for e in store.by_message("t", 0, 7)] == [7]
    store.close()
    again = TraceStore(tmp_path / "trace.sqlite", max_records=5)
    assert again.count() == 5
    assert [e.offset for e in again.by_trace_id(1)] == [7, 9, 11]
    assert [e.offset for e in again.by_trace_id(1, limit=2)] == [7, 9]
    again.close()


def test_a_traced_burst_is_one_row_and_each_event_comes_back(tmp_path: Path) -> None:
    """A burst of events of one kind, client and time (a pump, a run of FINs) is stored as
    one row; every event of it is found by its message and by its trace ID."""
    store = TraceStore(tmp_path / "trace.sqlite", max_records=1000)
    events = [TraceEvent(5, "t", "c", 1, o, f"1:{o:x}", 9 if o == 12 else 0, "finished",
                         "me", 1 + o % 3) for o in range(10, 20)]  # fmt: skip
    store.append(events)
    rows = store._db.execute("SELECT COUNT(*) FROM trace_batch").fetchone()[0]
    assert rows == 1 and store.count() == 10
    assert [store.by_message("t", 1, o) for o in (10, 12, 19)] == [[events[0]], [events[2]],
                                                                   [events[9]]]  # fmt: skip
    assert store.by_message("t", 0, 12) == [] and store.by_message("u", 1, 12) == []
    assert store.by_trace_id(9) == [events[2]] and store.by_trace_id(9, "u") == []
    store.close()


def test_a_run_of_consecutive_offsets_at_one_attempt_count_packs_to_no_offsets(
    tmp_path: Path,
) -> None:
    """The usual burst (a pump, a run of FINs) stores no offsets and one attempt count; an
    out-of-order or mixed burst stores each; both come back event by event, also after the
    bound cuts a run in half, and a row of the older full form still reads."""
    store = TraceStore(tmp_path / "trace.sqlite", max_records=1000)

    def ev(o: int, attempts: int = 1, tid: int = 0) -> TraceEvent:
        return TraceEvent(5, "t", "c", 0, o, f"0:{o:x}", tid, "delivered", "me", attempts)

    run = [ev(o, tid=7 if o == 103 else 0) for o in range(100, 110)]
    mixed = [ev(o, attempts=1 + o % 2) for o in (200, 202, 201, 205)]
    store.append(run)
    store.append(mixed)
    rows = store._db.execute(
        "SELECT first, last, count, length(offsets), length(attempts) FROM trace_batch ORDER BY seq"
    ).fetchall()
    assert rows == [(100, 109, 10, 0, 4), (200, 205, 4, 32, 16)]
    assert [store.by_message("t", 0, e.offset) for e in run + mixed] == [[e] for e in run + mixed]
    assert store.by_trace_id(7) == [run[3]]
    assert store.by_message("t", 0, 203) == [] and store.by_message("t", 0, 110) == []
    # a row as the full form stores it: every offset and attempt count
    store._db.execute(
        "INSERT INTO trace_batch (ts, topic, channel, partition, event, client, detail, first, "
        "last, count, offsets, attempts) VALUES (6, 't', 'c', 0, 'finished', 'me', '', 300, "
        "301, 2, ?, ?)",
        (array("q", [300, 301]).tobytes(), array("I", [1, 1]).tobytes()),
    )
    store._count += 2
    old = TraceEvent(6, "t", "c", 0, 301, "0:12d", 0, "finished", "me", 1)
    assert store.by_message("t", 0, 301) == [old]
    store.close()
    small = TraceStore(tmp_path / "small.sqlite", max_records=4)
    small.append(run)  # 6 of the run's 10 go; the row left holds 106-109, still packed
    assert small.count() == 4
    assert small._db.execute("SELECT first, count, length(offsets) FROM trace_batch").fetchall() \
        == [(106, 4, 0)]  # fmt: skip
    assert [small.by_message("t", 0, o) for o in (105, 106, 109)] == [[], [run[6]], [run[9]]]
    small.close()


def test_trace_records_and_switches_survive_a_real_restart(tmp_path: Path) -> None:
    with nsqd_process(tmp_path / "data", "--trace-max-records=1000") as nsqd:
        c, _ = finish_traced_message(nsqd, "life", 42)
        wait_for(lambda: events(nsqd.http, "trace_id=42")[-1:] == ["finished"])
        c.close()
        nsqd.stop()
        nsqd.start()
        assert events(nsqd.http, "trace_id=42") == ["published", "delivered", "finished"]
        _, raw, _ = http_get(f"{nsqd.http}/stats?format=json&topic=life")
        assert json.loads(raw)["topics"][0]["trace"] is True
        assert http_request("POST", f"{nsqd.http}/pub?topic=life&trace_id=42", b"n")[0] == 200
        assert events(nsqd.http, "trace_id=42") == ["published", "delivered", "finished",
                                                    "published"]  # fmt: skip


def events(base: str, query: str) -> list[str]:
    status, raw, _ = http_get(f"{base}/message/trace?{query}")
    assert status == 200, raw
    return [e["event"] for e in json.loads(raw)["events"]]


async def test_bad_trace_requests_are_refused(
    nsqd_servers: NsqdServers, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_servers.start()
    http = Http(session, nsqd)
    await subscriber(nsqd.tcp_port, "t", "c", rdy=0)
    cases = [
        ("GET", "/message/trace", 400, "MISSING_ARG_ID"),
        ("GET", "/message/trace?topic=t&id=zz", 400, "INVALID_MESSAGE_ID"),
        ("GET", "/message/trace?topic=t&id=00000000000000000", 400, "INVALID_MESSAGE_ID"),
        ("GET", "/message/trace?id=0000000000000000", 400, "MISSING_ARG_TOPIC"),
        ("GET", "/message/trace?trace_id=abc", 400, "INVALID_TRACE_ID"),
        ("GET", "/message/trace?trace_id=-1", 400, "INVALID_TRACE_ID"),
        ("GET", "/message/trace?trace_id=0", 400, "INVALID_TRACE_ID"),
        ("GET", "/message/trace?trace_id=18446744073709551616", 400, "INVALID_TRACE_ID"),
        ("GET", "/message/trace?trace_id=1&limit=0", 400, "INVALID_LIMIT"),
        ("GET", "/message/trace?trace_id=1&limit=x", 400, "INVALID_LIMIT"),
        ("GET", "/message/trace?trace_id=1&limit=100001", 400, "INVALID_LIMIT"),
        ("GET", "/message/trace?trace_id=1&topic=bad!", 400, "INVALID_ARG_TOPIC"),
        ("POST", "/message/trace/enable", 400, "MISSING_ARG_TOPIC"),
        ("POST", "/message/trace/enable?topic=nope", 404, "TOPIC_NOT_FOUND"),
        ("POST", "/message/trace/enable?topic=t&channel=nope", 404, "CHANNEL_NOT_FOUND"),
        ("POST", "/message/trace/enable?topic=t&channel=bad!", 400, "INVALID_ARG_CHANNEL"),
        ("POST", "/message/trace/disable?topic=t&channel=", 400, "INVALID_ARG_CHANNEL"),
        ("POST", "/pub?topic=t&trace_id=abc", 400, "INVALID_TRACE_ID"),
        ("POST", "/pub?topic=t&trace_id=-3", 400, "INVALID_TRACE_ID"),
        ("GET", "/message/trace/enable?topic=t", 405, "METHOD_NOT_ALLOWED"),
    ]
    for method, path, status, code in cases:
        assert await http.call(method, path, b"body") == (status, {"message": code}), path
    assert (await http.topic("t"))["message_count"] == 0
    assert not (nsqd.broker.data_path / "features.json").exists()


def test_every_event_of_a_busy_traced_topic_is_kept_in_few_rows(tmp_path: Path) -> None:
    """Publishes, deliveries and FIN bursts of a traced topic while the writer thread runs
    (taking bursts closed and open): every event is stored once, one row per burst."""
    broker = Broker(NsqdOptions(data_path=str(tmp_path)))
    client = Client(sink=FrameSink(), ready_count=1 << 30, state=SUBSCRIBED)
    channel = broker.subscribe(client, "busy", "c")
    topic = broker.topics["busy"]
    broker.features.set_trace(topic, None, True)
    tracer = broker.features.tracer
    sent = 0
    started = time.monotonic()
    for _ in range(60):
        broker.publish(topic, [b"x"] * 100)
        flushed, _ = broker.flush()
        broker.pump(flushed)
        ids = [encode_message_id(0, offset) for offset in range(sent, sent + 100)]
        assert channel.finish_ids(client, ids, broker.clock()) == []
        sent += 100
        time.sleep(0.005)  # (the writer wakes every 100 ms meanwhile)
    wakes = (time.monotonic() - started) / tracer.flush_s + 1
    assert tracer.sync(10)
    assert tracer.store.count() == 3 * sent
    rows = tracer.store._db.execute("SELECT COUNT(*) FROM trace_batch").fetchone()[0]
    # a burst per publish, pump and FIN run, and a few split: a wake of the writer taking a
    # burst open splits it at most in three (a busy machine's loop took longer: more wakes)
    assert rows <= 3 * 60 + 2 * wakes, (rows, wakes)
    for offset in (0, 2999, sent - 1):
        got = tracer.by_message("busy", encode_message_id(0, offset).decode())
        assert [e.event for e in got] == ["published", "delivered", "finished"]
    broker.close()
