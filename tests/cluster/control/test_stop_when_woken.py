"""A daemon's control loop stopped at the very moment something wakes it still stops.

Each loop (an nsqd's member, a lookupd's coordinator) sleeps on a wake event with a
deadline, and its ``stop`` cancels it and waits for it. When the wake comes in the same
turn of the event loop as the cancel (an etcd watch event as the node stops: a clean-clone
CI run saw it once in six, in ``tests/cluster/process/test_stop_under_load.py``), Python
3.11's ``asyncio.wait_for`` returns the event's result and drops the cancel: the loop ran
on, registered the stopping node again with a new lease, and the stop waited for it for
ever. Each test waits until its loop sleeps on its event, then wakes it and stops it
without yielding in between, the one interleaving that lost the cancel.
"""

from __future__ import annotations

import asyncio

from nsqpy.cluster.etcd import Etcd
from nsqpy.cluster.keys import Keys
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import eventually

from .conftest import bounded
from .test_coordinator import lookupd


def sleeping_on(event: asyncio.Event) -> bool:
    """Some task waits on ``event`` now (the loop is idle in its sleep)."""
    return bool(event._waiters)


async def test_a_member_woken_as_it_is_stopped_stops(
    server: NsqdServer, etcd: Etcd, keys: Keys
) -> None:
    cluster = server.cluster
    assert cluster is not None and cluster.member is not None
    member = cluster.member
    await eventually(member.registered.is_set, timeout=10)
    await eventually(lambda: sleeping_on(member._wake), timeout=10)
    member._wake.set()  # (what a watch event does)
    await bounded(member.stop(), 5.0)
    assert not member.live
    assert await etcd.get(keys.node(member.node_id)) is None  # (its lease revoked, not renewed)


async def test_a_coordinator_woken_as_it_is_stopped_stops(etcd: Etcd, keys: Keys) -> None:
    coordinator, view = await lookupd(etcd, keys, 0)
    try:
        await eventually(lambda: coordinator.leading, timeout=10)
        await eventually(lambda: sleeping_on(coordinator._wake), timeout=10)
        coordinator._wake.set()
        await bounded(coordinator.stop(), 5.0)
        assert not coordinator.leading
        assert await etcd.get(keys.lookupd(coordinator.me.id)) is None
    finally:
        await bounded(view.stop())
