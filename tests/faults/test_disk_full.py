"""A disk that fills behind nsqd's back: every path reports into health, answers NSQ's codes.

The data path is a small tmpfs; ``disk.fill()`` takes its free space as another process (or
another topic) would. Then a publish to a new topic, a publish that rolls a segment, a new
channel (its cursor), a cursor save, a metadata save and the delayed store (REQ with a
delay, DPUB) each fail as NSQ fails a put: TCP ``E_*_FAILED``, HTTP 503 for a publish and
500 ``INTERNAL_ERROR`` for an action, with ``/ping`` 500 ``NOK - <error>``; never a crashed
handler. Once the space is back (``disk.free()``) the health is OK again when every write
that failed and is retried (the metadata, a cursor, a deferral, ``features.json``, a deleted
channel's deferred rows) has gone through, not sooner: a publish that works meanwhile does
not hide an unsaved ``nsqd.dat``. Everything acknowledged is consumed, nothing else, and a
channel created again does not inherit what a deleted one left in the delayed store.
"""

from __future__ import annotations

import json
import signal
import struct
from collections.abc import Callable
from pathlib import Path

from nsqpy.protocol.message import decode_message
from nsqpy.testing import (
    DaemonProcess,
    SmallDisk,
    StartNsqd,
    WireClient,
    channel_stats,
    http_get,
    http_request,
    nsqd_stats,
    pub,
    wait_for,
)

from .wire import publish, subscribe

ERROR, MESSAGE = 1, 2
DISK = 4 << 20
FULL = "No space left on device"


def connect(nsqd: DaemonProcess, identify: dict[str, object] | None = None) -> WireClient:
    wire = WireClient(nsqd.tcp_port)
    wire.send(b"  V2")
    if identify is not None:
        body = json.dumps(identify).encode()
        wire.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        assert wire.read_frame()[0] == 0
    return wire


def refused(nsqd: DaemonProcess, command: bytes, code: bytes) -> bytes:
    """Send ``command`` on a new connection: a fatal ``code`` error, then the close."""
    wire = connect(nsqd)
    wire.send(command)
    frame_type, data = wire.read_frame()
    assert frame_type == ERROR and data.startswith(code), data
    assert wire.closed()
    return data


def ping(nsqd: DaemonProcess) -> tuple[int, str]:
    status, body, _ = http_get(f"{nsqd.http}/ping")
    return status, body.decode()


def listed(disk: SmallDisk, topic: str, channel: str = "") -> bool:
    """Whether ``nsqd.dat`` names the topic (and the channel): its save, due at the next tick
    after they were made, would fail on the full disk and its failure be the health's text."""
    path = Path(disk.path) / "nsqd.dat"
    if not path.exists():
        return False
    for entry in json.loads(path.read_bytes())["topics"]:
        if entry["name"] == topic:
            return not channel or any(c["name"] == channel for c in entry["channels"])
    return False


def durable(nsqd: DaemonProcess, topic: str) -> int:
    """The offset below which the topic's (one) partition log is fsynced."""
    status, body, _ = http_get(f"{nsqd.http}/log/watermarks?topic={topic}")
    assert status == 200, body
    return int(json.loads(body)["partitions"][0]["durable"])


def unhealthy(nsqd: DaemonProcess, *words: str) -> str:
    status, text = ping(nsqd)
    assert status == 500 and text.startswith("NOK - "), (status, text)
    assert all(word in text for word in words), text
    assert nsqd_stats(nsqd.http)["health"] == text
    return text


def post(nsqd: DaemonProcess, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    status, data, _ = http_request("POST", nsqd.http + path, body)
    return status, data


def topics(nsqd: DaemonProcess) -> list[str]:
    return [t["topic_name"] for t in nsqd_stats(nsqd.http)["topics"]]


def channel_counts(nsqd: DaemonProcess, topic: str = "t", channel: str = "c") -> tuple[int, ...]:
    """(depth, deferred_count, in_flight_count) of a channel."""
    found = channel_stats(nsqd.http, topic, channel)
    return found["depth"], found["deferred_count"], found["in_flight_count"]


def next_message(wire: WireClient) -> tuple[bytes, bytes, int]:
    """(id, body, attempts) of the next message."""
    frame_type, data = wire.read_frame()
    assert frame_type == MESSAGE, (frame_type, data)
    msg = decode_message(data)
    return msg.id, msg.body, msg.attempts


def consume(nsqd: DaemonProcess, topic: str, n: int, channel: str = "check") -> list[bytes]:
    """FIN the first ``n`` messages of a new channel (which starts at the oldest only when
    it is the topic's first) and check that nothing follows."""
    wire = subscribe(nsqd, topic, channel, n + 1)
    bodies = []
    for _ in range(n):
        msg_id, body, _ = next_message(wire)
        wire.send(b"FIN " + msg_id + b"\n")
        bodies.append(body)
    extra = wire.frame_within(0.3)
    assert extra is None, extra
    wire.close()
    return bodies


def clean_log(nsqd: DaemonProcess) -> None:
    """No handler crashed, and each failure was logged once, not per retry."""
    assert not any("Traceback" in line or "crashed" in line for line in nsqd.log_lines)
    errors = [line for line in nsqd.log_lines if " ERROR: " in line]
    assert len(errors) == len(set(e.split(" ERROR: ")[1] for e in errors)), errors


def recovered(nsqd: DaemonProcess, disk: SmallDisk, write: Callable[[], None]) -> None:
    """Give the space back: ``write`` succeeds and the health is OK again."""
    disk.free()
    write()
    assert ping(nsqd) == (200, "OK")


def test_a_new_topic_on_a_full_disk_is_refused_with_nsqs_codes(
    start_nsqd: StartNsqd, small_disk: Callable[[int], SmallDisk]
) -> None:
    disk = small_disk(DISK)
    nsqd = start_nsqd("--sync-every=1", data=disk.path)
    publish(nsqd, "old", [b"before"])
    wait_for(lambda: durable(nsqd, "old") == 1)  # (a later fsync would clear the health)
    wait_for(lambda: listed(disk, "old"))
    disk.fill()

    data = refused(nsqd, pub("fresh", b"lost"), b"E_PUB_FAILED PUB failed ")
    assert FULL.encode() in data
    unhealthy(nsqd, "fresh", FULL)
    mpub = b"MPUB fresh\n" + struct.pack(">ii", 9, 1) + struct.pack(">i", 1) + b"x"
    refused(nsqd, mpub, b"E_MPUB_FAILED MPUB failed ")
    refused(nsqd, b"DPUB fresh 1000\n" + struct.pack(">i", 1) + b"x", b"E_DPUB_FAILED")
    assert post(nsqd, "/pub?topic=fresh", b"lost") == (503, b'{"message":"EXITING"}')
    assert post(nsqd, "/mpub?topic=fresh", b"a\nb") == (503, b'{"message":"EXITING"}')
    assert post(nsqd, "/topic/create?topic=fresh") == (500, b'{"message":"INTERNAL_ERROR"}')
    refused(nsqd, b"SUB fresh c\n", b"E_SUB_FAILED SUB failed ")
    unhealthy(nsqd, "fresh", FULL)
    assert topics(nsqd) == ["old"]  # nothing half made

    recovered(nsqd, disk, lambda: publish(nsqd, "fresh", [b"after"]))
    clean_log(nsqd)
    assert sorted(topics(nsqd)) == ["fresh", "old"]
    nsqd.signal(signal.SIGKILL)
    nsqd.wait()
    nsqd = start_nsqd(data=disk.path)  # what was acknowledged is found after a crash
    assert consume(nsqd, "old", 1) == [b"before"]
    assert consume(nsqd, "fresh", 1) == [b"after"]


def test_a_segment_roll_on_a_full_disk_fails_the_publish_only(
    start_nsqd: StartNsqd, small_disk: Callable[[int], SmallDisk]
) -> None:
    disk = small_disk(DISK)
    nsqd = start_nsqd("--max-bytes-per-file=16384", "--sync-every=1", data=disk.path)
    stored = [bytes([65 + i]) * 5000 for i in range(3)]
    publish(nsqd, "t", stored)
    wait_for(lambda: durable(nsqd, "t") == 3)  # (a later fsync would clear the health)
    wait_for(lambda: listed(disk, "t"))
    disk.fill()

    data = refused(nsqd, pub("t", b"Z" * 5000), b"E_PUB_FAILED PUB failed ")
    assert FULL.encode() in data
    unhealthy(nsqd, "t", FULL)
    assert post(nsqd, "/pub?topic=t", b"Z" * 5000) == (503, b'{"message":"EXITING"}')
    unhealthy(nsqd, "t", FULL)

    recovered(nsqd, disk, lambda: publish(nsqd, "t", [b"after"]))
    assert consume(nsqd, "t", 4) == [*stored, b"after"]
    clean_log(nsqd)


def test_a_new_channel_and_cursor_saves_on_a_full_disk(
    start_nsqd: StartNsqd, small_disk: Callable[[int], SmallDisk]
) -> None:
    disk = small_disk(DISK)
    nsqd = start_nsqd("--sync-every=1", "--sync-timeout=50ms", data=disk.path)
    publish(nsqd, "t", [b"m%d" % i for i in range(4)])
    consumer = subscribe(nsqd, "t", "c", 1)
    # every message fsynced first: an fsync that works is a write that works, and would
    # clear the failed creation's health below (one left to the ticker when it came in
    # while the fsync of the one before was running)
    wait_for(lambda: durable(nsqd, "t") == 4)
    wait_for(lambda: listed(disk, "t", "c"))
    disk.fill()

    url = "/channel/create?topic=t&channel=new"
    assert post(nsqd, url) == (500, b'{"message":"INTERNAL_ERROR"}')
    unhealthy(nsqd, "t/new", FULL)
    refused(nsqd, b"SUB t other\n", b"E_SUB_FAILED SUB failed ")
    assert post(nsqd, "/channel/delete?topic=t&channel=new")[0] == 404  # not half made

    # FINs make the cursor due; its save fails and is retried, delivery goes on.
    got = []
    for _ in range(2):
        msg_id, body, _ = next_message(consumer)
        consumer.send(b"FIN " + msg_id + b"\n")
        got.append(body)
    wait_for(lambda: "failed to save cursor" in ping(nsqd)[1])
    unhealthy(nsqd, "channel-c.cursor", FULL)

    disk.free()  # the periodic save writes the cursor again, and health is OK
    wait_for(lambda: ping(nsqd) == (200, "OK"))
    assert post(nsqd, url) == (200, b"")
    for _ in range(2):
        msg_id, body, _ = next_message(consumer)
        consumer.send(b"FIN " + msg_id + b"\n")
        got.append(body)
    assert got == [b"m0", b"m1", b"m2", b"m3"]
    clean_log(nsqd)


def test_metadata_saves_on_a_full_disk_are_retried(
    start_nsqd: StartNsqd, small_disk: Callable[[int], SmallDisk]
) -> None:
    disk = small_disk(DISK)
    nsqd = start_nsqd(data=disk.path)
    publish(nsqd, "t", [b"m"])
    saved = Path(disk.path) / "nsqd.dat"
    wait_for(saved.exists)  # (written by the next tick after the topic was created)
    disk.fill()

    assert post(nsqd, "/topic/pause?topic=t") == (200, b"")  # NSQ: the pause holds
    unhealthy(nsqd, "metadata", FULL)
    assert json.loads(saved.read_bytes())["topics"][0]["paused"] is False
    publish(nsqd, "t", [b"small"])  # the log's last page takes it: nsqd.dat is still unsaved
    unhealthy(nsqd, "failed to persist metadata", FULL)

    disk.free()  # the ticker writes the metadata again without any other write
    wait_for(lambda: ping(nsqd) == (200, "OK"))
    assert json.loads(saved.read_bytes())["topics"][0]["paused"] is True
    clean_log(nsqd)


def test_the_delayed_store_on_a_full_disk(
    start_nsqd: StartNsqd, small_disk: Callable[[int], SmallDisk]
) -> None:
    disk = small_disk(DISK)
    nsqd = start_nsqd(data=disk.path)
    publish(nsqd, "t", [b"first"])
    consumer = connect(nsqd, {"msg_timeout": 1000})
    consumer.send(b"SUB t c\nRDY 1\n")
    assert consumer.read_frame() == (0, b"OK")
    msg_id, body, attempts = next_message(consumer)
    assert (body, attempts) == (b"first", 1)
    wait_for(lambda: listed(disk, "t", "c"))  # (or its save fails on the full disk)
    disk.fill()

    # REQ with a delay: the store cannot take it; E_REQ_FAILED (not fatal), still in flight.
    consumer.send(b"REQ " + msg_id + b" 60000\n")
    frame_type, data = consumer.read_frame()
    assert frame_type == ERROR and data.startswith(b"E_REQ_FAILED REQ " + msg_id + b" failed ")
    unhealthy(nsqd, "failed to defer a requeued message of channel t/c", "disk is full")
    assert channel_counts(nsqd) == (0, 0, 1)  # (depth, deferred, in flight): as it was
    # Its timeout gives it back (attempt 2), as to a REQ that never came.
    msg_id, body, attempts = next_message(consumer)
    assert (body, attempts) == (b"first", 2)
    consumer.send(b"FIN " + msg_id + b"\n")

    # A DPUB is written to the log (acknowledged) but cannot be deferred: it waits in
    # the channel's backlog, and delivery stops before it rather than lose its delay.
    producer = connect(nsqd)
    producer.send(b"DPUB t 1500\n" + struct.pack(">i", 7) + b"delayed")
    assert producer.read_frame() == (0, b"OK")
    unhealthy(nsqd, "failed to defer a message of channel t/c", "disk is full")
    assert channel_counts(nsqd) == (1, 0, 0)

    disk.free()
    producer.send(pub("t", b"now"))
    assert producer.read_frame() == (0, b"OK")
    # OK once the delayed store works again for every path that failed (the next scan),
    # not merely because the log took a write.
    wait_for(lambda: ping(nsqd) == (200, "OK"))
    bodies = set()
    for _ in range(2):
        msg_id, body, _ = next_message(consumer)
        consumer.send(b"FIN " + msg_id + b"\n")
        bodies.add(body)
    assert bodies == {b"now", b"delayed"}
    clean_log(nsqd)


def test_nsqd_restarts_on_a_full_disk_and_serves_what_it_has(
    start_nsqd: StartNsqd, small_disk: Callable[[int], SmallDisk]
) -> None:
    disk = small_disk(DISK)
    nsqd = start_nsqd("--sync-every=1", "--sync-timeout=50ms", data=disk.path)
    publish(nsqd, "t", [b"a", b"b"])
    subscribe(nsqd, "t", "c", 0).close()
    disk.fill()
    nsqd.signal(signal.SIGKILL)
    nsqd.wait()

    # It starts (NSQ does), unhealthy: its metadata and cursors cannot be written back.
    nsqd = start_nsqd("--sync-every=1", "--sync-timeout=50ms", data=disk.path)
    unhealthy(nsqd, FULL)
    consumer = subscribe(nsqd, "t", "c", 2)
    got = []
    for _ in range(2):
        msg_id, body, _ = next_message(consumer)
        consumer.send(b"FIN " + msg_id + b"\n")
        got.append(body)
    assert got == [b"a", b"b"]
    disk.free()  # the cursor and metadata are written again: OK without a publish
    wait_for(lambda: ping(nsqd) == (200, "OK"))
    clean_log(nsqd)
    assert nsqd.stop() == 0
    nsqd = start_nsqd(data=disk.path)  # the FINs were saved: nothing comes again
    consumer = subscribe(nsqd, "t", "c", 2)
    assert consumer.frame_within(0.3) is None


def test_settings_and_a_deleted_channels_rows_are_written_when_the_space_is_back(
    start_nsqd: StartNsqd, small_disk: Callable[[int], SmallDisk]
) -> None:
    disk = small_disk(DISK)
    nsqd = start_nsqd(data=disk.path)
    producer = connect(nsqd)
    producer.send(b"DPUB t 600000\n" + struct.pack(">i", 5) + b"later")
    assert producer.read_frame() == (0, b"OK")
    assert post(nsqd, "/channel/create?topic=t&channel=c") == (200, b"")
    producer.send(b"DPUB t 600000\n" + struct.pack(">i", 5) + b"later")
    assert producer.read_frame() == (0, b"OK")
    assert channel_counts(nsqd) == (0, 2, 0)
    disk.fill()

    assert post(nsqd, "/topic/setttl?topic=t&ttl=60000") == (500, b'{"message":"INTERNAL_ERROR"}')
    unhealthy(nsqd, "features.json", FULL)
    assert post(nsqd, "/channel/delete?topic=t&channel=c") == (200, b"")
    unhealthy(nsqd, "failed to clear the deferred messages of channel t/c")

    disk.free()  # the ticker writes both again
    wait_for(lambda: ping(nsqd) == (200, "OK"))
    assert post(nsqd, "/channel/create?topic=t&channel=c") == (200, b"")
    assert channel_counts(nsqd) == (0, 0, 0)  # nothing of the deleted channel
    clean_log(nsqd)
    assert nsqd.stop() == 0
    nsqd = start_nsqd(data=disk.path)
    doc = json.loads(http_get(f"{nsqd.http}/stats?format=json&topic=t")[1])
    assert doc["topics"][0]["ttl_ms"] == 60000  # the setting outlived the full disk
    assert channel_counts(nsqd) == (0, 0, 0)
