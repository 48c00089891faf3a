"""``nsqpy pipeline`` as a user starts it: defaults, environment and a missing spark extra."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nsqpy.testing import DaemonProcess
from nsqpy.testing.spark import QUICK_JVM, jvm_tmp

from .conftest import publish

NSQPY = str(Path(sys.executable).with_name("nsqpy"))

# Runs ``nsqpy <argv>`` with the given modules made unimportable, as if not installed.
WITHOUT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from nsqpy.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_pipeline_without_pyspark_says_so_in_one_line(tmp_path: Path) -> None:
    args = [
        "pipeline",
        "archive",
        "--nsqd=127.0.0.1:9",
        "--topic=t",
        f"--output={tmp_path / 'o'}",
        f"--checkpoint={tmp_path / 'c'}",
    ]
    for blocked, name in (("pyspark", "pyspark"), ("pyarrow,pandas", "pyarrow")):
        proc = subprocess.run(
            [sys.executable, "-c", WITHOUT, blocked, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (proc.returncode, proc.stdout) == (1, "")
        assert proc.stderr.splitlines() == [
            f"nsqpy pipeline: {name} is not installed; the pipelines need the spark extra: "
            "pip install 'nsqpy[spark]' (and Java 17)"
        ]
    helped = subprocess.run(
        [sys.executable, "-c", WITHOUT, "pyspark", "pipeline", "archive", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert helped.returncode == 0 and "--checkpoint" in helped.stdout  # help needs no Spark


@pytest.mark.timeout(300)  # a Spark driver of its own; slow under load
def test_archive_runs_on_local_with_the_venv_python_by_itself(
    spark: Any, nsqd: DaemonProcess, tmp_path: Path
) -> None:
    """No --master and no PYSPARK_PYTHON; PATH leads to a python3 without nsqpy or pyspark:
    the pipeline still runs on local[*] with its own interpreter on the workers."""
    publish(nsqd, "plain", [b"p%d" % i for i in range(50)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PATH"] = "/usr/bin:/bin"
    # (the JVM's own flags: a quicker start, its temporary files here)
    own = env.get("JDK_JAVA_OPTIONS", "")
    env["JDK_JAVA_OPTIONS"] = f"{own} {QUICK_JVM} {jvm_tmp(tmp_path / 'jvm-tmp')}".strip()
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            NSQPY,
            "pipeline",
            "archive",
            f"--nsqd={nsqd.http}",
            "--topic=plain",
            f"--output={out}",
            f"--checkpoint={tmp_path / 'ck'}",
            "--once",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on local[*], application local-" in proc.stderr
    assert f"workers run {sys.executable}\n" in proc.stderr
    rows = spark.read.parquet(str(out)).selectExpr("cast(body AS string) AS b").collect()
    assert sorted(r.b for r in rows) == sorted(f"p{i}" for i in range(50))


@pytest.mark.timeout(300)  # a Spark driver of its own; slow under load
def test_spark_submit_form_keeps_the_master_it_was_given(
    spark: Any, nsqd: DaemonProcess, tmp_path: Path
) -> None:
    """The README's spark-submit form: the pipeline runs on spark-submit's --master."""
    publish(nsqd, "submitted", [b"s%d" % i for i in range(20)])
    script = tmp_path / "nsqpy_pipeline.py"
    script.write_text("import sys; from nsqpy.spark.cli import main; sys.exit(main())\n")
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("spark-submit")),
            "--master=local[1]",
            "--conf=spark.ui.enabled=false",
            f"--driver-java-options={QUICK_JVM} {jvm_tmp(tmp_path / 'jvm-tmp')}",
            str(script),
            "archive",
            f"--nsqd={nsqd.http}",
            "--topic=submitted",
            f"--output={out}",
            f"--checkpoint={tmp_path / 'ck'}",
            "--once",
            "--quiet",
        ],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # spark-submit passes the driver's output on to its stdout
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "nsqpy pipeline archive: Spark 4." in proc.stdout
    assert " on local[1], application local-" in proc.stdout
    assert spark.read.parquet(str(out)).count() == 20
