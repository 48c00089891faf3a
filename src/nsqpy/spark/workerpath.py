"""Spark's Python processes import pyspark from the installed package, not from its zip.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the ``PYTHONPATH`` of every
Python process it starts (the daemon its task workers fork from, the streaming-source
runner every streaming query starts, the planners). With pyspark installed from PyPI,
``SPARK_HOME`` is that installed package, so the zip holds the very modules that sit
unpacked around it; but Python keeps no compiled bytecode for modules imported from a
zip, so each of those processes compiles pyspark again: about 1 s and 1 CPU second per
process on a 2-core machine, paid again at every streaming query's start.

``PTH_LINE`` is one line for a ``.pth`` file in the environment's site-packages: when the
interpreter starts it moves such a bundled zip (one inside an unpacked pyspark package)
to the end of ``sys.path``, so the unpacked copy with its cached bytecode is found first.
A zip that is not inside an unpacked pyspark (a real ``SPARK_HOME`` elsewhere) stays
where it is. ``make`` installs the line (``python -m nsqpy.spark.workerpath``). Imports the
standard library only; never pyspark.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

PTH_NAME = "nsqpy-spark-workers.pth"
# One line (a .pth runs lines that start with "import"); a stable sort keeps the order
# of everything else. The zip is bundled when <zip>/../../../__init__.py exists.
PTH_LINE = (
    "import os, sys; sys.path.sort(key=lambda p: p.endswith("
    "os.path.join('pyspark', 'python', 'lib', 'pyspark.zip')) and os.path.isfile("
    "os.path.normpath(os.path.join(p, '..', '..', '..', '__init__.py'))))\n"
)


def install(site_dir: str | None = None) -> Path:
    """Write the ``.pth`` file into ``site_dir`` (default: this interpreter's purelib)."""
    target = Path(site_dir or sysconfig.get_paths()["purelib"]) / PTH_NAME
    target.write_text(
        "# nsqpy: Spark's Python workers import pyspark unpacked (see nsqpy.spark.workerpath)\n"
        + PTH_LINE
    )
    return target


def main() -> None:
    print(f"wrote {install(sys.argv[1] if len(sys.argv) > 1 else None)}")


if __name__ == "__main__":
    main()
