"""nsqpy installed as an operator installs it: a wheel built from this tree (as ``make
wheel`` builds it) into a fresh virtual environment outside the source tree. It carries
nsqadmin's assets and nothing of the development tools; without the ``cluster`` extra,
cluster mode is refused with one line naming it; with it, a cluster runs from the install.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.testing import free_ports
from nsqpy.testing.etcd import EtcdCluster
from nsqpy.testing.http import http_get, http_request

ROOT = Path(__file__).parents[2]
# The first test also builds the wheel and installs it with its dependencies (from pip's
# cache, or PyPI on a machine that has none yet).
pytestmark = pytest.mark.timeout(600)


def run(*argv: str | Path, timeout: float = 300, cwd: Path | None = None) -> str:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the wheel, a venv with it installed, no extra)."""
    where = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", where / "dist", ROOT)
    (wheel,) = (where / "dist").glob("nsqpy-*.whl")
    run(sys.executable, "-m", "venv", where / "venv")
    run(where / "venv/bin/pip", "install", "--quiet", wheel, cwd=where)
    yield wheel, where / "venv"


def wait_up(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http_get(f"http://127.0.0.1:{port}/ping", timeout=1)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"nothing answered on {port}")


def start(venv: Path, program: str, *args: str, cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(venv / "bin" / program), *args], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_the_wheel_installs_the_daemons_and_nothing_of_the_dev_tools(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    _wheel, venv = installed
    listed = {p["name"].lower() for p in json.loads(run(venv / "bin/pip", "list", "--format=json"))}
    assert "nsqpy" in listed
    assert not listed & {"pytest", "hypothesis", "mypy", "ruff", "playwright", "pyspark"}
    assert not listed & {"aetcd", "grpcio"}, "the etcd client comes with the cluster extra"
    for program in ("nsqd", "nsqlookupd", "nsqadmin", "nsq_tail", "to_nsq", "nsq_stat", "nsqpy"):
        assert (venv / "bin" / program).exists(), program

    refused = subprocess.run([str(venv / "bin/nsqd"), "--etcd-endpoints=127.0.0.1:1",
                              f"--data-path={tmp_path / 'refused'}"],
                             capture_output=True, text=True, timeout=30, cwd=tmp_path)  # fmt: skip
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode != 0 and len(lines) == 1, lines
    assert "pip install 'nsqpy[cluster]'" in lines[0]

    nsqd_http, admin_http = free_ports(2)
    nsqd = start(venv, "nsqd", "--tcp-address=127.0.0.1:0", f"--http-address=127.0.0.1:{nsqd_http}",
                 f"--data-path={tmp_path / 'data'}", cwd=tmp_path)  # fmt: skip
    admin = start(venv, "nsqadmin", f"--http-address=127.0.0.1:{admin_http}",
                  f"--nsqd-http-address=127.0.0.1:{nsqd_http}", cwd=tmp_path)  # fmt: skip
    try:
        wait_up(nsqd_http)
        wait_up(admin_http)
        status, body, _ = http_request("POST", f"http://127.0.0.1:{nsqd_http}/pub?topic=w", b"x")
        assert (status, body) == (200, b"OK")
        for asset in ("uPlot.iife.min.js", "uPlot.min.css", "nsqadmin.js"):
            status, body, _ = http_get(f"http://127.0.0.1:{admin_http}/static/{asset}")
            assert status == 200 and body, asset
    finally:
        stop(admin, nsqd)


def test_with_the_cluster_extra_a_cluster_runs_from_the_install(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    wheel, venv = installed
    run(venv / "bin/pip", "install", "--quiet", f"{wheel}[cluster]", cwd=tmp_path)
    with EtcdCluster(1, tmp_path / "etcd") as etcd:
        cluster = [f"--etcd-endpoints={etcd.endpoints[0]}", "--cluster-id=wheel"]
        lookupd_tcp, lookupd_http, *nsqd_http = free_ports(5)
        lookupd = start(venv, "nsqlookupd", f"--tcp-address=127.0.0.1:{lookupd_tcp}",
                        f"--http-address=127.0.0.1:{lookupd_http}", *cluster, cwd=tmp_path)  # fmt: skip
        nodes = [
            start(venv, "nsqd", "--tcp-address=127.0.0.1:0", f"--http-address=127.0.0.1:{port}",
                  "--rpc-address=127.0.0.1:0", f"--node-id={i}",
                  f"--data-path={tmp_path / f'nsqd{i}'}", *cluster, cwd=tmp_path)
            for i, port in enumerate(nsqd_http)
        ]  # fmt: skip
        try:
            for port in [lookupd_http, *nsqd_http]:
                wait_up(port)
            base = f"http://127.0.0.1:{lookupd_http}"
            deadline = time.monotonic() + 30
            while True:  # (until the coordinator is elected and sees the three nodes)
                status, body, _ = http_request(
                    "POST", f"{base}/topic/create?topic=w&partition_num=1&replicator=3", b""
                )
                if status == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            assert status == 200, body
            leader_port = None
            while leader_port is None and time.monotonic() < deadline + 30:
                status, body, _ = http_get(f"{base}/lookup?topic=w&metainfo=true")
                parts = json.loads(body).get("partitions", {}) if status == 200 else {}
                leader_port = parts.get("0", {}).get("http_port")
                time.sleep(0.2)
            assert leader_port in nsqd_http
            url = f"http://127.0.0.1:{leader_port}/pub?topic=w"
            while True:  # (the new leader takes writes once its ISR has caught up)
                status, body, _ = http_request("POST", url, b"replicated")
                if status == 200 or time.monotonic() > deadline + 60:
                    break
                time.sleep(0.2)
            assert (status, body) == (200, b"OK")
        finally:
            stop(*nodes, lookupd)
