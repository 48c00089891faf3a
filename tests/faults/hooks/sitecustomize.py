"""Fault injection for nsqd processes started by the fault tests (on their PYTHONPATH).

With ``NSQPY_FSYNC_GATE=<path>`` in the environment, ``os.fsync`` waits while that file
exists (at most 30 s): the test holds every fsync of the process (a slow disk) and lets
them go by removing the file. With ``NSQPY_FSYNC_GATE_SUFFIX`` too, only fsyncs of files
whose name ends so are held (``.log``: a partition log's segments, a stalled data disk
while the rest of the node goes on). Python imports this module at start-up; nsqd's code
is unchanged.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

_GATE = os.environ.get("NSQPY_FSYNC_GATE")
_SUFFIX = os.environ.get("NSQPY_FSYNC_GATE_SUFFIX", "")


def _held(fd: FileDescriptorLike) -> bool:
    if not _SUFFIX:
        return True
    number = fd if isinstance(fd, int) else fd.fileno()
    try:
        return os.readlink(f"/proc/self/fd/{number}").endswith(_SUFFIX)
    except OSError:
        return False


if _GATE:
    _real_fsync = os.fsync
    _gate: str = _GATE

    def _gated_fsync(fd: FileDescriptorLike) -> None:
        deadline = time.monotonic() + 30
        while os.path.exists(_gate) and time.monotonic() < deadline and _held(fd):
            time.sleep(0.002)
        _real_fsync(fd)

    os.fsync = _gated_fsync
