"""What the executors of a Spark cluster need of nsqpy: its Spark side as one zip.

``nsqpy spark package`` writes ``nsqpy-spark-<version>.zip`` and prints the ``spark-submit``
flags that ship it. Spark's way of giving executors pure-Python code is ``--py-files`` (a
zip put on each Python worker's ``sys.path``); the Spark side of nsqpy is pure Python: the
package's ``__init__``, ``errors``, ``protocol`` (the wire codecs, whose optional C forms
are left out: each has a Python fallback) and ``spark``. Nothing of the daemons goes in
(asyncio servers, storage, the etcd client, uvloop, aiohttp, re2): the executors read and
publish over nsqd's HTTP API with the standard library. Besides the standard library they
import what PySpark's SQL itself needs for Arrow (pyarrow, numpy, pandas) and ``crc32c``
(the log's checksums); ``SPARK_SIDE_REQUIREMENTS`` names them, for the executors'
environment.

The zip's entries have fixed times, so the same sources give the same bytes. Imports the
standard library only.
"""

from __future__ import annotations

import argparse
import os
import sys
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import nsqpy

# The parts of the package the Spark side imports (``tests/spark/test_package.py`` imports
# every module of ``nsqpy.spark`` from the zip alone).
SPARK_SIDE = ("__init__.py", "errors.py", "protocol", "spark")
# What the executors' Python must have besides the standard library and pyspark.
SPARK_SIDE_REQUIREMENTS = ("pyarrow", "numpy", "pandas", "crc32c")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def zip_name() -> str:
    return f"nsqpy-spark-{nsqpy.__version__}.zip"


def _sources() -> Iterator[tuple[Path, str]]:
    root = Path(nsqpy.__file__).parent
    for part in SPARK_SIDE:
        path = root / part
        files = [path] if path.is_file() else sorted(path.rglob("*.py"))
        for file in files:
            if "__pycache__" not in file.parts:
                yield file, "nsqpy/" + file.relative_to(root).as_posix()


def build(out_dir: Path) -> Path:
    """Write the zip into ``out_dir`` (made if missing), atomically; its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / zip_name()
    partial = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for file, name in _sources():
            entry = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, file.read_bytes())
    os.replace(partial, target)
    return target


def submit_flags(archive: Path) -> list[str]:
    """The ``spark-submit`` flags that ship ``archive`` to every executor."""
    return ["--py-files", str(archive)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nsqpy spark",
        description="What a Spark cluster's executors need of nsqpy.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    package = commands.add_parser(
        "package",
        help="write nsqpy's Spark side as one zip for spark-submit --py-files",
        description=(
            "Write nsqpy-spark-<version>.zip (nsqpy's Spark side, pure Python) and print "
            "the spark-submit flags that ship it to every executor."
        ),
    )
    package.add_argument("--out", default=".", help="folder to write the zip into (.)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    archive = build(Path(args.out)).resolve()
    needs = ", ".join(SPARK_SIDE_REQUIREMENTS)
    print(f"wrote {archive}")
    print(f"spark-submit {' '.join(submit_flags(archive))} ... your_job.py")
    print(f"(the executors' Python needs pyspark and {needs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
