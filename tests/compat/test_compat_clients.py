"""Real NSQ client libraries from PyPI (pynsq, gnsq, ansq) against the real ``nsqd`` program:
a single nsqd, and (the round trips) a node of a three-node cluster whose topics are
created on first use with three replicas.

Each client runs in its own interpreter (tornado, gevent and asyncio each want to own the
process) through a script in ``clients/`` that prints a JSON report.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsqpy.testing import DaemonProcess, WireClient, http_get, nsqd_process, saved_cursor, wait_for
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.processes import run_json_script

CLIENTS = Path(__file__).parent / "clients"
pytestmark = pytest.mark.compat


def run_client(script: str, *args: object, timeout: float = 60.0) -> dict[str, Any]:
    return run_json_script(CLIENTS / script, *args, timeout=timeout)


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with nsqd_process(tmp_path_factory.mktemp("compat") / "data") as daemon:
        yield daemon


@pytest.fixture(scope="module")
def clustered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """nsqd 0 of a three-node cluster (etcd, two nsqlookupd): the clients' topics are
    created on first use with the cluster defaults, three replicas, led by this node."""
    with LocalCluster(tmp_path_factory.mktemp("compat-cluster")) as cluster:
        yield cluster.nodes[0]


@pytest.fixture(params=["single", "cluster"])
def nsqd(request: pytest.FixtureRequest) -> DaemonProcess:
    """A single nsqd, then a node of a cluster: the same clients must not tell them apart."""
    daemon: DaemonProcess = request.getfixturevalue(
        "single" if request.param == "single" else "clustered"
    )
    return daemon


def test_pynsq_writer_and_reader(nsqd: DaemonProcess) -> None:
    report = run_client("pynsq_roundtrip.py", f"127.0.0.1:{nsqd.tcp_port}", "pynsq_t", 30)
    assert report["pub"] == ["OK", "OK", "OK"]
    assert report["bodies"] == sorted(f"pynsq-{i}" for i in range(30))
    attempts = report["attempts"]
    assert isinstance(attempts, dict)
    assert attempts["pynsq-0"] == 2, "the requeued message comes back with attempts 2"
    assert all(v == 1 for k, v in attempts.items() if k != "pynsq-0")


def test_gnsq_tcp_http_and_consumer(nsqd: DaemonProcess) -> None:
    report = run_client(
        "gnsq_roundtrip.py", f"127.0.0.1:{nsqd.tcp_port}", nsqd.http_port, "gnsq_t", 30
    )
    assert report["ping"] == "OK"
    assert report["replies"] == ["OK"] * 5
    assert report["bodies"] == sorted(f"gnsq-{i}" for i in range(30))
    assert report["stats"] == {
        "topic": "gnsq_t",
        "channel": "compat",
        "message_count": 30,
        "clients": 1,
    }
    assert report["info_version"] == "1.3.0"


def test_ansq_writer_and_reader(nsqd: DaemonProcess) -> None:
    report = run_client("ansq_roundtrip.py", f"127.0.0.1:{nsqd.tcp_port}", "ansq_t", 30)
    assert report["bodies"] == sorted(f"ansq-{i}" for i in range(30))
    attempts = report["attempts"]
    assert isinstance(attempts, dict)
    assert attempts["ansq-1"] == 2


def saved_confirmed(data: Path, topic: str, channel: str) -> int:
    state = saved_cursor(data, topic, channel)
    return -1 if state is None else state.confirmed


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_pynsq_fins_survive_a_restart(tmp_path: Path, stop: str) -> None:
    """pynsq's FINs (of PUB'd, MPUB'd, DPUB'd and requeued messages) stay done across a
    graceful restart, and across SIGKILL once the periodic cursor save (every 1 s) wrote them."""
    data = tmp_path / "data"
    with nsqd_process(data) as first:
        status, _, _ = http_get(f"{first.http}/channel/create?topic=handover&channel=compat")
        assert status == 405  # channel/create is POST only, as in NSQ
        report = run_client("pynsq_roundtrip.py", f"127.0.0.1:{first.tcp_port}", "warm", 6)
        assert report["pub"] == ["OK", "OK", "OK"]
        if stop == "SIGTERM":
            assert first.stop() == 0
        else:
            wait_for(lambda: saved_confirmed(data, "warm", "compat") == 6)
            first.signal(signal.SIGKILL)
            assert first.wait() == -signal.SIGKILL
    with nsqd_process(data) as second:
        stats = json.loads(http_get(f"{second.http}/stats?format=json&topic=warm")[1])
        (topic,) = stats["topics"]
        assert [c["channel_name"] for c in topic["channels"]] == ["compat"]
        (channel,) = topic["channels"]
        assert (channel["depth"], channel["deferred_count"]) == (0, 0), "FINs were persisted"
        consumer = WireClient(second.tcp_port)
        consumer.send(b"  V2SUB warm compat\nRDY 10\n")
        assert consumer.read_frame() == (0, b"OK")
        consumer.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            consumer.read_frame()  # nothing finished comes again


def check_fanout(report: dict[str, object], n: int, channels: int, consumers: int) -> None:
    """Every channel got every message once, spread over all of its consumers."""
    assert report["errors"] == []
    deliveries = report["deliveries"]
    assert isinstance(deliveries, dict) and sorted(deliveries) == [
        f"ch{i}" for i in range(channels)
    ]
    for channel, got in deliveries.items():
        bodies = sorted(body for _, body, _ in got)
        assert bodies == sorted(f"fan-{i}" for i in range(n)), f"{channel}: each body once"
        per_consumer = {c: sum(1 for who, _, _ in got if who == c) for c in range(consumers)}
        assert all(per_consumer.values()), f"{channel}: a consumer got nothing {per_consumer}"


def test_pynsq_several_channels_with_several_readers_each(nsqd: DaemonProcess) -> None:
    report = run_client(
        "pynsq_fanout.py", f"127.0.0.1:{nsqd.tcp_port}", f"127.0.0.1:{nsqd.http_port}",
        "pynsq_fan", 60, 3, 3,
    )  # fmt: skip
    assert report["pub"] == ["OK"]
    check_fanout(report, 60, 3, 3)


def test_gnsq_several_channels_with_several_consumers_each(nsqd: DaemonProcess) -> None:
    report = run_client(
        "gnsq_fanout.py", f"127.0.0.1:{nsqd.tcp_port}", nsqd.http_port, "gnsq_fan", 60, 3, 3
    )
    assert report["pub"] == "OK"
    check_fanout(report, 60, 3, 3)


@pytest.fixture(scope="module")
def nsqd_1s(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """An nsqd whose default msg_timeout is 1 s (gnsq cannot ask for one in IDENTIFY)."""
    data = tmp_path_factory.mktemp("compat_1s") / "data"
    with nsqd_process(data, "--msg-timeout=1s") as daemon:
        yield daemon


def compat_channel(daemon: DaemonProcess, topic: str) -> dict[str, int]:
    stats = json.loads(http_get(f"{daemon.http}/stats?format=json&topic={topic}")[1])
    (channel,) = stats["topics"][0]["channels"]
    keys = ("timeout_count", "requeue_count", "depth", "in_flight_count", "deferred_count")
    return {k: channel[k] for k in keys}


def arrivals(report: dict[str, object], body: str) -> list[tuple[int, float]]:
    deliveries = report["deliveries"]
    assert isinstance(deliveries, list)
    return [(attempts, at) for b, attempts, at in deliveries if b == body]


def test_pynsq_touch_keeps_a_message_and_silence_times_it_out(nsqd_1s: DaemonProcess) -> None:
    report = run_client(
        "pynsq_touch_timeout.py", f"127.0.0.1:{nsqd_1s.tcp_port}", "pynsq_touch", 2.5
    )
    assert report["pub"] == ["OK"] and report["errors"] == []
    ((attempts, _),) = arrivals(report, "held")  # touched for 2.5 s: never timed out
    assert attempts == 1
    (first, second) = arrivals(report, "dropped")
    assert (first[0], second[0]) == (1, 2)
    # (from the publish, made once the consumer had sent RDY: the first arrival's time is
    # when the client's handler ran, which a loaded machine delays past nsqd's send)
    assert second[1] >= 0.9, "redelivered only after the 1 s msg_timeout"
    # Every message finished (one left unfinished would be back in the depth).
    wait_for(lambda: compat_channel(nsqd_1s, "pynsq_touch")["in_flight_count"] == 0)
    assert compat_channel(nsqd_1s, "pynsq_touch") == {
        "timeout_count": 1, "requeue_count": 0, "depth": 0, "in_flight_count": 0,
        "deferred_count": 0,
    }  # fmt: skip


def test_gnsq_touch_req_with_delay_and_timeout(nsqd_1s: DaemonProcess) -> None:
    report = run_client(
        "gnsq_touch_req.py", f"127.0.0.1:{nsqd_1s.tcp_port}", "gnsq_touch", 2.5, 1500
    )
    assert report["pub"] == "OK" and report["errors"] == []
    ((attempts, _),) = arrivals(report, "held")
    assert attempts == 1
    (first, second) = arrivals(report, "req")
    assert (first[0], second[0]) == (1, 2)
    assert second[1] - first[1] >= 1.45, "the REQ's 1500 ms delay was kept"
    (first, second) = arrivals(report, "dropped")
    assert (first[0], second[0]) == (1, 2)
    # (from the publish, made once the consumer had sent RDY: the first arrival's time is
    # when the client's handler ran, which a loaded machine delays past nsqd's send)
    assert second[1] >= 0.9, "redelivered only after the 1 s msg_timeout"
    # Every message finished (one left unfinished would be back in the depth).
    wait_for(lambda: compat_channel(nsqd_1s, "gnsq_touch")["in_flight_count"] == 0)
    assert compat_channel(nsqd_1s, "gnsq_touch") == {
        "timeout_count": 1, "requeue_count": 1, "depth": 0, "in_flight_count": 0,
        "deferred_count": 0,
    }  # fmt: skip
