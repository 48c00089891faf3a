"""nsqadmin over a real nsqpy cluster: etcd, two nsqlookupd and three nsqd (``LocalCluster``,
one for this module), with a topic of 2 partitions, 2 replicas each (``multipart=true``).

The topic page lists each partition with its leader, ISR, catch-up, epochs, depth,
committed offset and each follower's lag, exactly as lookupd and the nsqd themselves
report them; the node list adds each node's id, lease, leader and replica counts and the
coordinating lookupd; a node page the partitions it holds. Also in headless Chromium.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from nsqpy.testing import http_request
from nsqpy.testing.cluster import LocalCluster

from .helpers import AdminProgram, MakeAdmin, unique
from .test_browser import CHROMIUM, Dialogs, Ui, open_page

PUBLISHED = {0: 3, 1: 2}  # messages published to each partition


@dataclass
class Topic:
    cluster: LocalCluster
    name: str

    def partitions(self) -> dict[int, dict[str, Any]]:
        return self.cluster.partitions(self.name)

    def node_of(self, node_id: str) -> int:
        return self.cluster.node_index(node_id)

    def stats_of(self, i: int) -> dict[int, dict[str, Any]]:
        """nsqd ``i``'s /stats partitions of the topic, by number (the ground truth)."""
        doc = self.cluster.nsqd_json(i, f"/stats?format=json&topic={self.name}")
        found = [t for t in doc["topics"] or [] if t["topic_name"] == self.name]
        return {p["partition"]: p for p in found[0]["partitions"]} if found else {}


@pytest.fixture(scope="module")
def topic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topic]:
    cluster = LocalCluster(tmp_path_factory.mktemp("nsqadmin-cluster"), nodes=3, lookupds=2)
    with cluster:
        name = unique("parts")
        status, body = cluster.post(
            f"/topic/create?topic={name}&partition_num=2&replicator=2&multipart=true"
        )
        assert status == 200, body
        placed = cluster.wait_for(
            lambda: (
                (parts := cluster.partitions(name)).keys() == {0, 1}
                and all(len(p["isr"]) == 2 for p in parts.values())
                and parts
            ),
            15,
            f"{name} placed",
        )
        for p, info in placed.items():
            leader = cluster.nsqd_http(cluster.node_index(info["id"]))
            for k in range(PUBLISHED[p]):
                url = f"http://{leader}/pub?topic={name}&partition={p}"
                status, data, _ = http_request("POST", url, f"m{k}".encode())
                assert status == 200, data
        yield Topic(cluster, name)


@pytest.fixture(autouse=True)
def daemons_alive(topic: Topic) -> Iterator[None]:
    """No test here stops a daemon: one that exited is a failure of its own, said with its
    exit code and last log lines."""
    assert topic.cluster.exited() == []
    yield
    assert topic.cluster.exited() == []


# -- the JSON API -------------------------------------------------------------------------


async def test_topic_lists_partitions_with_leader_isr_and_follower_lag(
    topic: Topic, make_admin: MakeAdmin
) -> None:
    admin = await make_admin(lookupd_http_addresses=topic.cluster.lookupd_https())
    status, doc = await admin.get(f"/api/topics/{topic.name}")
    assert status == 200 and doc["message"] == "", doc
    truth = topic.partitions()
    rows = {r["partition"]: r for r in doc["partitions"]}
    assert rows.keys() == {0, 1}
    for p, want in truth.items():
        row = rows[p]
        leader = topic.node_of(want["id"])
        assert row["leader"] == want["id"]
        assert row["leader_node"] == topic.cluster.nsqd_http(leader)
        assert row["leader_reported"] is True
        assert (row["isr"], row["catchup"]) == (want["isr"], want["catchup"])
        assert (row["epoch"], row["leader_epoch"]) == (want["epoch"], want["leader_epoch"])
        mine = topic.stats_of(leader)[p]
        assert mine["role"] == "leader"
        assert row["depth"] == mine["depth"] == PUBLISHED[p]
        assert row["committed_offset"] == mine["committed_offset"]
        assert [r["id"] for r in row["replicas"]] == want["isr"]
        for replica in row["replicas"][1:]:  # the followers, each as it reports itself
            theirs = topic.stats_of(topic.node_of(replica["id"]))[p]
            assert theirs["role"] == "follower"
            assert replica["end"] == theirs["high_watermark"]
            assert replica["lag"] == max(0, mine["committed_offset"] - theirs["high_watermark"])


async def test_nodes_show_ids_leases_counts_and_the_coordinator(
    topic: Topic, make_admin: MakeAdmin
) -> None:
    cluster = topic.cluster
    admin = await make_admin(lookupd_http_addresses=cluster.lookupd_https())
    status, doc = await admin.get("/api/nodes")
    assert status == 200 and doc["message"] == "", doc
    truth = topic.partitions()
    by_port = {n["http_port"]: n for n in doc["nodes"]}
    assert len(by_port) == 3
    for i in range(3):
        node = by_port[int(cluster.nsqd_http(i).rpartition(":")[2])]
        node_id = cluster.node_id(i)
        assert node["node_id"] == node_id and node["lease"] is True
        assert node["leaders"] == sum(p["id"] == node_id for p in truth.values())
        assert node["replicas"] == sum(node_id in p["isr"] for p in truth.values())
    summary = doc["cluster"]
    listing = cluster.lookupd_json("/listlookup")
    assert summary["coordinator"] == cluster.coordinator() == listing["lookupdleader"]["ID"]
    assert {lk["id"] for lk in summary["lookupds"]} == {lk["ID"] for lk in listing["lookupdnodes"]}
    assert [lk["id"] for lk in summary["lookupds"] if lk["coordinator"]] == [cluster.coordinator()]
    assert sorted(summary["live_nodes"]) == sorted(cluster.node_id(i) for i in range(3))
    assert summary["secure"] is cluster.secure  # (as /cluster/stats says)


async def test_node_page_shows_its_roles(topic: Topic, make_admin: MakeAdmin) -> None:
    cluster = topic.cluster
    admin = await make_admin(lookupd_http_addresses=cluster.lookupd_https())
    truth = topic.partitions()
    for i in range(3):
        status, doc = await admin.get(f"/api/nodes/{cluster.nsqd_http(i)}")
        assert status == 200, doc
        node_id = cluster.node_id(i)
        assert doc["cluster"]["node_id"] == node_id and doc["cluster"]["lease"] is True
        assert doc["cluster"]["coordinator"] == cluster.coordinator()
        held = {
            p["partition"]: p["role"]
            for t in doc["topics"]
            if t["topic_name"] == topic.name
            for p in t["partitions"]
        }
        want = {
            p: "leader" if info["id"] == node_id else "follower"
            for p, info in truth.items()
            if node_id in info["isr"]
        }
        assert held == want
        status, page = await admin.get(f"/nodes/{cluster.nsqd_http(i)}")
        assert status == 200 and node_id in page


async def test_nsqd_mode_shows_the_same_partitions(topic: Topic, make_admin: MakeAdmin) -> None:
    """Given the nsqd directly (no lookupd): the same leaders and ISR, from /stats alone."""
    cluster = topic.cluster
    admin = await make_admin(nsqd_http_addresses=[cluster.nsqd_http(i) for i in range(3)])
    status, doc = await admin.get(f"/api/topics/{topic.name}")
    assert status == 200 and doc["message"] == "", doc
    got = {r["partition"]: (r["leader"], r["isr"], r["depth"]) for r in doc["partitions"]}
    want = {p: (i["id"], i["isr"], PUBLISHED[p]) for p, i in topic.partitions().items()}
    assert got == want
    status, nodes = await admin.get("/api/nodes")
    assert status == 200 and "cluster" not in nodes
    assert sorted(n["node_id"] for n in nodes["nodes"]) == sorted(
        cluster.node_id(i) for i in range(3)
    )


async def test_pages_show_the_partitions_table(topic: Topic, make_admin: MakeAdmin) -> None:
    admin = await make_admin(lookupd_http_addresses=topic.cluster.lookupd_https())
    status, page = await admin.get(f"/topics/{topic.name}")
    assert status == 200 and 'id="partitions"' in page
    for info in topic.partitions().values():
        assert all(node_id in page for node_id in info["isr"])
    status, page = await admin.get("/nodes")
    assert status == 200 and 'id="lookupds"' in page and topic.cluster.coordinator() in page
    warned = "insecure cluster: the links between its daemons are not mutual TLS" in page
    assert warned is not topic.cluster.secure


# -- in Chromium ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster_ui() -> Iterator[Ui]:
    assert Path(CHROMIUM).exists(), "Debian's chromium is needed (scripts/install-system-deps)"
    browser = Ui()
    yield browser
    browser.close()


@pytest.fixture
def cluster_shots(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    base = os.environ.get("NSQPY_ARTIFACTS")
    folder = Path(base) / "nsqadmin" / request.node.name if base else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_browser_shows_partitions_with_leader_and_isr(
    cluster_ui: Ui, topic: Topic, cluster_shots: Path
) -> None:
    cluster = topic.cluster
    truth = topic.partitions()
    args = [f"--lookupd-http-address={a}" for a in cluster.lookupd_https()]
    program = AdminProgram(*args)

    def steps(page: Page, dialogs: Dialogs) -> None:
        open_page(page, f"{program.url}/topics/{topic.name}")
        rows = page.locator("#partitions tbody tr")
        assert rows.count() == 2
        for p, info in sorted(truth.items()):
            cells = rows.nth(p).locator("td")
            assert cells.nth(0).inner_text() == str(p)
            leader = cells.nth(1).locator("a.node-id")
            assert leader.inner_text() == info["id"]
            node = cluster.nsqd_http(cluster.node_index(info["id"]))
            assert leader.get_attribute("href") == f"/nodes/{node}"
            isr = cells.nth(2).locator("a.node-id").all_inner_texts()
            assert isr == info["isr"]
            assert cells.nth(6).inner_text() == str(PUBLISHED[p])  # depth
        page.screenshot(path=str(cluster_shots / "partitions.png"), full_page=True)
        open_page(page, f"{program.url}/nodes")
        assert page.locator("#nodes tbody tr").count() == 3
        coordinator = page.locator("#lookupds tr", has_text="coordinator")
        assert cluster.coordinator() in coordinator.inner_text()
        page.screenshot(path=str(cluster_shots / "cluster-nodes.png"), full_page=True)

    try:
        cluster_ui.run(steps)
    finally:
        assert program.stop() == 0
