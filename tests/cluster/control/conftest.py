"""Fixtures of the control-plane tests (view, coordinator, member) against the session's
real etcd member (``etcd``, from ``tests/cluster/conftest.py``): ``keys`` (this test's own
cluster), ``bounded`` (a teardown step with a deadline), ``server`` (an in-process nsqd
of that cluster, on a fake clock) and ``lookupd`` (an in-process nsqlookupd of it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

from nsqpy.cluster.keys import Keys
from nsqpy.lookupd.app import NsqLookupd, NsqLookupdOptions
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


def cluster_lookupd(etcd: EtcdCluster, keys: Keys, tcp: int = 0, http: int = 0) -> NsqLookupd:
    """An nsqlookupd of this test's cluster on the session's etcd, 2 s leases (not started)."""
    return NsqLookupd(
        NsqLookupdOptions(
            tcp_address=f"127.0.0.1:{tcp}",
            http_address=f"127.0.0.1:{http}",
            broadcast_address="127.0.0.1",
            etcd_endpoints=",".join(etcd.endpoints),
            cluster_id=keys.cluster_id,
            etcd_lease_ttl_ms=2000,
        )
    )


@pytest.fixture
async def lookupd(etcd_single: EtcdCluster, keys: Keys) -> AsyncIterator[NsqLookupd]:
    daemon = cluster_lookupd(etcd_single, keys)
    await daemon.start()
    try:
        yield daemon
    finally:
        await bounded(daemon.stop())
