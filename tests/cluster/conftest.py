"""Fixtures every cluster test directory shares: real etcd members from Debian's
``etcd-server`` on free loopback ports (``nsqpy.testing.etcd.EtcdCluster``).

- ``etcd_single``: one member for the whole session.
- ``etcd_trio``: three members for one test module.
- ``etcd``: an ``Etcd`` client of the session's member, for one test.
- ``unique_cluster_id``: a cluster id no other test uses, so tests sharing one etcd keep to
  their own keys (``/nsqpy/<cluster-id>/``).

A test that kills, stops or pauses members starts an ``EtcdCluster`` of its own instead.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Iterator

import pytest

from nsqpy.cluster.etcd import Etcd
from nsqpy.testing.etcd import EtcdCluster

_ids = itertools.count()


@pytest.fixture(scope="session")
def etcd_single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(1, tmp_path_factory.mktemp("etcd-single"))
    try:
        yield cluster.start()
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def etcd_trio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(3, tmp_path_factory.mktemp("etcd-trio"))
    try:
        yield cluster.start()
    finally:
        cluster.close()


@pytest.fixture
def unique_cluster_id(request: pytest.FixtureRequest) -> str:
    """``t<pid>-<n>-<test name>``: distinct across the tests of a run and across runs
    sharing an etcd."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]
    return f"t{os.getpid()}-{next(_ids)}-{name}"


@pytest.fixture
async def etcd(etcd_single: EtcdCluster) -> AsyncIterator[Etcd]:
    client = await Etcd.connect(etcd_single.endpoints)
    try:
        yield client
    finally:
        # (in a task of its own, bounded: a stuck close fails the test, never hangs the run)
        await asyncio.wait_for(asyncio.ensure_future(client.close()), 10)
