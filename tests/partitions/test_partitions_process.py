"""Partitions, ordered channels and extensions with the real nsqd program: an nsqd
restart, several ordered consumers (processes) with one killed mid-stream, and the real
NSQ client libraries from PyPI against a partitioned topic.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsqpy.protocol.extend import encode_mpub_ext, encode_pub_ext, encode_pub_partition
from nsqpy.protocol.message import decode_message
from nsqpy.testing import (
    DaemonProcess,
    WireClient,
    http_get,
    http_request,
    nsqd_process,
    saved_cursor,
    wait_for,
)

HERE = Path(__file__).parent
COMPAT = HERE.parent / "compat" / "clients"


def post(daemon: DaemonProcess, path: str, body: bytes = b"") -> tuple[int, bytes]:
    status, data, _ = http_request("POST", f"{daemon.http}{path}", body)
    return status, data


def topic_stats(daemon: DaemonProcess, topic: str) -> dict[str, Any]:
    status, body, _ = http_get(f"{daemon.http}/stats?format=json&topic={topic}")
    assert status == 200
    found = json.loads(body)["topics"]
    return found[0] if found else {}


def channel_stats(daemon: DaemonProcess, topic: str) -> dict[str, Any]:
    channels = topic_stats(daemon, topic).get("channels") or []
    assert isinstance(channels, list)
    return channels[0] if channels else {}


def highs(daemon: DaemonProcess, topic: str) -> list[int]:
    status, body, _ = http_get(f"{daemon.http}/log/watermarks?topic={topic}")
    assert status == 200
    return [p["high"] for p in json.loads(body)["partitions"]]


def wire_to(daemon: DaemonProcess) -> WireClient:
    wire = WireClient(daemon.tcp_port)
    wire.send(b"  V2")
    return wire


class Consumer:
    """``clients/ordered_consumer.py`` in its own process; its lines read by a thread."""

    def __init__(
        self, port: int, topic: str, channel: str, requeue_every: int, work_ms: int, stall: int
    ) -> None:
        script = HERE / "clients" / "ordered_consumer.py"
        args = [sys.executable, str(script), str(port), topic, channel]
        args += [str(requeue_every), str(work_ms), str(stall)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[tuple[int, int, int, str, str]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            part, offset, attempts, body, action = raw.decode().split()
            self.lines.append((int(part), int(offset), int(attempts), body, action))

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(15)
        self._thread.join(5)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def nsqd(tmp_path: Path) -> Iterator[DaemonProcess]:
    with nsqd_process(tmp_path / "data") as daemon:
        yield daemon


def check_per_key_order(consumers: list[Consumer], keys: int, per_key: int) -> None:
    """Every message finished; per key, each consumer saw non-decreasing sequence numbers
    and, taken in the order they owned the key, one non-decreasing run covering it all."""
    finished = {body for c in consumers for (_, _, _, body, action) in c.lines if action == "FIN"}
    assert finished == {f"k{k}:{s}" for k in range(keys) for s in range(per_key)}
    for k in range(keys):
        runs = []
        for c in consumers:
            seqs = [
                int(b.split(":")[1]) for (_, _, _, b, _) in c.lines if b.split(":")[0] == f"k{k}"
            ]
            assert seqs == sorted(seqs), (k, seqs)
            if seqs:
                runs.append(seqs)
        joined = [s for run in sorted(runs, key=lambda r: r[0]) for s in run]
        assert joined == sorted(joined), (k, runs)
        assert sorted(set(joined)) == list(range(per_key))


def test_ordered_consumers_with_requeues_and_one_killed_keep_per_key_order(
    nsqd: DaemonProcess,
) -> None:
    keys, per_key = 8, 40
    assert post(nsqd, "/topic/create?topic=ord&partition_num=4") == (200, b"")
    # the victim hangs from its 15th delivery on (holding what it has), then is killed
    victim = Consumer(nsqd.tcp_port, "ord", "c", 7, work_ms=2, stall=15)
    consumers = [victim] + [Consumer(nsqd.tcp_port, "ord", "c", 7, 2, 0) for _ in range(2)]
    try:
        wait_for(lambda: len(channel_stats(nsqd, "ord").get("clients") or []) == 3, 20)
        producer = wire_to(nsqd)
        for seq in range(per_key):
            batch = [({"##partition_key": f"k{k}"}, b"k%d:%d" % (k, seq)) for k in range(keys)]
            producer.send(encode_mpub_ext("ord", batch))
            assert producer.read_frame() == (0, b"OK")
        wait_for(lambda: any(line[4] == "HELD" for line in victim.lines), 30)
        victim.stop(signal.SIGKILL)
        total = keys * per_key

        def all_finished() -> bool:
            fins = {b for c in consumers for (_, _, _, b, a) in c.lines if a == "FIN"}
            return len(fins) == total

        wait_for(all_finished, 60)
        channel = channel_stats(nsqd, "ord")
        wait_for(lambda: channel_stats(nsqd, "ord")["in_flight_count"] == 0, 20)
        assert channel["depth"] == 0 and channel["ordered"] is True
    finally:
        for c in consumers:
            c.stop()
    check_per_key_order(consumers, keys, per_key)
    requeued = [line for c in consumers for line in c.lines if line[4] == "REQ"]
    assert requeued, "the consumers requeued some messages"
    survivors = [line for c in consumers if c is not victim for line in c.lines]
    handed_on = {line[3] for line in victim.lines} & {line[3] for line in survivors}
    assert handed_on, "the killed consumer's in-flight messages went to the others"
    assert len(victim.lines) < keys * per_key // 2, "killed mid-stream"


def test_partitions_ordered_position_and_headers_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with nsqd_process(data) as first:
        assert post(first, "/topic/create?topic=rs&partition_num=3") == (200, b"")
        assert post(first, "/channel/create?topic=rs&channel=c") == (200, b"")
        assert post(first, "/channel/setorder?topic=rs&channel=c&order=true") == (200, b"")
        producer = wire_to(first)
        for part in range(3):
            for i in range(5):
                producer.send(encode_pub_ext("rs", {"i": str(i)}, b"%d-%d" % (part, i), part))
                assert producer.read_frame() == (0, b"OK")
        consumer = wire_to(first)
        consumer.send(b"SUB rs c\nRDY 10\n")
        assert consumer.read_frame() == (0, b"OK")
        delivered = {p: 0 for p in range(3)}
        while sum(delivered.values()) < 9:  # 2 finished and 1 left in flight per partition
            msg = decode_message(consumer.read_frame()[1])
            part = int(msg.id, 16) >> 54
            delivered[part] += 1
            if delivered[part] <= 2:
                consumer.send(b"FIN " + msg.id + b"\n")
        consumer.close()
        wait_for(lambda: channel_stats(first, "rs")["in_flight_count"] == 0, 10)
        assert post(first, "/topic/create?topic=keyed&partition_num=4") == (200, b"")
        assert post(first, "/pub?topic=keyed&partition_key=stable", b"1") == (200, b"OK")
        keyed_before = highs(first, "keyed")
        assert first.stop() == 0
    with nsqd_process(data) as second:
        assert post(second, "/pub?topic=keyed&partition_key=stable", b"2") == (200, b"OK")
        assert highs(second, "keyed") == [2 * h for h in keyed_before]  # the same partition
        doc = topic_stats(second, "rs")
        assert doc["partition_num"] == 3 and doc["message_count"] == 0
        assert channel_stats(second, "rs")["ordered"] is True
        status, body, _ = http_get(f"{second.http}/log/watermarks?topic=rs")
        assert status == 200
        assert [p["high"] for p in json.loads(body)["partitions"]] == [5, 5, 5]
        consumer = wire_to(second)
        consumer.send(b'IDENTIFY\n\x00\x00\x00\x19{"extend_support": true}\nSUB rs c\nRDY 10\n')
        assert consumer.read_frame() == (0, b"OK")
        assert consumer.read_frame() == (0, b"OK")
        seen: dict[int, list[int]] = {p: [] for p in range(3)}
        outstanding: list[bytes] = []
        while sum(map(len, seen.values())) < 9:
            if not consumer.frames and outstanding:  # FIN what we hold, one per partition
                for msg_id in outstanding:
                    consumer.send(b"FIN " + msg_id + b"\n")
                outstanding.clear()
            msg = decode_message(consumer.read_frame()[1], extended=True)
            value = int.from_bytes(msg.id[:8], "big")  # (youzan's binary ID: extend_support)
            part, offset = value >> 54, value & ((1 << 54) - 1)
            assert json.loads(msg.ext) == {"i": str(offset)} and msg.body == b"%d-%d" % (
                part,
                offset,
            )
            assert all(int.from_bytes(o[:8], "big") >> 54 != part for o in outstanding), (
                "two in flight"
            )
            seen[part].append(offset)
            outstanding.append(msg.id)
        assert seen == {p: [2, 3, 4] for p in range(3)}


def saved_confirmed(data: Path, topic: str, partition: int, channel: str) -> int | None:
    """What the cursor file of ``channel`` in ``partition`` says is confirmed (None: none)."""
    state = saved_cursor(data, topic, channel, partition)
    return None if state is None else state.confirmed


def test_periodic_cursor_saves_of_every_partition_survive_sigkill(tmp_path: Path) -> None:
    """FINs on partition 2 are saved by the ticker's periodic (off-loop) cursor writes:
    after a SIGKILL they are not delivered again; partition 0's unread message still is."""
    data = tmp_path / "data"
    with nsqd_process(data) as first:
        assert post(first, "/topic/create?topic=ck&partition_num=3") == (200, b"")
        assert post(first, "/channel/create?topic=ck&channel=c") == (200, b"")
        producer = wire_to(first)
        for i in range(5):
            producer.send(encode_pub_partition("ck", 2, b"2-%d" % i))
            assert producer.read_frame() == (0, b"OK")
        producer.send(encode_pub_partition("ck", 0, b"0-0"))
        assert producer.read_frame() == (0, b"OK")
        consumer = wire_to(first)
        consumer.send(b"SUB ck c 2\nRDY 10\n")
        assert consumer.read_frame() == (0, b"OK")
        for _ in range(5):
            msg = decode_message(consumer.read_frame()[1])
            assert int(msg.id, 16) >> 54 == 2
            consumer.send(b"FIN " + msg.id + b"\n")
        wait_for(lambda: saved_confirmed(data, "ck", 2, "c") == 5, 15)
        first.signal(signal.SIGKILL)
        first.wait()
    with nsqd_process(data) as again:
        parts = channel_stats(again, "ck")["partitions"]
        assert isinstance(parts, list)
        assert [(p["confirmed_offset"], p["depth"]) for p in parts] == [(0, 1), (0, 0), (5, 0)]
        consumer = wire_to(again)
        consumer.send(b"SUB ck c\nRDY 10\n")
        assert consumer.read_frame() == (0, b"OK")
        assert decode_message(consumer.read_frame()[1]).body == b"0-0"
        extra = consumer.frame_within(0.5)
        assert extra is None, f"a finished message came again: {extra}"


def run_compat_client(script: str, *args: str) -> dict[str, Any]:
    """Run ``tests/compat/clients/<script>`` (a real client library in its own interpreter)
    with ``args``; the JSON report it prints last."""
    proc = subprocess.run(
        [sys.executable, str(COMPAT / script), *args], capture_output=True, timeout=90, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.compat
@pytest.mark.parametrize(
    ("script", "prefix", "extra"),
    [("pynsq_roundtrip.py", "pynsq", ()), ("ansq_roundtrip.py", "ansq", ())],
)
def test_real_clients_see_one_topic(
    nsqd: DaemonProcess, script: str, prefix: str, extra: tuple[str, ...]
) -> None:
    topic = f"{prefix}_parts"
    assert post(nsqd, f"/topic/create?topic={topic}&partition_num=4") == (200, b"")
    report = run_compat_client(script, f"127.0.0.1:{nsqd.tcp_port}", topic, "30", *extra)
    assert report["bodies"] == sorted(f"{prefix}-{i}" for i in range(30))
    assert max(report["attempts"].values()) == 2  # the requeued one came back
    parts = topic_stats(nsqd, topic)["partitions"]
    assert isinstance(parts, list) and sum(1 for p in parts if p["message_count"]) >= 3
    channel = channel_stats(nsqd, topic)
    assert channel["message_count"] == 30 and channel["depth"] == 0


@pytest.mark.compat
def test_gnsq_with_http_on_a_partitioned_topic(nsqd: DaemonProcess) -> None:
    assert post(nsqd, "/topic/create?topic=gnsq_parts&partition_num=3") == (200, b"")
    report = run_compat_client(
        "gnsq_roundtrip.py", f"127.0.0.1:{nsqd.tcp_port}", str(nsqd.http_port), "gnsq_parts", "30"
    )
    assert report["bodies"] == sorted(f"gnsq-{i}" for i in range(30))
    assert report["stats"]["message_count"] == 30
