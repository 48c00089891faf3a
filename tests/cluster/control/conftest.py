"""Fixtures of the control-plane tests (view, coordinator, member) against the session's
real etcd member (``etcd``, from ``tests/cluster/conftest.py``): ``keys`` (this test's own
cluster) and ``bounded`` (a teardown step with a deadline)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest

from nsqpy.cluster.keys import Keys


async def bounded(step: Awaitable[None], seconds: float = 10.0) -> None:
    """A teardown step in a task of its own with a deadline (a stuck stop fails the test
    instead of hanging the run)."""
    await asyncio.wait_for(asyncio.ensure_future(step), seconds)


@pytest.fixture
def keys(unique_cluster_id: str) -> Keys:
    return Keys(unique_cluster_id)
