"""Fixtures for the Spark tests: the real nsqd program, a local SparkSession, helpers.

nsqd runs as its own process (Spark's Python workers are processes too and reach it over
HTTP on 127.0.0.1). One SparkSession per test module, local[2], no UI, two shuffle
partitions: the JVM starts once per pytest process and a new session in it is cheap.
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsqpy.spark.nsqhttp import NsqdHttp
from nsqpy.spark.wire import decode_chunk
from nsqpy.testing import DaemonProcess, http_get, http_request, nsqd_process
from nsqpy.testing.spark import QUICK_JVM, jvm_tmp


def start_nsqd(data_path: Path, *extra: str) -> DaemonProcess:
    """The nsqd program on loopback ports; fails clearly when it lacks the log-read API."""
    daemon = nsqd_process(data_path, *extra).start()
    status, body, _ = http_get(f"{daemon.http}/log/watermarks")
    if status == 404 and b"TOPIC" not in body:
        daemon.kill()
        pytest.fail(
            "log-read routes not wired into nsqd/http.py make_app: "
            "call nsqpy.nsqd.logread.add_logread_routes(app, server) there"
        )
    return daemon


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    daemon = start_nsqd(tmp_path_factory.mktemp("nsqd"))
    yield daemon
    daemon.kill()


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from nsqpy.spark import NsqDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("nsqpy-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.pollingDelay", "10ms")
        .config(
            "spark.driver.extraJavaOptions",
            f"{QUICK_JVM} {jvm_tmp(tmp_path_factory.mktemp('jvm-tmp'))}",
        )
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(NsqDataSource)
    yield session
    session.stop()


def publish(
    nsqd: DaemonProcess,
    topic: str,
    bodies: list[bytes],
    chunk: int = 1000,
    partition: int | None = None,
) -> None:
    """Binary MPUB over HTTP to ``partition``, ``chunk`` messages per call; each call answers
    once written."""
    where = "" if partition is None else f"&partition={partition}"
    for i in range(0, len(bodies), chunk):
        part = bodies[i : i + chunk]
        payload = struct.pack(">i", len(part)) + b"".join(
            struct.pack(">i", len(b)) + b for b in part
        )
        status, body, _ = http_request(
            "POST", f"{nsqd.http}/mpub?topic={topic}{where}&binary=true", payload
        )
        assert (status, body) == (200, b"OK")


def log_contents(nsqd: DaemonProcess, topic: str, start: int = 0) -> list[tuple[int, bytes, int]]:
    """(offset, body, deliver_at) of every record of partition 0 from ``start``."""
    out: list[tuple[int, bytes, int]] = []
    with NsqdHttp(nsqd.http) as conn:
        offset = start
        while True:
            reply = conn.read(topic, 0, offset, 10_000, 4 << 20)
            chunk = decode_chunk(reply.body)
            if chunk.count == 0:
                return out
            bodies = chunk.bodies.to_pylist()
            for i in range(chunk.count):
                out.append((int(chunk.offsets[i]), bodies[i], int(chunk.deliver_at[i])))
            offset = reply.next_offset


def high_watermark(nsqd: DaemonProcess, topic: str) -> int:
    with NsqdHttp(nsqd.http) as conn:
        marks = conn.watermarks(topic)
    assert marks is not None
    return marks[0].high
