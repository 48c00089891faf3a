"""Fixtures of the control-plane tests (view, coordinator, member) against the session's
real etcd member: ``etcd`` (a connected ``Etcd``) and ``keys`` (this test's own cluster)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable

import pytest

from nsqpy.cluster.etcd import Etcd
from nsqpy.cluster.keys import Keys
from nsqpy.testing.etcd import EtcdCluster


@pytest.fixture
async def etcd(etcd_single: EtcdCluster) -> AsyncIterator[Etcd]:
    client = await Etcd.connect(etcd_single.endpoints)
    try:
        yield client
    finally:
        await bounded(client.close())


async def bounded(step: Awaitable[None], seconds: float = 10.0) -> None:
    """A teardown step in a task of its own with a deadline (a stuck stop fails the test
    instead of hanging the run)."""
    await asyncio.wait_for(asyncio.ensure_future(step), seconds)


@pytest.fixture
def keys(unique_cluster_id: str) -> Keys:
    return Keys(unique_cluster_id)
