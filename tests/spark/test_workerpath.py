"""Spark's Python processes import pyspark unpacked, not from the zip Spark puts first.

Spark starts every Python process with ``$SPARK_HOME/python/lib/pyspark.zip`` at the head
of ``PYTHONPATH``; imported from a zip, pyspark is compiled again in each process (no
bytecode cache). ``nsqpy.spark.workerpath``'s ``.pth`` line, installed by ``make``, moves
a zip bundled inside an unpacked pyspark behind it and leaves any other zip alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nsqpy.spark import workerpath


def _path_after(line: str, entries: list[str]) -> list[str]:
    code = f"import json, sys; sys.path[:] = {entries!r}\n{line}print(json.dumps(sys.path))"
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, check=True)
    return list(json.loads(out.stdout))


def test_the_line_moves_only_a_zip_bundled_in_an_unpacked_pyspark_to_the_end(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site-packages"
    (site / "pyspark" / "python" / "lib").mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    bundled = site / "pyspark" / "python" / "lib" / "pyspark.zip"
    bundled.write_bytes(b"PK")
    elsewhere = tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip"  # a real SPARK_HOME
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_bytes(b"PK")
    py4j = str(site / "pyspark" / "python" / "lib" / "py4j-src.zip")
    entries = [str(bundled), py4j, str(elsewhere), "/usr/lib/python3", str(site)]
    assert _path_after(workerpath.PTH_LINE, entries) == [
        py4j,
        str(elsewhere),
        "/usr/lib/python3",
        str(site),
        str(bundled),
    ]


def test_install_writes_the_line_into_a_pth_file(tmp_path: Path) -> None:
    target = workerpath.install(str(tmp_path))
    assert target == tmp_path / workerpath.PTH_NAME
    lines = [x for x in target.read_text().splitlines() if not x.startswith("#")]
    assert lines == [workerpath.PTH_LINE.rstrip("\n")]


def test_this_environment_imports_pyspark_unpacked_with_spark_s_worker_path() -> None:
    import pyspark

    package = Path(pyspark.__file__).parent
    bundled = package / "python" / "lib" / "pyspark.zip"
    assert bundled.is_file(), "pyspark from PyPI ships its zip; nothing to test without it"
    env = {**os.environ, "PYTHONPATH": str(bundled)}  # as Spark starts its workers
    out = subprocess.run(
        [sys.executable, "-c", "import pyspark; print(pyspark.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    assert out.stdout.strip() == str(package / "__init__.py"), (
        "pyspark came from the zip: run `make venv` (it installs "
        f"{workerpath.PTH_NAME} with `python -m nsqpy.spark.workerpath`)"
    )
