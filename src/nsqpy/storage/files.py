"""Small files replaced whole: written beside their target, then renamed over it.

Owns ``write_atomic`` (the one way nsqpy replaces a small file: a temp file in the same
directory, written, fsynced, renamed over the target, the directory fsynced so the rename
itself survives a power loss) and ``fsync_dir``. A reader sees the old file or the new one,
never a mix, and after ``write_atomic`` returns the new one survives a crash. ``durable``
False skips both fsyncs, for files rebuilt when lost (index sidecars) or fsynced later by
their owner. The fsync is looked up at each call (``fsync``) so tests can observe or fail
it. Imports only the standard library.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def fsync_dir(directory: Path, fsync: Callable[[int], None] = os.fsync) -> None:
    """fsync a directory (a rename, creation or deletion in it becomes durable)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _O_CLOEXEC)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    path: Path,
    data: bytes,
    *,
    durable: bool = True,
    fsync: Callable[[int], None] | None = None,
    mode: int = 0o644,
) -> None:
    """Replace ``path`` with ``data`` (see the module doc). ``fsync`` (default ``os.fsync``,
    looked up now) is called on the temp file and on the directory when ``durable``."""
    sync = fsync if fsync is not None else os.fsync
    tmp = path.with_name(path.name + ".tmp")  # (one process per data path: its lock)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            sync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent, sync)


__all__ = ["fsync_dir", "write_atomic"]
