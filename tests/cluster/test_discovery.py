"""Discovery on loopback with real processes: 3 nsqd (then a 4th) and 2 nsqlookupd.

Consumers (nsqpy's and pynsq's Reader) find every producer of a topic through lookupd;
a new nsqd is discovered; a restarted lookupd gets every registration back; a tombstoned
node disappears from /lookup.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from nsqpy.client import Consumer, Message
from nsqpy.testing import (
    DaemonProcess,
    eventually,
    free_ports,
    http_get,
    http_request,
    lookupd_process,
    nsqd_process,
    wait_for,
)

CLIENTS = Path(__file__).parent.parent / "compat" / "clients"


def lookup(lookupd: DaemonProcess, topic: str) -> tuple[int, dict[str, Any]]:
    status, body, _ = http_get(f"{lookupd.http}/lookup?topic={topic}")
    return status, json.loads(body)


def producer_ports(lookupd: DaemonProcess, topic: str) -> set[int]:
    status, doc = lookup(lookupd, topic)
    if status != 200:
        return set()
    producers = doc["producers"]
    assert isinstance(producers, list)
    return {int(p["tcp_port"]) for p in producers}


def publish(nsqd: DaemonProcess, topic: str, bodies: list[str]) -> None:
    status, body, _ = http_request(
        "POST", f"{nsqd.http}/mpub?topic={topic}", "\n".join(bodies).encode()
    )
    assert (status, body) == (200, b"OK")


class Cluster:
    def __init__(self, stack: ExitStack, tmp: Path) -> None:
        self.stack = stack
        self.tmp = tmp
        ports = free_ports(4)
        self.lookupd_ports = [(ports[0], ports[1]), (ports[2], ports[3])]
        self.lookupds = [
            stack.enter_context(lookupd_process(tcp_port=t, http_port=h))
            for t, h in self.lookupd_ports
        ]
        self.nsqds: list[DaemonProcess] = []
        for _ in range(3):
            self.add_nsqd()

    def add_nsqd(self) -> DaemonProcess:
        flags = [f"--lookupd-tcp-address=127.0.0.1:{t}" for t, _ in self.lookupd_ports]
        nsqd = self.stack.enter_context(nsqd_process(self.tmp / f"nsqd{len(self.nsqds)}", *flags))
        self.nsqds.append(nsqd)
        return nsqd

    @property
    def lookupd_http(self) -> list[str]:
        return [f"127.0.0.1:{h}" for _, h in self.lookupd_ports]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with ExitStack() as stack:
        yield Cluster(stack, tmp_path)


def test_nsqd_registers_topics_and_channels_with_every_lookupd(cluster: Cluster) -> None:
    for i, nsqd in enumerate(cluster.nsqds):
        publish(nsqd, "disc", [f"n{i}"])
    http_request("POST", f"{cluster.nsqds[0].http}/channel/create?topic=disc&channel=archive")
    want = {n.tcp_port for n in cluster.nsqds}
    for lookupd in cluster.lookupds:
        # (mypy infers no type for a lambda with defaults, the way to bind a loop variable)
        wait_for(lambda lookupd=lookupd: producer_ports(lookupd, "disc") == want)  # type: ignore[misc]
        wait_for(lambda lookupd=lookupd: "archive" in lookup(lookupd, "disc")[1]["channels"])  # type: ignore[misc]
        status, doc = lookup(lookupd, "unknown_topic")
        assert (status, doc) == (404, {"message": "TOPIC_NOT_FOUND"})


async def test_nsqpy_consumer_discovers_all_producers_and_a_new_one(cluster: Cluster) -> None:
    bodies = {f"m{i}-{j}" for i in range(3) for j in range(20)}
    for i, nsqd in enumerate(cluster.nsqds):
        publish(nsqd, "events", [f"m{i}-{j}" for j in range(20)])
    want = {n.tcp_port for n in cluster.nsqds}
    wait_for(lambda: all(producer_ports(lk, "events") == want for lk in cluster.lookupds))
    got: set[str] = set()

    async def handler(msg: Message) -> None:
        got.add(msg.body.decode())

    async with Consumer(
        "events",
        "c",
        handler,
        lookupd_http_addresses=cluster.lookupd_http,
        max_in_flight=10,
        lookupd_poll_interval=0.3,
    ):
        await eventually(lambda: got >= bodies, timeout=20)
        newcomer = await asyncio.to_thread(cluster.add_nsqd)
        await asyncio.to_thread(publish, newcomer, "events", ["late-1", "late-2"])
        await eventually(lambda: {"late-1", "late-2"} <= got, timeout=20)
    assert got == bodies | {"late-1", "late-2"}


def test_pynsq_reader_discovers_producers_through_lookupd(cluster: Cluster) -> None:
    for i, nsqd in enumerate(cluster.nsqds):
        publish(nsqd, "pyt", [f"p{i}-{j}" for j in range(10)])
    want = {n.tcp_port for n in cluster.nsqds}
    wait_for(lambda: all(producer_ports(lk, "pyt") == want for lk in cluster.lookupds))
    proc = subprocess.run(
        [
            sys.executable,
            str(CLIENTS / "pynsq_lookupd_reader.py"),
            ",".join(cluster.lookupd_http),
            "pyt",
            "py",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["bodies"] == sorted(f"p{i}-{j}" for i in range(3) for j in range(10))
    assert len(report["nsqd"]) == 3


def test_restarted_lookupd_gets_full_registrations_back(cluster: Cluster) -> None:
    for nsqd in cluster.nsqds:
        publish(nsqd, "again", ["x"])
        http_request("POST", f"{nsqd.http}/channel/create?topic=again&channel=ch")
    want = {n.tcp_port for n in cluster.nsqds}
    first = cluster.lookupds[0]
    wait_for(lambda: producer_ports(first, "again") == want)
    assert first.stop() == 0
    tcp, http = cluster.lookupd_ports[0]
    restarted = cluster.stack.enter_context(lookupd_process(tcp_port=tcp, http_port=http))
    wait_for(lambda: producer_ports(restarted, "again") == want, timeout=20)
    wait_for(lambda: lookup(restarted, "again")[1]["channels"] == ["ch"])


def test_tombstoned_node_is_hidden_from_lookup(cluster: Cluster) -> None:
    for nsqd in cluster.nsqds:
        publish(nsqd, "tomb", ["x"])
    lookupd = cluster.lookupds[0]
    want = {n.tcp_port for n in cluster.nsqds}
    wait_for(lambda: producer_ports(lookupd, "tomb") == want)
    victim = cluster.nsqds[1]
    status, body, _ = http_request(
        "POST", f"{lookupd.http}/topic/tombstone?topic=tomb&node=127.0.0.1:{victim.http_port}"
    )
    assert status == 200, body
    assert producer_ports(lookupd, "tomb") == want - {victim.tcp_port}
    nodes = json.loads(http_get(f"{lookupd.http}/nodes")[1])["producers"]
    (node,) = [p for p in nodes if p["tcp_port"] == victim.tcp_port]
    assert node["tombstones"][node["topics"].index("tomb")] is True
    # the other lookupd was not told: it still lists the node
    assert producer_ports(cluster.lookupds[1], "tomb") == want
