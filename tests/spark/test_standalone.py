"""The ``nsq`` source on a real Spark cluster: a standalone master and two workers started
from the pyspark package (``nsqpy.testing.spark.StandaloneSpark``), a job submitted with
``spark-submit --master spark://...`` and ``--py-files`` the zip ``nsqpy spark package``
writes, as docs/spark.md says. Driver and executors run a Python that has pyspark and
what it needs, but not nsqpy: they import nsqpy only from the zip the job ships.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nsqpy.spark.package import (
    ENV_ALIAS,
    SPARK_SIDE_REQUIREMENTS,
    build,
    build_env,
    env_flags,
    zip_name,
)
from nsqpy.testing import DaemonProcess, http_request, wait_for
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.spark import QUICK_JVM, StandaloneSpark

from .conftest import publish
from .test_cluster import TOPIC, create
from .test_cluster import publish as cluster_publish
from .test_pipelines import commits, committed_offsets, start_archive

JOB = Path(__file__).parent / "jobs" / "read_topic.py"


def python_without_nsqpy(where: Path) -> Path:
    """A virtual environment that sees this one's packages (pyspark, pyarrow, numpy,
    pandas, crc32c) through a path line, but not the ones installed by a .pth of their own
    (nsqpy's editable install): an executor's Python on which nsqpy was never installed."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = next((where / "lib").glob("python3*/site-packages"))
    (site / "packages-of-the-test-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return where / "bin" / "python"


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = python_without_nsqpy(tmp_path_factory.mktemp("executor-env") / "env")
    missing = subprocess.run([str(python), "-c", "import nsqpy"], capture_output=True, text=True)
    assert missing.returncode != 0 and "No module named 'nsqpy'" in missing.stderr
    for module in ("pyspark", *SPARK_SIDE_REQUIREMENTS):
        subprocess.run([str(python), "-c", f"import {module}"], check=True)
    return python


def two_partitions(nsqd: DaemonProcess, topic: str, each: int) -> dict[int, list[bytes]]:
    """``topic`` made with two partitions, ``each`` messages published to each; what was sent."""
    status, body, _ = http_request(
        "POST", f"{nsqd.http}/topic/create?topic={topic}&partition_num=2"
    )
    assert status == 200, body
    sent = {p: [f"{topic}{p}-{i}".encode() for i in range(each)] for p in (0, 1)}
    for p, bodies in sent.items():
        publish(nsqd, topic, bodies, partition=p)
    return sent


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneSpark]:
    with StandaloneSpark(tmp_path_factory.mktemp("standalone"), workers=2) as cluster:
        yield cluster


def test_the_package_holds_the_spark_side_and_nothing_of_the_daemons(tmp_path: Path) -> None:
    archive = build(tmp_path)
    assert archive.name == zip_name()
    names = zipfile.ZipFile(archive).namelist()
    assert "nsqpy/spark/source.py" in names and "nsqpy/protocol/logread.py" in names
    assert not [n for n in names if not n.endswith(".py")], "pure Python only"
    for daemon in ("nsqpy/nsqd/", "nsqpy/broker/", "nsqpy/storage/", "nsqpy/cluster/"):
        assert not [n for n in names if n.startswith(daemon)], daemon
    assert build(tmp_path).read_bytes() == archive.read_bytes(), "the same bytes again"


def test_pipelines_starting_at_once_each_ship_a_whole_package(tmp_path: Path) -> None:
    """Every pipeline builds the package into the same folder before it submits: builds
    that overlap (two jobs started together) each leave a whole zip, never one written
    into by the other."""
    expected = build(tmp_path / "alone").read_bytes()
    start = threading.Barrier(6)

    def one() -> bytes:
        start.wait()
        return build(tmp_path / "shared").read_bytes()

    for _ in range(3):
        with ThreadPoolExecutor(6) as pool:
            shipped = list(pool.map(lambda _: one(), range(6)))
        assert all(data == expected for data in shipped)
    assert [p.name for p in (tmp_path / "shared").iterdir()] == [zip_name()], "no leftovers"


def test_every_spark_module_imports_from_the_zip_alone(
    tmp_path: Path, executor_python: Path
) -> None:
    archive = build(tmp_path)
    script = (
        "import importlib, pkgutil, sys\n"
        f"sys.path.insert(0, {str(archive)!r})\n"
        "import nsqpy.spark\n"
        "for m in pkgutil.iter_modules(nsqpy.spark.__path__):\n"
        "    importlib.import_module('nsqpy.spark.' + m.name)\n"
        "assert nsqpy.__file__.startswith(sys.path[0]), nsqpy.__file__\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('uvloop', 'aiohttp', 're2', 'aetcd', 'grpc', 'cramjam')))\n"
    )
    done = subprocess.run([str(executor_python), "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", "none of the daemons' dependencies"


def test_a_job_submitted_to_the_standalone_cluster_reads_a_topic_on_its_executors(
    standalone: StandaloneSpark, nsqd: DaemonProcess, executor_python: Path, tmp_path: Path
) -> None:
    topic = "standalone"
    sent = two_partitions(nsqd, topic, 500)
    archive = build(tmp_path / "dist")
    out = tmp_path / "read.json"
    done = standalone.submit(
        "--py-files", str(archive),
        "--conf", f"spark.pyspark.python={executor_python}",
        "--conf", f"spark.pyspark.driver.python={executor_python}",
        "--conf", "spark.executor.memory=512m",
        str(JOB), nsqd.http.removeprefix("http://"), topic, str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    got = {p: [b for q, _o, b in found["rows"] if q == p] for p in (0, 1)}
    assert {p: sorted(b) for p, b in got.items()} == {
        p: sorted(b.decode() for b in bodies) for p, bodies in sent.items()
    }
    assert found["spark_partitions"] == 2, "one Spark partition per nsqpy partition"
    assert found["executors"] == 2
    ran = found["tasks_ran"]
    assert ran and all(executable == str(executor_python) for executable, _, _ in ran), ran
    assert all(f"{archive.name}/nsqpy/" in where for _, where, _ in ran), "nsqpy from the zip"
    apps = standalone.state().get("completedapps", [])
    assert any(app.get("name") == "nsqpy-standalone" for app in apps), apps


@pytest.mark.timeout(600)
def test_executors_run_in_the_packed_environment_the_job_ships(
    standalone: StandaloneSpark, nsqd: DaemonProcess, tmp_path: Path
) -> None:
    """``nsqpy spark package --env``'s environment, sent with ``--archives`` as its printed
    flags say: each executor unpacks it and its Python workers run in it, importing nsqpy
    (the zip on the environment's path) and pyarrow from it, not from any Python of this
    machine; nothing else ships nsqpy (no ``--py-files``). In client mode the driver's JVM
    starts its Python workers by the same relative path: spark-submit runs where the
    environment is unpacked as the printed lines say."""
    topic = "packed"
    sent = two_partitions(nsqd, topic, 200)
    env = build_env(tmp_path / "dist")
    with tarfile.open(env) as packed:
        names = packed.getnames()
    assert "bin/python" in names and not [n for n in names if "/nsqpy/nsqd/" in n], names[:20]
    # the requirements without their test suites and headers, their modules compiled
    assert not [n for n in names if "/tests/" in n or "/pyarrow/include/" in n], "pruned"
    assert [n for n in names if "/pandas/__pycache__/" in n and n.endswith(".pyc")]
    out, here = tmp_path / "read.json", tmp_path / "driver"
    (here / ENV_ALIAS).mkdir(parents=True)
    with tarfile.open(env) as packed:
        packed.extractall(here / ENV_ALIAS, filter="tar")
    try:
        done = standalone.submit(
            *env_flags(env), "--conf", "spark.executor.memory=512m",
            str(JOB), nsqd.http.removeprefix("http://"), topic, str(out), cwd=here,
        )  # fmt: skip
    finally:  # (some 260 MB: not left in pytest's kept temporary folders)
        shutil.rmtree(here / ENV_ALIAS)
        env.unlink()
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    got = {p: sorted(b for q, _o, b in found["rows"] if q == p) for p in (0, 1)}
    assert got == {p: sorted(b.decode() for b in bodies) for p, bodies in sent.items()}
    ran = found["tasks_ran"]
    assert ran and all(
        executable.endswith(f"/{ENV_ALIAS}/bin/python")
        and not executable.startswith(str(here))  # (each executor's own unpacked copy)
        and f"/{ENV_ALIAS}/" in nsqpy_at and f"{zip_name()}/nsqpy/" in nsqpy_at
        and f"/{ENV_ALIAS}/" in pyarrow_at
        for executable, nsqpy_at, pyarrow_at in ran
    ), ran  # fmt: skip


@pytest.mark.timeout(600)
def test_the_archive_on_the_standalone_cluster_is_exactly_once_through_failovers(
    standalone: StandaloneSpark, executor_python: Path, tmp_path: Path
) -> None:
    """``nsqpy pipeline archive --master spark://...`` (its executors get nsqpy from the
    job) against a three-node nsqpy cluster while producers publish: the leader of
    partition 0 is SIGKILLed and restarted, partition 1's lead is moved, then the job itself
    is killed in the middle of a stream of batches and started again from its checkpoint.
    The Parquet output holds every acknowledged message once: each (partition, offset)
    once, none missing."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    def done(checkpoint: Path) -> int:
        return sum(committed_offsets(checkpoint, TOPIC).values())

    with LocalCluster(tmp_path / "nsqpy") as cluster:
        create(cluster, TOPIC)
        sent = {p: [b"s%d-%05d" % (p, i) for i in range(1000)] for p in (0, 1)}
        for p, bodies in sent.items():
            cluster_publish(cluster, TOPIC, p, bodies)

        def more(start: int, count: int) -> None:
            for p in (0, 1):
                bodies = [b"s%d-%05d" % (p, i) for i in range(start, start + count)]
                cluster_publish(cluster, TOPIC, p, bodies)
                sent[p] += bodies

        out, checkpoint, log = tmp_path / "archive", tmp_path / "checkpoint", tmp_path / "job.log"
        args = [
            "pipeline", "archive", f"--lookupd={','.join(cluster.lookupd_https())}",
            f"--topic={TOPIC}", f"--output={out}", f"--checkpoint={checkpoint}",
            f"--master={standalone.master_url}", "--quiet",
            f"--conf=spark.pyspark.python={executor_python}",
            "--conf=spark.executor.memory=512m", "--conf=spark.ui.enabled=false",
            f"--conf=spark.driver.extraJavaOptions={QUICK_JVM}",
            f"--conf=spark.executor.extraJavaOptions={QUICK_JVM}",
            "--max-offsets-per-trigger=200", "--trigger=0 seconds",
        ]  # fmt: skip
        job = start_archive(args, log)
        try:
            wait_for(lambda: commits(checkpoint) >= 2 or job.poll() is not None, timeout=150)
            assert job.poll() is None, log.read_text()[-3000:]
            victim = cluster.node_index(cluster.partitions(TOPIC)[0]["id"])
            cluster.kill_nsqd(victim)  # partition 0's leader, in the middle of the stream
            cluster.wait_for(
                lambda: cluster.partitions(TOPIC)[0]["id"] != cluster.node_id(victim),
                20,
                "partition 0 led again",
            )
            more(1000, 200)
            cluster.restart_nsqd(victim)
            status, doc = cluster.post(
                f"/topic/partition/move?topic={TOPIC}&partition=1&move_leader=true"
            )
            assert status == 200, doc
            more(1200, 200)
            total = sum(len(bodies) for bodies in sent.values())
            wait_for(  # (everything sent, after both failovers too, read and committed)
                lambda: done(checkpoint) >= total or job.poll() is not None, timeout=150
            )
            assert job.poll() is None, log.read_text()[-3000:]  # it went on through both
            more(1400, 500)  # five more batches, and the job is killed after the first
            wait_for(lambda: done(checkpoint) > total or job.poll() is not None, timeout=60)
        finally:
            os.killpg(job.pid, signal.SIGKILL)  # the job too: its driver and what it started
            job.wait()
        total = sum(len(bodies) for bodies in sent.values())
        assert done(checkpoint) < total, "killed in the middle of the stream, not at its end"
        more(1900, 100)
        final = start_archive([*args, "--once"], log)
        assert final.wait(timeout=300) == 0, log.read_text()[-3000:]
    # its workers ran the Python --conf gave, which has no nsqpy: they had it from the job
    assert f"workers run {executor_python}" in log.read_text(), log.read_text()[-3000:]
    table = pq.read_table(str(out), columns=["partition", "offset", "body"]).to_pylist()
    for p in (0, 1):
        mine = sorted((r["offset"], bytes(r["body"])) for r in table if r["partition"] == p)
        assert [o for o, _ in mine] == list(range(len(sent[p]))), p  # each offset once
        assert [b for _, b in mine] == sent[p]
