"""Fixtures of the control-plane tests (view, coordinator, member) against the session's
real etcd member (``etcd``, from ``tests/cluster/conftest.py``): ``keys`` (this test's own
cluster), ``bounded`` (a teardown step with a deadline) and ``server`` (an in-process nsqd
of that cluster, on a fake clock)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

from nsqpy.cluster.keys import Keys
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing.clock import FakeClock
from nsqpy.testing.etcd import EtcdCluster
from nsqpy.testing.inprocess import nsqd_options
from nsqpy.testing.wire import AsyncWire


async def bounded(step: Awaitable[None], seconds: float = 10.0) -> None:
    """A teardown step in a task of its own with a deadline (a stuck stop fails the test
    instead of hanging the run)."""
    await asyncio.wait_for(asyncio.ensure_future(step), seconds)


@pytest.fixture
def keys(unique_cluster_id: str) -> Keys:
    return Keys(unique_cluster_id)


@pytest.fixture
async def server(tmp_path: Path, etcd_single: EtcdCluster, keys: Keys) -> AsyncIterator[NsqdServer]:
    opts = nsqd_options(
        tmp_path,
        etcd_endpoints=",".join(etcd_single.endpoints),
        cluster_id=keys.cluster_id,
        rpc_address="127.0.0.1:0",
    )
    started = NsqdServer(opts, clock=FakeClock())
    await started.start()
    try:
        yield started
    finally:
        await AsyncWire.close_all()
        await bounded(started.stop())
