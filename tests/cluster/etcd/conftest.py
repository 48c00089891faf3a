"""Fixtures of the etcd client tests (``etcd``, an ``Etcd`` on the session's single member,
is ``tests/cluster/conftest.py``'s): ``prefix`` (this test's own key prefix there), and ``own_single`` / ``own_trio``
(members of the test's own, for tests that kill, pause, stop or compact)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.testing.etcd import EtcdCluster


@pytest.fixture
def prefix(unique_cluster_id: str) -> str:
    return f"/nsqpy/{unique_cluster_id}/"


@pytest.fixture
def own_single(tmp_path: Path) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(1, tmp_path / "etcd")
    try:
        yield cluster.start()
    finally:
        cluster.close()


@pytest.fixture
def own_trio(tmp_path: Path) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(3, tmp_path / "etcd")
    try:
        yield cluster.start()
    finally:
        cluster.close()
