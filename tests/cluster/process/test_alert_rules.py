"""The alerting rules shipped in ``deploy/prometheus``: checked and unit-tested with Debian's
``promtool``, and loaded into a real Prometheus server scraping a real cluster, where the
under-replicated alert fires after a follower's SIGKILL and resolves after its restart.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsqpy.testing import free_ports
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.http import http_get

from .conftest import CREATED, OwnCluster, create, leaders

RULES = Path(__file__).parents[3] / "deploy" / "prometheus"


def promtool(*args: str) -> str:
    done = subprocess.run(["promtool", *args], cwd=RULES, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_rules_are_valid_and_pass_their_unit_tests() -> None:
    assert "SUCCESS: 6 rules found" in promtool("check", "rules", "alerts.yml")
    assert "SUCCESS" in promtool("test", "rules", "alerts_test.yml")


def test_every_series_the_rules_read_is_one_the_daemons_expose(
    shared: LocalCluster, topic_name: str
) -> None:
    assert create(shared, topic_name, partition_num=1, replicator=3) == CREATED
    shared.wait_for(lambda: len(leaders(shared, topic_name)) == 1, 20, "a leader")
    exposed = set()
    for address in [shared.nsqd_http(i) for i in range(3)] + [shared.lookupd_http(0)]:
        status, body, _ = http_get(f"http://{address}/metrics")
        assert status == 200
        exposed |= set(re.findall(r"^# TYPE (\S+) ", body.decode(), re.MULTILINE))
    read = set(re.findall(r"\b(nsq(?:d|lookupd)_[a-z_]+)", (RULES / "alerts.yml").read_text()))
    assert read and read <= exposed, read - exposed


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """Where to write the server's config, and its port; started by the test."""
    port = free_ports(1)[0]
    yield tmp_path, port


def configure(directory: Path, targets: list[str]) -> Path:
    """The server's config: ``targets`` scraped every second, the shipped rules evaluated
    every second with their ``for`` durations cut to 3 s (the same expressions)."""
    rules = (RULES / "alerts.yml").read_text()
    (directory / "alerts.yml").write_text(re.sub(r"for: \S+", "for: 3s", rules))
    config = directory / "prometheus.yml"
    config.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(directory / "alerts.yml")],
        "scrape_configs": [{"job_name": "nsqpy", "static_configs": [{"targets": targets}]}],
    }))  # fmt: skip
    return config


def start_prometheus(directory: Path, port: int, targets: list[str]) -> subprocess.Popen[bytes]:
    config = configure(directory, targets)
    with (directory / "prometheus.log").open("wb") as log:
        return subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


def api(port: int, path: str) -> Any:
    """Prometheus' API; OSError while it cannot answer (a 503 while it starts: the error's
    response is closed here, not left to the collector, which would warn in a later test)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/{path}", timeout=5) as resp:
            return json.load(resp)["data"]
    except urllib.error.HTTPError as err:
        with err:
            raise OSError(f"Prometheus answered {err.code} to {path}") from None


def firing(port: int) -> set[str]:
    return {a["labels"]["alertname"] for a in api(port, "alerts")["alerts"]
            if a["state"] == "firing"}  # fmt: skip


def quiet(port: int, targets: int) -> bool:
    """Every target scraped, and no alert pending or firing (until the lookupds' first
    scrape, no coordinator is seen: NsqpyNoCoordinator is pending, then resolves)."""
    up = [t for t in api(port, "targets")["activeTargets"] if t["health"] == "up"]
    return len(up) == targets and not api(port, "alerts")["alerts"]


def test_prometheus_fires_under_replicated_on_a_followers_death_and_resolves(
    own_cluster: OwnCluster, prometheus: tuple[Path, int]
) -> None:
    cluster = own_cluster(lookupds=2)
    assert create(cluster, "alerted", partition_num=1, replicator=3) == CREATED
    leader = leaders(cluster, "alerted")[0]
    follower = next(i for i in range(3) if i != leader)
    directory, port = prometheus

    def targets() -> list[str]:
        return [cluster.nsqd_http(i) for i in range(3)] + [cluster.lookupd_http(i) for i in (0, 1)]

    server = start_prometheus(directory, port, targets())
    try:
        cluster.wait_for(lambda: quiet(port, 5), 60, "every target up, no alert")
        time.sleep(4)  # (the rules evaluated a few more times: still nothing firing; one
        assert not firing(port)  # scrape slower than its 1 s timeout on a busy machine
        # may make an alert pending for a moment, which is what "for:" is there to absorb)
        cluster.kill_nsqd(follower)
        cluster.wait_for(lambda: "NsqpyUnderReplicatedPartitions" in firing(port), 40,
                         "the under-replicated alert firing")  # fmt: skip
        assert "NsqpyPartitionOffline" not in firing(port)
        cluster.restart_nsqd(follower)  # (on new ports: the server is told, as a reload)
        configure(directory, targets())
        server.send_signal(signal.SIGHUP)
        cluster.wait_for(lambda: quiet(port, 5), 60, "every alert resolved")
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
