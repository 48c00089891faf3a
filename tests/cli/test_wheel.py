"""nsqpy installed as an operator installs it: a wheel built from this tree (as ``make
wheel`` builds it) into a fresh virtual environment outside the source tree. It carries
nsqadmin's assets and nothing of the development tools; without the ``cluster`` extra,
cluster mode is refused with one line naming it; with it, a cluster of three machines (each
a network namespace with an etcd member and an nsqd) runs from the install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from nsqpy.jepsen.etcd import EtcdMembers
from nsqpy.jepsen.netns import Network, preflight
from nsqpy.testing import free_ports
from nsqpy.testing.http import http_get, http_request
from nsqpy.testing.processes import die_with_parent

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


def start(
    venv: Path, program: str, *args: str, cwd: Path, prefix: Sequence[str] = (), log: str = ""
) -> subprocess.Popen[bytes]:
    """``program`` of the installed venv (in a network namespace: ``prefix``), its log in
    ``cwd/<log or program>.log``."""
    argv = die_with_parent([*prefix, str(venv / "bin" / program), *args])
    with open(cwd / f"{log or program}.log", "ab") as out:
        return subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=out)


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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


def until_ok(method: str, url: str, timeout: float = 60) -> tuple[int, bytes]:
    """``method url`` again until it answers 200 (or ``timeout``): the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            status, body, _ = http_request(method, url, b"m" if method == "POST" else None)
        except OSError as exc:
            status, body = 0, str(exc).encode()
        if status == 200 or time.monotonic() > deadline:
            return status, body
        time.sleep(0.2)


def leader_of(lookupd: str, partition: int) -> str | None:
    status, body = until_ok("GET", f"http://{lookupd}/lookup?topic=w&metainfo=true", timeout=5)
    found = json.loads(body).get("partitions", {}).get(str(partition), {}) if status == 200 else {}
    address = found.get("broadcast_address")
    return f"{address}:{found['http_port']}" if address else None


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_with_the_cluster_extra_a_cluster_of_three_machines_runs_from_the_install(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    """Three hosts, each a network namespace of its own with its own address (as the fault
    harness makes them): an etcd member and an nsqd on each, nsqlookupd on the first, the
    daemons from the installed wheel; a client on a fourth host publishes through every
    node, the leader's machine loses its nsqd (SIGKILL), and a new leader has every
    acknowledged message and takes writes."""
    wheel, venv = installed
    run(venv / "bin/pip", "install", "--quiet", f"{wheel}[cluster]", cwd=tmp_path)
    problem = preflight()
    assert problem is None, problem
    machines = ["m1", "m2", "m3"]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    with Network([*machines, "client"]) as net, net.inside("client"):
        etcd = EtcdMembers(machines, net.address, net.exec_prefix, tmp_path / "etcd")
        try:
            etcd.start()
            cluster = [f"--etcd-endpoints={','.join(etcd.endpoints)}", "--cluster-id=wheel"]
            first = net.address("m1")
            lookupd = f"{first}:4161"
            procs["lookupd"] = start(
                venv, "nsqlookupd", f"--tcp-address={first}:4160", f"--http-address={lookupd}",
                f"--broadcast-address={first}", *cluster,
                cwd=tmp_path, prefix=net.exec_prefix("m1"),
            )  # fmt: skip
            for k, host in enumerate(machines, 1):
                address = net.address(host)
                procs[host] = start(
                    venv, "nsqd", f"--tcp-address={address}:4150",
                    f"--http-address={address}:4151", f"--rpc-address={address}:4250",
                    f"--broadcast-address={address}", f"--node-id={k}",
                    f"--data-path={tmp_path / host}", *cluster,
                    cwd=tmp_path, prefix=net.exec_prefix(host), log=host,
                )  # fmt: skip
            nodes = [f"{net.address(h)}:4151" for h in machines]
            for where in [lookupd, *nodes]:
                assert until_ok("GET", f"http://{where}/ping")[0] == 200, where
            create = (
                f"http://{lookupd}/topic/create?topic=w&partition_num=2&replicator=3&multipart=true"
            )
            status, body = until_ok("POST", create)
            assert status == 200, body
            deadline = time.monotonic() + 60
            while (leader := leader_of(lookupd, 0)) is None:
                assert time.monotonic() < deadline, "no leader for partition 0"
                time.sleep(0.2)
            assert leader in nodes
            # (the first publish waits until the new partition's ISR has caught up)
            for node in nodes:
                for _ in range(3):
                    status, body = until_ok("POST", f"http://{node}/pub?topic=w&partition=0")
                    assert (status, body) == (200, b"OK"), node

            dead = machines[nodes.index(leader)]
            procs[dead].kill()
            procs[dead].wait()
            while (successor := leader_of(lookupd, 0)) in (None, leader):
                assert time.monotonic() < deadline + 60, "no new leader for partition 0"
                time.sleep(0.2)
            assert successor in nodes
            # every acknowledged message, none more: readable once the new leader's ISR has
            # confirmed them (the commit the old leader answered may not have reached the
            # successor before the kill; lookupd names it before it has led for long)
            while True:
                status, body = until_ok("GET", f"http://{successor}/log/watermarks?topic=w")
                assert status == 200, body
                (zero,) = [p for p in json.loads(body)["partitions"] if p["partition"] == 0]
                assert zero["high"] <= 9, zero
                if zero["high"] == 9:
                    break
                assert time.monotonic() < deadline + 90, zero
                time.sleep(0.2)
            status, body = until_ok("POST", f"http://{successor}/pub?topic=w&partition=0")
            assert (status, body) == (200, b"OK")
        finally:
            stop(*procs.values())
            etcd.close()
