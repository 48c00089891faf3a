"""The ``nsq`` source on a real Spark cluster: a standalone master and two workers started
from the pyspark package (``nsqpy.testing.spark.StandaloneSpark``), a job submitted with
``spark-submit --master spark://...`` and ``--py-files`` the zip ``nsqpy spark package``
writes, as docs/spark.md says. Driver and executors run a Python that has pyspark and
what it needs, but not nsqpy: they import nsqpy only from the zip the job ships.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.spark.package import SPARK_SIDE_REQUIREMENTS, build, zip_name
from nsqpy.testing import DaemonProcess, http_request
from nsqpy.testing.spark import StandaloneSpark

from .conftest import publish

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
    status, body, _ = http_request(
        "POST", f"{nsqd.http}/topic/create?topic={topic}&partition_num=2"
    )
    assert status == 200, body
    sent = {p: [f"p{p}-{i}".encode() for i in range(500)] for p in (0, 1)}
    for p, bodies in sent.items():
        publish(nsqd, topic, bodies, partition=p)
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
    assert ran and all(executable == str(executor_python) for executable, _ in ran), ran
    assert all(f"{archive.name}/nsqpy/" in where for _, where in ran), "nsqpy from the zip"
    apps = standalone.state().get("completedapps", [])
    assert any(app.get("name") == "nsqpy-standalone" for app in apps), apps
