"""Leaving a cluster: what a coordinator and a member do alike when their daemon stops.

Their background task ends first (nothing is written after), then the lease goes: revoked,
so etcd drops what was bound to it (the node's registration, the coordinator lock) at once
and the others act now instead of a TTL later. Revoking is bounded: with etcd gone the
lease simply expires. Imports asyncio and ``nsqpy.cluster.etcd``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nsqpy.cluster.etcd import EtcdError, Lease

STOP_REVOKE_S = 1.5  # how long leaving waits for etcd to drop the lease


async def leave(task: asyncio.Task[Any] | None, lease: Lease | None) -> None:
    """Cancel ``task`` and wait for it, then revoke ``lease`` (see the module docstring)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if lease is not None:
        with contextlib.suppress(EtcdError, TimeoutError):
            async with asyncio.timeout(STOP_REVOKE_S):
                await lease.revoke()
