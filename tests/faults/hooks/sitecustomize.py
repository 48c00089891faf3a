"""Fault injection for nsqd processes started by the fault tests (on their PYTHONPATH).

With ``NSQPY_FSYNC_GATE=<path>`` in the environment, ``os.fsync`` waits while that file
exists (at most 30 s): the test holds every fsync of the process (a slow disk) and lets
them go by removing the file. Python imports this module at start-up; nsqd's code is
unchanged.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

_GATE = os.environ.get("NSQPY_FSYNC_GATE")

if _GATE:
    _real_fsync = os.fsync
    _gate: str = _GATE

    def _gated_fsync(fd: FileDescriptorLike) -> None:
        deadline = time.monotonic() + 30
        while os.path.exists(_gate) and time.monotonic() < deadline:
            time.sleep(0.002)
        _real_fsync(fd)

    os.fsync = _gated_fsync
