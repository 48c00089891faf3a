"""nsqd's statsd push: a real UDP listener on 127.0.0.1:0 receives NSQ's metric names.

In-process (``NsqdServer`` with a 200 ms interval) for the names and packet bounds, and the
real ``nsqd`` program for the flags; plus the pure prefix and packing rules.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from nsqpy.metrics.statsd import StatsdCollector, pack, statsd_prefix
from nsqpy.nsqd.server import NsqdServer
from nsqpy.options import NsqdOptions
from nsqpy.testing import eventually, http_request, nsqd_process, wait_for

from .conftest import requeue_one

LINE = re.compile(r"^(?P<key>[^:|\n]+):(?P<value>-?\d+)\|(?P<kind>[cg])$")


class Listener(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.packets: list[bytes] = []

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.packets.append(data)

    def lines(self) -> list[str]:
        return [line for p in self.packets for line in p.decode().splitlines()]

    def total(self, key: str) -> int:
        """Sum of a counter over every push received."""
        out = 0
        for line in self.lines():
            m = LINE.match(line)
            if m and m["key"] == key and m["kind"] == "c":
                out += int(m["value"])
        return out

    def last_gauge(self, key: str) -> int | None:
        found = None
        for line in self.lines():
            m = LINE.match(line)
            if m and m["key"] == key and m["kind"] == "g":
                found = int(m["value"])
        return found


@pytest.fixture
async def listener() -> AsyncIterator[tuple[Listener, int]]:
    transport, proto = await asyncio.get_running_loop().create_datagram_endpoint(
        Listener, local_addr=("127.0.0.1", 0)
    )
    yield proto, transport.get_extra_info("sockname")[1]
    transport.close()


async def test_pushes_nsqs_metric_names_in_bounded_packets(
    tmp_path: Path, listener: tuple[Listener, int]
) -> None:
    udp, port = listener
    opts = NsqdOptions(
        tcp_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        data_path=str(tmp_path),
        broadcast_address="127.0.0.1",
        statsd_address=f"127.0.0.1:{port}",
        statsd_interval_ms=200,
        statsd_udp_packet_size=120,
        e2e_processing_latency_percentiles=[0.99],
    )
    nsqd = NsqdServer(opts)
    await nsqd.start()
    try:
        prefix = f"nsq.127_0_0_1_{nsqd.http_port}."
        base = f"http://127.0.0.1:{nsqd.http_port}"
        async with aiohttp.ClientSession() as http:
            for path in ("/topic/create?topic=orders", "/channel/create?topic=orders&channel=billing",
                         "/topic/create?topic=idle"):  # fmt: skip
                async with http.post(base + path) as resp:
                    assert resp.status == 200
            async with http.post(f"{base}/mpub?topic=orders", data=b"a\nbb\nccc") as resp:
                assert resp.status == 200
        await requeue_one(nsqd.tcp_port)  # its connection stays open: the channel's client
        key = f"{prefix}topic.orders"
        await eventually(
            lambda: (
                udp.total(f"{key}.channel.billing.requeue_count") == 1
                and udp.total(f"{key}.message_count") == 3
            )
        )
        # the round that brought those may still be arriving (one datagram per read): the
        # memory lines close a round
        seen = len(udp.packets)
        await eventually(lambda: any(b".mem." in packet for packet in udp.packets[seen - 1 :]))
        assert udp.total(f"{key}.message_bytes") == 6
        assert udp.last_gauge(f"{key}.depth") == 0
        assert udp.last_gauge(f"{key}.backend_depth") == 0
        assert udp.last_gauge(f"{prefix}topic.idle.depth") == 0
        ch = f"{key}.channel.billing"
        assert udp.total(f"{ch}.message_count") >= 3  # the requeued one is delivered again
        assert udp.last_gauge(f"{ch}.clients") == 1
        assert udp.last_gauge(f"{ch}.in_flight_count") is not None
        for name in ("depth", "backend_depth", "deferred_count", "e2e_processing_latency_99"):
            assert udp.last_gauge(f"{ch}.{name}") is not None, name
        assert f"{ch}.timeout_count" in {LINE.match(x)["key"] for x in udp.lines()}  # type: ignore[index]
        for name in ("heap_objects", "heap_in_use_bytes", "gc_pause_usec_99", "next_gc_bytes"):
            assert udp.last_gauge(f"{prefix}mem.{name}") is not None, name
        assert any(line.startswith(f"{prefix}mem.gc_runs:") for line in udp.lines())
        assert len(udp.packets) > 1
        for packet in udp.packets:
            assert len(packet) <= 120 and packet.endswith(b"\n"), packet
            for line in packet.decode().splitlines():
                assert LINE.match(line) and line.startswith(prefix), line
    finally:
        await nsqd.stop()


def test_the_nsqd_program_reads_every_statsd_flag(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        udp.settimeout(0.2)
        port = udp.getsockname()[1]
        flags = [
            f"--statsd-address=127.0.0.1:{port}",
            "--statsd-interval=200ms",
            "--statsd-prefix=app.%s.nsqd",
            "--statsd-mem-stats=false",
            "--statsd-exclude-ephemeral",
            "--statsd-udp-packet-size=200",
        ]
        with nsqd_process(tmp_path, *flags) as nsqd:
            for topic in ("keep", "tmp%23ephemeral"):
                status, _, _ = http_request("POST", f"{nsqd.http}/pub?topic={topic}", b"x")
                assert status == 200
            prefix = f"app.127_0_0_1_{nsqd.http_port}.nsqd."
            packets: list[bytes] = []

            def received_keep() -> bool:
                try:
                    packets.append(udp.recv(65536))
                except TimeoutError:
                    pass
                return any(f"{prefix}topic.keep.message_count:1|c".encode() in p for p in packets)

            wait_for(received_keep, timeout=15)
            assert nsqd.stop() == 0
    lines = [line for p in packets for line in p.decode().splitlines()]
    assert all(len(p) <= 200 for p in packets)
    assert all(line.startswith(prefix) for line in lines)
    assert not [line for line in lines if "#ephemeral" in line or ".mem." in line]


@pytest.mark.parametrize(
    ("template", "address", "port", "prefix"),
    [
        ("nsq.%s", "127.0.0.1", 4151, "nsq.127_0_0_1_4151."),
        ("nsq.%s", "node-1.example.com", 80, "nsq.node-1_example_com_80."),
        ("a.%s.b.%s", "h", 1, "a.h_1.b.h_1."),
        ("nsq.%s", "::1", 4151, "nsq.[__1]_4151."),
        ("metrics.", "h", 1, "metrics."),
        ("", "h", 1, ""),
    ],
)
def test_prefix_like_nsq(template: str, address: str, port: int, prefix: str) -> None:
    assert statsd_prefix(template, address, port) == prefix


def test_packets_hold_whole_lines_up_to_the_size() -> None:
    lines = [f"k{i}:{'9' * (i % 17)}|g\n" for i in range(200)] + ["x" * 300 + ":1|c\n", "y:1|c\n"]
    packets = pack(lines, 64)
    assert b"".join(packets) == "".join(lines).encode()
    for packet in packets:
        assert packet.endswith(b"\n")
        assert len(packet) <= 64 or packet.count(b"\n") == 1  # an oversized line goes alone


def test_counters_are_differences_between_pushes() -> None:
    def topic(count: int, requeues: int) -> dict[str, object]:
        channel = {"channel_name": "c", "message_count": count, "requeue_count": requeues,
                   "timeout_count": 0, "depth": 1, "backend_depth": 1, "in_flight_count": 0,
                   "deferred_count": 0, "client_count": 2, "e2e_processing_latency": {}}  # fmt: skip
        return {"topic_name": "t", "message_count": count, "message_bytes": 10 * count,
                "depth": 1, "backend_depth": 1, "channels": [channel],
                "e2e_processing_latency": {}}  # fmt: skip

    collector = StatsdCollector("p.")
    first = collector.collect([topic(5, 1)], {"gc_total_runs": 7})
    second = collector.collect([topic(8, 1)], {"gc_total_runs": 9})
    assert "p.topic.t.message_count:5|c\n" in first and "p.mem.gc_runs:7|c\n" in first
    assert "p.topic.t.message_count:3|c\n" in second and "p.topic.t.message_bytes:30|c\n" in second
    assert "p.topic.t.channel.c.requeue_count:0|c\n" in second
    assert "p.topic.t.channel.c.clients:2|g\n" in second and "p.mem.gc_runs:2|c\n" in second


def test_a_cluster_nodes_partitions_are_gauges() -> None:
    """In a cluster /stats gives each partition its role and ISR: each becomes gauges
    (a single nsqd's partitions, without them, add nothing)."""
    base = {"topic_name": "t", "message_count": 0, "message_bytes": 0, "depth": 0,
            "backend_depth": 0, "channels": [], "e2e_processing_latency": {}}  # fmt: skip
    cluster = {**base, "partitions": [
        {"partition": 0, "role": "leader", "isr": ["a", "b", "c"], "committed_offset": 7,
         "high_watermark": 9},
        {"partition": 1, "role": "follower", "isr": ["b", "a"], "committed_offset": 3,
         "high_watermark": 3},
    ]}  # fmt: skip
    lines = StatsdCollector("p.").collect([cluster], None)
    for line in ("p.topic.t.partition.0.leader:1|g\n", "p.topic.t.partition.0.isr:3|g\n",
                 "p.topic.t.partition.0.committed_offset:7|g\n",
                 "p.topic.t.partition.0.end_offset:9|g\n", "p.topic.t.partition.1.leader:0|g\n",
                 "p.topic.t.partition.1.isr:2|g\n"):  # fmt: skip
        assert line in lines, line
    single = {**base, "partitions": [{"partition": 0, "high_watermark": 9}]}
    assert not [x for x in StatsdCollector("p.").collect([single], None) if ".partition." in x]
