"""Fault tests: each reproduces a fault against a real ``nsqd`` process on loopback.

nsqd is started as a subprocess with the ``start_nsqd`` fixture of ``nsqpy.testing`` (every
process a test starts is killed at its end, also when it fails; data under ``data_path``);
``small_disk`` here mounts a small tmpfs to fill (unmounted at the end). Everything is
bounded in time and count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nsqpy.testing import SmallDisk


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
