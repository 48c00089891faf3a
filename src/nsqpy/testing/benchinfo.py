"""The first line every script in ``bench/`` prints: what was measured, where and when, so
that a figure copied into the docs carries its commit and machine.

``run_header()`` -> ``# nsqpy 0.1.0, commit 1a2b3c4 (with uncommitted changes), Linux
x86_64, 2 cores, Python 3.11.7, 2026-11-29 17:02 UTC``. The commit is read with ``git``
from the checkout nsqpy runs from; an installed nsqpy (no checkout) names its version only.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

from nsqpy import __version__


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit() -> str | None:
    """The checkout's commit (short), with a note when the tree differs from it."""
    root = Path(__file__).resolve().parents[3]
    if not (root / ".git").exists():
        return None
    sha = _git(root, "rev-parse", "--short", "HEAD")
    if sha is None:
        return None
    changed = _git(root, "status", "--porcelain", "--untracked-files=no")
    return f"{sha} (with uncommitted changes)" if changed else sha


def run_header() -> str:
    where = commit()
    parts = [f"# nsqpy {__version__}" + (f", commit {where}" if where else "")]
    parts.append(f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores")
    parts.append(f"Python {platform.python_version()}")
    parts.append(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    return ", ".join(parts)
