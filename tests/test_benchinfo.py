"""Every bench script's first line names the commit, machine and Python it measured."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from nsqpy.testing.benchinfo import run_header

ROOT = Path(__file__).parents[1]


def test_the_header_names_the_checkouts_commit_and_the_machine() -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    line = run_header()
    assert line.startswith("# nsqpy ")
    assert f"commit {head}" in line
    assert f"{os.cpu_count()} cores" in line and platform.python_version() in line


def test_every_bench_script_prints_it_first() -> None:
    scripts = sorted((ROOT / "bench").glob("*.py"))
    assert scripts
    missing = [p.name for p in scripts if "print(run_header(), flush=True)" not in p.read_text()]
    assert not missing, missing
