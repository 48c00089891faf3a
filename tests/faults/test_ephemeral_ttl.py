"""The TTL sweep on the channels of an ephemeral topic expires what is past its TTL and
counts it; nothing else of what the channel holds disappears.

An ephemeral topic forgets what its channels have taken into their own memory queues, so a
sweep that read the topic's log instead of the channel's queue found the offsets gone,
reset the cursor past them and lost the undelivered messages without counting them.
"""

from __future__ import annotations

import time

from nsqpy.testing import StartNsqd, WireClient, channel_stats, http_request, wait_for

TOPIC = "ttl#ephemeral"
TOPIC_Q = "ttl%23ephemeral"


def ttl_channel(http: str, channel: str) -> dict[str, object]:
    doc = channel_stats(http, TOPIC, channel)
    doc.setdefault("expired_count", 0)  # nsqpy's extra fields appear once non-zero
    return doc


def mpub(http: str, bodies: list[bytes]) -> None:
    assert http_request("POST", f"{http}/mpub?topic={TOPIC_Q}", b"\n".join(bodies))[0] == 200


def test_the_ttl_sweep_expires_and_counts_what_an_ephemeral_channel_holds(
    start_nsqd: StartNsqd,
) -> None:
    # --queue-scan-interval=10ms: housekeeping (the TTL sweep) runs every 50 ticks, 0.5 s.
    nsqd = start_nsqd("--queue-scan-interval=10ms")
    consumer = WireClient(nsqd.tcp_port)  # keeps the ephemeral topic and channel alive
    consumer.send(b"  V2" + f"SUB {TOPIC} c\n".encode())
    assert consumer.read_frame() == (0, b"OK")  # RDY 0: nothing is delivered
    assert http_request("POST", f"{nsqd.http}/topic/setttl?topic={TOPIC_Q}&ttl=1s")[0] == 200

    old = [b"old-%d" % i for i in range(5)]
    published = time.monotonic()  # before: their timestamps are at or after it
    mpub(nsqd.http, old)
    assert ttl_channel(nsqd.http, "c")["depth"] == 5

    # The sweep expires the five once they are past the TTL, and counts each of them.
    wait_for(lambda: ttl_channel(nsqd.http, "c")["expired_count"] == 5, timeout=10)
    assert time.monotonic() - published >= 1.0  # not before their time
    doc = ttl_channel(nsqd.http, "c")
    assert (doc["depth"], doc["expired_count"], doc["message_count"]) == (0, 5, 5)

    # Fresh messages stay until their own TTL has passed; then they are counted too.
    fresh = [b"fresh-%d" % i for i in range(3)]
    published = time.monotonic()
    mpub(nsqd.http, fresh)
    doc = ttl_channel(nsqd.http, "c")
    assert (doc["depth"], doc["expired_count"]) == (3, 5)
    consumer.send(b"RDY 1\n")
    frame_type, data = consumer.read_frame()
    assert frame_type == 2 and data.endswith(b"fresh-0")  # delivered, not expired
    wait_for(lambda: ttl_channel(nsqd.http, "c")["expired_count"] == 7, timeout=10)
    assert time.monotonic() - published >= 1.0
    doc = ttl_channel(nsqd.http, "c")
    assert (doc["depth"], doc["in_flight_count"], doc["message_count"]) == (0, 1, 8)
