"""Fault tests: each reproduces a fault against a real ``nsqd`` process on loopback.

Fixtures here start nsqd as a subprocess (``start_nsqd``; every process a test starts is
killed at its end, also when it fails) and mount a small tmpfs to fill
(``small_disk``; unmounted at the end). Everything is bounded in time and count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nsqpy.testing import DaemonProcess, SmallDisk, nsqd_process

StartNsqd = Callable[..., DaemonProcess]


@pytest.fixture
def data_path(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def start_nsqd(data_path: Path) -> Iterator[StartNsqd]:
    """``start_nsqd(*flags, data=..., env=..., nofile=...)`` starts an nsqd process on
    loopback ports (data under ``data_path`` unless ``data`` is given) and returns it
    started; all of them are killed at the end of the test."""
    started: list[DaemonProcess] = []

    def start(
        *flags: str,
        data: Path | None = None,
        env: dict[str, str] | None = None,
        nofile: int | None = None,
        timeout: float = 20.0,
    ) -> DaemonProcess:
        proc = nsqd_process(data or data_path, *flags, env=env, nofile=nofile)
        started.append(proc)
        return proc.start(timeout)

    yield start
    for proc in started:
        proc.kill()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], SmallDisk]]:
    """``small_disk(size_bytes)`` mounts a tmpfs of that size (root) and returns it."""
    disks: list[SmallDisk] = []

    def make(size_bytes: int) -> SmallDisk:
        disk = SmallDisk(tmp_path / f"disk{len(disks)}", size_bytes).mount()
        disks.append(disk)
        return disk

    yield make
    for disk in disks:
        disk.unmount()
