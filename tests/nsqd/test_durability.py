"""The real nsqd killed with SIGKILL: deferred messages keep their delay, old FINs stay done."""

from __future__ import annotations

import json
import signal
import struct
import time
from pathlib import Path

from nsqpy.testing import WireClient, consume, http_get, nsqd_process, pub, saved_cursor, wait_for


def subscribe(port: int, topic: str, channel: str, rdy: int = 10) -> WireClient:
    c = WireClient(port, timeout=15)
    c.send(b"  V2" + f"SUB {topic} {channel}\nRDY {rdy}\n".encode())
    assert c.read_frame() == (0, b"OK")
    return c


def channel_stats(http: str, topic: str, channel: str) -> dict[str, int]:
    doc = json.loads(http_get(f"{http}/stats?format=json&topic={topic}")[1])
    for t in doc["topics"] or []:
        for c in t["channels"]:
            if c["channel_name"] == channel:
                return c  # type: ignore[no-any-return]
    return {}


def test_dpub_and_req_with_delay_keep_their_delay_across_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with nsqd_process(data) as first:
        consumer = subscribe(first.tcp_port, "later", "c")
        producer = WireClient(first.tcp_port)
        producer.send(b"  V2")
        dpub_at = time.time()
        body = b"deferred"
        producer.send(b"DPUB later 2500\n" + struct.pack(">i", len(body)) + body)
        assert producer.read_frame() == (0, b"OK")
        producer.send(pub("later", b"requeued"))
        assert producer.read_frame() == (0, b"OK")
        ftype, msg = consumer.read_frame()
        assert ftype == 2 and msg[26:] == b"requeued"
        req_at = time.time()
        consumer.send(b"REQ " + msg[10:26] + b" 3000\n")
        wait_for(lambda: channel_stats(first.http, "later", "c").get("deferred_count") == 2)
        first.signal(signal.SIGKILL)
        first.wait()
    with nsqd_process(data) as again:
        consumer = subscribe(again.tcp_port, "later", "c")
        arrivals = []
        for _ in range(2):
            ftype, msg = consumer.read_frame()
            assert ftype == 2
            attempts = struct.unpack_from(">H", msg, 8)[0]
            arrivals.append((msg[26:], attempts, time.time()))
            consumer.send(b"FIN " + msg[10:26] + b"\n")
        (first_body, first_attempts, first_t), (second_body, second_attempts, second_t) = arrivals
        assert (first_body, first_attempts) == (b"deferred", 1)
        assert (second_body, second_attempts) == (b"requeued", 2)
        assert first_t >= dpub_at + 2.5 - 0.05, "the DPUB came before its time"
        assert second_t >= req_at + 3.0 - 0.05, "the REQ's delay was lost"
        extra = consumer.frame_within(0.5)
        assert extra is None, f"delivered again: {extra}"


def test_fins_older_than_the_save_interval_survive_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with nsqd_process(data) as first:
        producer = WireClient(first.tcp_port)
        producer.send(b"  V2")
        for i in range(20):
            producer.send(pub("done", b"%d" % i))
            assert producer.read_frame() == (0, b"OK")
        assert consume(first.tcp_port, "done", "c", 10)[:10] == [b"%d" % i for i in range(10)]
        # The periodic save (every second) writes the 10 FINs; then the daemon dies hard.
        wait_for(lambda: (s := saved_cursor(data, "done", "c")) is not None and s.confirmed == 10)
        first.signal(signal.SIGKILL)
        first.wait()
    with nsqd_process(data) as again:
        got = consume(again.tcp_port, "done", "c", 10)
        assert sorted(got, key=int) == [b"%d" % i for i in range(10, 20)]
        c = subscribe(again.tcp_port, "done", "c")
        extra = c.frame_within(0.5)
        assert extra is None, f"a finished message came again: {extra}"
