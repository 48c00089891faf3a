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

``nsqpy spark package --env`` also writes, for clusters whose Python lacks those, an
environment of their own as Spark's documentation recommends for Python dependencies: a
virtual environment made with ``venv``, the driver's own versions of them installed with
pip (this Python's, when it has one) without their own test suites and pyarrow's C++
headers, their modules compiled once, the zip on its path (a ``.pth`` line), packed with
venv-pack into ``nsqpy-spark-env-<version>-py<X.Y>.tar.gz`` for ``--archives`` and named
with ``spark.pyspark.python``. Like any packed virtual environment, it needs the same Python at
the same path on every machine (venv-pack packs the packages, not the interpreter).

The zip's entries have fixed times, so the same sources give the same bytes. Imports the
standard library only (venv-pack when packing an environment).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
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
ENV_ALIAS = "nsqpy-env"  # the folder each executor unpacks the environment into


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


def _partial(target: Path) -> Path:
    """A new empty file beside ``target``, of this build alone (builds into one folder may
    overlap: pipelines started together), renamed over ``target`` once whole."""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    os.close(fd)
    return Path(name)


def build(out_dir: Path) -> Path:
    """Write the zip into ``out_dir`` (made if missing), atomically; its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / zip_name()
    partial = _partial(target)
    try:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for file, name in _sources():
                entry = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
                entry.compress_type = zipfile.ZIP_DEFLATED
                entry.external_attr = 0o644 << 16
                archive.writestr(entry, file.read_bytes())
        partial.chmod(0o644)  # (mkstemp makes it for its owner only; Spark's nodes read it)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def submit_flags(archive: Path) -> list[str]:
    """The ``spark-submit`` flags that ship ``archive`` to every executor."""
    return ["--py-files", str(archive)]


def env_name() -> str:
    return (
        f"nsqpy-spark-env-{nsqpy.__version__}-py{sys.version_info[0]}.{sys.version_info[1]}.tar.gz"
    )


def pins() -> list[str]:
    """``SPARK_SIDE_REQUIREMENTS`` at the versions this Python has (the driver's)."""
    from importlib.metadata import version

    return [f"{name}=={version(name)}" for name in SPARK_SIDE_REQUIREMENTS]


def build_env(out_dir: Path) -> Path:
    """Write the packed environment into ``out_dir`` (see the module doc); its path. Raises
    ``RuntimeError`` naming what failed (pip's last lines, or venv-pack missing)."""
    try:
        import venv_pack  # type: ignore[import-untyped]
    except ImportError:
        raise RuntimeError(
            "packing an environment needs venv-pack: pip install venv-pack"
        ) from None
    from importlib.metadata import PackageNotFoundError

    try:
        wanted = pins()
    except PackageNotFoundError as exc:
        raise RuntimeError(f"this Python lacks {exc.name}, which the executors need") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / env_name()
    with tempfile.TemporaryDirectory(prefix="nsqpy-spark-env-") as tmp:
        env = Path(tmp) / "env"
        python = env / "bin" / "python"
        # (this Python's own pip installs into it when it has one: its index settings and
        # cache, and no pip packed into the environment)
        own_pip = _pip_takes_python()
        venv = [sys.executable, "-m", "venv", *(["--without-pip"] if own_pip else []), str(env)]
        _run(venv, "making the virtual environment")
        pip = [sys.executable, "-m", "pip", "--python", str(python)] if own_pip else [
            str(python), "-m", "pip"]  # fmt: skip
        _run(
            [*pip, "install", "--quiet", "--disable-pip-version-check", "--no-compile", *wanted],
            "installing " + ", ".join(SPARK_SIDE_REQUIREMENTS),
        )
        site = Path(
            subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                check=True, capture_output=True, text=True,
            ).stdout.strip()
        )  # fmt: skip
        _prune(site)
        # (as pip's own compiling: a module that does not compile is left to its import)
        subprocess.run([str(python), "-m", "compileall", "-q", "-j", "0", str(site)],
                       capture_output=True, check=False)  # fmt: skip
        zipped = build(site)
        (site / "nsqpy-spark.pth").write_text(zipped.name + "\n")  # (relative to site)
        partial = _partial(target)
        try:
            venv_pack.pack(prefix=str(env), output=str(partial), format="tar.gz",
                           force=True, verbose=False)  # fmt: skip
            partial.chmod(0o644)  # (written for its owner only; Spark's nodes read it)
            os.replace(partial, target)
        except venv_pack.VenvPackException as exc:
            raise RuntimeError(f"venv-pack failed: {exc}") from None
        finally:
            partial.unlink(missing_ok=True)
    return target


# What the packages ship that no executor runs: their own test suites (two thirds of
# pandas' and numpy's modules), and pyarrow's C++ headers and sources (for building
# extensions against it).
_PRUNED_TOP = ("include", "src")  # (of a package's top folder only; "tests" anywhere)


def _prune(site: Path) -> None:
    """Remove the installed requirements' ``tests`` folders and top-level ``_PRUNED_TOP``
    folders from ``site``."""
    for name in SPARK_SIDE_REQUIREMENTS:
        package = site / name
        folders = [*package.rglob("tests"), *(package / top for top in _PRUNED_TOP)]
        for folder in sorted(folders, reverse=True):  # (inner folders before outer ones)
            if folder.is_dir():
                shutil.rmtree(folder)


def _pip_takes_python() -> bool:
    """Whether this Python has a pip that installs into another one (``--python``: 22.3)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = (int(x) for x in version("pip").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (22, 3)


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{what} failed: " + " / ".join(tail))


def env_flags(archive: Path) -> list[str]:
    """The ``spark-submit`` flags that unpack ``archive`` on every executor and run their
    Python workers in it. The driver keeps its own Python; in client mode its JVM also
    starts Python workers by that relative path (a Python data source is planned in one),
    so ``./nsqpy-env`` must be an environment with nsqpy where spark-submit runs (this one
    unpacked, or a link to the driver's)."""
    return [
        "--archives", f"{archive}#{ENV_ALIAS}",
        "--conf", f"spark.pyspark.python=./{ENV_ALIAS}/bin/python",
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
    ]  # fmt: skip


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
    package.add_argument(
        "--env",
        action="store_true",
        help="also write a packed virtual environment for --archives, with "
        + ", ".join(SPARK_SIDE_REQUIREMENTS)
        + " at this Python's versions (needs venv-pack and pip's index)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    archive = build(Path(args.out)).resolve()
    needs = ", ".join(SPARK_SIDE_REQUIREMENTS)
    print(f"wrote {archive}")
    print(f"spark-submit {' '.join(submit_flags(archive))} ... your_job.py")
    print(f"(the executors' Python needs {needs})")
    if args.env:
        try:
            env = build_env(Path(args.out)).resolve()
        except RuntimeError as exc:
            print(f"nsqpy spark package: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {env}")
        print(f"spark-submit {' '.join(env_flags(env))} ... your_job.py")
        base = Path(sys.executable).resolve()
        print(f"(the executors need the same Python at the same path: {base};")
        print(f" in client mode, run spark-submit where ./{ENV_ALIAS} is this environment too:")
        print(f" mkdir {ENV_ALIAS} && tar -xzf {env} -C {ENV_ALIAS})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
