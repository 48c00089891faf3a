"""Real NSQ client libraries from PyPI (pynsq, gnsq, ansq) against the real ``nsqd`` program.

Each client runs in its own interpreter (tornado, gevent and asyncio each want to own the
process) through a script in ``clients/`` that prints a JSON report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.testing import DaemonProcess, http_get, nsqd_process

CLIENTS = Path(__file__).parent / "clients"
pytestmark = pytest.mark.compat


def run_client(script: str, *args: object, timeout: float = 60.0) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, str(CLIENTS / script), *map(str, args)],
        capture_output=True,
        timeout=timeout,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(report, dict)
    return report


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with nsqd_process(tmp_path_factory.mktemp("compat") / "data") as daemon:
        yield daemon


def test_pynsq_writer_and_reader(nsqd: DaemonProcess) -> None:
    report = run_client("pynsq_roundtrip.py", f"127.0.0.1:{nsqd.tcp_port}", "pynsq_t", 30)
    assert report["pub"] == ["OK", "OK", "OK"]
    assert report["bodies"] == sorted(f"pynsq-{i}" for i in range(30))
    attempts = report["attempts"]
    assert isinstance(attempts, dict)
    assert attempts["pynsq-0"] == 2, "the requeued message comes back with attempts 2"
    assert all(v == 1 for k, v in attempts.items() if k != "pynsq-0")


def test_gnsq_tcp_http_and_consumer(nsqd: DaemonProcess) -> None:
    report = run_client("gnsq_roundtrip.py", f"127.0.0.1:{nsqd.tcp_port}", nsqd.http_port, "gnsq_t", 30)
    assert report["ping"] == "OK"
    assert report["replies"] == ["OK"] * 5
    assert report["bodies"] == sorted(f"gnsq-{i}" for i in range(30))
    assert report["stats"] == {"topic": "gnsq_t", "channel": "compat", "message_count": 30, "clients": 1}
    assert report["info_version"] == "1.3.0"


def test_ansq_writer_and_reader(nsqd: DaemonProcess) -> None:
    report = run_client("ansq_roundtrip.py", f"127.0.0.1:{nsqd.tcp_port}", "ansq_t", 30)
    assert report["bodies"] == sorted(f"ansq-{i}" for i in range(30))
    attempts = report["attempts"]
    assert isinstance(attempts, dict)
    assert attempts["ansq-1"] == 2


def test_pynsq_fins_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with nsqd_process(data) as first:
        status, _, _ = http_get(f"{first.http}/channel/create?topic=handover&channel=compat")
        assert status == 405  # channel/create is POST only, as in NSQ
        report = run_client("pynsq_roundtrip.py", f"127.0.0.1:{first.tcp_port}", "warm", 3)
        assert report["pub"] == ["OK", "OK", "OK"]
        assert first.stop() == 0
    with nsqd_process(data) as second:
        stats = json.loads(http_get(f"{second.http}/stats?format=json&topic=warm")[1])
        (topic,) = stats["topics"]
        assert [c["channel_name"] for c in topic["channels"]] == ["compat"]
        assert topic["channels"][0]["depth"] == 0, "pynsq's FINs were persisted"
