"""Fixtures and helpers of the real-process cluster tests (issue 18's Proof).

Every test here runs real programs: an etcd member (Debian's ``etcd-server``), two
nsqlookupd and three nsqd, all on loopback, through ``nsqpy.testing.cluster.LocalCluster``
(leases of 2 s, so a killed daemon is seen dead within seconds).

- ``shared``: ONE cluster for every test of this directory that kills nothing; such tests
  use topic names of their own (``topic_name``), so they cannot see each other's topics.
- ``own_cluster``: a factory for tests that kill, restart or reconfigure daemons: each call
  starts a cluster of the test's own under ``tmp_path`` (closed after the test).

Helpers: ``create`` (POST /topic/create), ``three_replicas`` (one partition on every nsqd,
its leader), ``leaders`` (node index per partition),
``stats_partitions`` (what an nsqd's /stats says it holds of a topic), ``wire`` (a V2
connection to nsqd ``i``) and ``run_client`` (a client script in ``clients/``, run in its
own interpreter, answering one JSON line).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from nsqpy.testing import WireClient
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.processes import run_json_script

CLIENTS = Path(__file__).parent / "clients"
_names = itertools.count()

OwnCluster = Callable[..., LocalCluster]


@pytest.fixture(scope="package")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("shared-cluster"))
    with cluster:
        yield cluster


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[OwnCluster]:
    started: list[LocalCluster] = []

    def start(**kwargs: Any) -> LocalCluster:
        cluster = LocalCluster(tmp_path / f"cluster{len(started)}", **kwargs)
        started.append(cluster)
        return cluster.start()

    try:
        yield start
    finally:
        for cluster in started:
            cluster.close()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name no other test of the run uses (the shared cluster keeps every topic)."""
    base = "".join(c if c.isalnum() else "_" for c in request.node.name)[:40]
    return f"{base}_{next(_names)}"


CREATED = (200, None)  # what ``create`` answers when the topic was made


def create(cluster: LocalCluster, topic: str, via: int | None = None, **args: object) -> Any:
    """POST /topic/create on lookupd ``via`` (None: the first running); (status, body).
    After a 200, once every running lookupd shows the topic (each answers from its own
    view of etcd, which follows the coordinator's write within moments)."""
    query = urlencode({"topic": topic, **{k: str(v) for k, v in args.items()}})
    answer = cluster.post(f"/topic/create?{query}", via)
    if answer[0] == 200:
        for i, proc in enumerate(cluster.lookupds):
            if cluster.running(proc):
                cluster.wait_for(
                    lambda i=i: cluster.request("GET", cluster.lookupd_http(i),  # type: ignore[misc]
                                                f"/lookup?topic={topic}")[0] == 200,
                    10, f"lookupd {i} sees topic {topic}",
                )  # fmt: skip
    return answer


def three_replicas(cluster: LocalCluster, topic: str) -> int:
    """Create ``topic`` with one partition of three replicas and wait until every nsqd
    holds it; the index of the nsqd leading it."""
    assert create(cluster, topic, partition_num=1, replicator=3) == (200, None)
    for i in range(3):
        cluster.wait_for(
            lambda i=i: stats_partitions(cluster, i, topic),  # type: ignore[misc]
            10,
            f"nsqd {i} holds {topic}",
        )
    return leaders(cluster, topic)[0]


def leaders(cluster: LocalCluster, topic: str) -> dict[int, int]:
    """partition -> index of the nsqd leading it, as /lookup?metainfo says."""
    return {p: cluster.node_index(info["id"]) for p, info in cluster.partitions(topic).items()}


def stats_partitions(cluster: LocalCluster, i: int, topic: str) -> dict[int, dict[str, Any]]:
    """partition -> its /stats entry on nsqd ``i`` ({} when nsqd ``i`` holds none of it)."""
    doc = cluster.nsqd_json(i, f"/stats?format=json&topic={topic}")
    found: dict[int, dict[str, Any]] = {}
    for entry in doc["topics"] or []:
        if entry["topic_name"] == topic:
            found.update({p["partition"]: p for p in entry["partitions"]})
    return found


def wire(cluster: LocalCluster, i: int, timeout: float = 5.0) -> WireClient:
    """A protocol V2 connection to nsqd ``i`` (magic sent)."""
    client = WireClient(cluster.nodes[i].ports["TCP"], timeout=timeout)
    client.send(b"  V2")
    return client


def explain(cluster: LocalCluster, topic: str, lines: int = 25) -> str:
    """What a failed wait shows: the topic as lookupd says and each nsqd's last log lines."""
    try:
        parts = repr(cluster.partitions(topic))
    except (OSError, ValueError, KeyError) as exc:
        parts = f"(lookupd: {exc!r})"
    logs = [f"--- nsqd {i}:\n" + "\n".join(node.log_lines[-lines:])
            for i, node in enumerate(cluster.nodes)]  # fmt: skip
    return "\n".join([f"partitions of {topic}: {parts}", *logs])


def run_client(script: str, *args: object, timeout: float = 60.0) -> dict[str, Any]:
    return run_json_script(CLIENTS / script, *args, timeout=timeout)
