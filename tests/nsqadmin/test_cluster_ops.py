"""nsqadmin's cluster operations over a real nsqpy cluster of its own (etcd, two nsqlookupd,
three nsqd): create a topic with partitions and replicas, expand it, move a partition's lead
and a replica, drain a node. Through the JSON API (each refusal of the coordinator comes
back with its status and code) and clicked in headless Chromium, with screenshots kept.
The cluster's own answers (lookupd's ``/lookup?metainfo``, ``/cluster/stats``) are the
ground truth each step is checked against."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from nsqpy.testing.cluster import LocalCluster

from .helpers import AdminProgram, MakeAdmin, unique
from .test_browser import Dialogs, Ui, click_confirmed, open_page
from .test_cluster import cluster_shots, cluster_ui  # noqa: F401  (fixtures: shared)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("nsqadmin-ops"), nodes=3, lookupds=2) as started:
        yield started


def settled(cluster: LocalCluster, topic: str, count: int, replicas: int) -> bool:
    found = cluster.partitions(topic)
    return len(found) == count and all(
        len(p["isr"]) == replicas and not p["catchup"] and "move" not in p for p in found.values()
    )


def rows_shown(page: Page, url: str) -> int:
    """The partitions rows the topic page at ``url`` lists, loaded afresh."""
    open_page(page, url)
    return page.locator("#partitions tbody tr").count()


def holders(info: dict[str, Any]) -> set[str]:
    return set(info["isr"]) | set(info["catchup"])


def channels_on(cluster: LocalCluster, i: int, topic: str) -> set[str]:
    doc = cluster.nsqd_json(i, f"/stats?format=json&topic={topic}")
    return {c["channel_name"] for t in doc["topics"] or [] if t["topic_name"] == topic
            for c in t["channels"]}  # fmt: skip


def check_created(cluster: LocalCluster, topic: str) -> None:
    cluster.wait_for(lambda: settled(cluster, topic, 1, 3), 20, "created with the defaults")
    meta = cluster.lookupd_json(f"/lookup?topic={topic}&metainfo=true")["meta"]
    assert (meta["partition_num"], meta["replica"]) == (1, 3)
    cluster.wait_for(
        lambda: all(channels_on(cluster, i, topic) == {"c"} for i in range(3)),
        20, "the channel on every replica",
    )  # fmt: skip


def check_deleted(cluster: LocalCluster, topic: str) -> None:
    lookup = f"/lookup?topic={topic}"
    cluster.wait_for(
        lambda: all(cluster.request("GET", address, lookup)[0] == 404
                    for address in cluster.lookupd_https()),
        20, "deleted from etcd",
    )  # fmt: skip


async def test_nsqs_create_form_makes_a_cluster_topic_with_the_clusters_defaults(
    cluster: LocalCluster, make_admin: MakeAdmin
) -> None:
    """The create form NSQ's nsqadmin has (a topic, maybe a channel, no partitions) works
    against a cluster: its lookupds create the topic through the coordinator with the
    cluster's defaults (1 partition, every replica the live nodes allow, at most 3). The
    nodes take the topic up a moment after it is created, so the channel reaches a node
    either from nsqadmin or, when the node has not got the topic yet, from lookupd when it
    does; either way the form answers 200 without a warning, and every replica has it.
    Three topics at once, so that a node is likelier to be still taking one up."""
    admin = await make_admin(lookupd_http_addresses=cluster.lookupd_https())
    topics = [unique("nsqform") for _ in range(3)]
    try:
        answers = await asyncio.gather(
            *(admin.post("/api/topics", {"topic": t, "channel": "c"}) for t in topics)
        )
        assert answers == [(200, {"message": ""})] * len(topics)
        for topic in topics:
            check_created(cluster, topic)
    finally:  # (a topic on all three nodes would keep the drain test's node from draining)
        for topic in topics:
            assert cluster.post(f"/topic/delete?topic={topic}")[0] == 200
        for topic in topics:
            check_deleted(cluster, topic)


async def test_the_api_creates_expands_and_moves_through_the_coordinator(
    cluster: LocalCluster, make_admin: MakeAdmin
) -> None:
    admin = await make_admin(lookupd_http_addresses=cluster.lookupd_https())
    topic = unique("api")
    body = {"topic": topic, "partition_num": 2, "replicator": "2", "multipart": True}
    assert await admin.post("/api/cluster/topics", body) == (200, {"message": ""})
    cluster.wait_for(lambda: settled(cluster, topic, 2, 2), 20, "created")
    assert await admin.post(f"/api/cluster/topics/{topic}",
                            {"action": "expand", "partition_num": 3}) == (200, {"message": ""})  # fmt: skip
    cluster.wait_for(lambda: settled(cluster, topic, 3, 2), 20, "expanded")
    info = cluster.partitions(topic)[0]
    follower = next(n for n in info["isr"] if n != info["id"])
    status, doc = await admin.post(
        f"/api/cluster/topics/{topic}", {"action": "move", "partition": 0, "move_leader": True}
    )
    assert status == 200 and doc["move"] == {"from": info["id"], "to": follower, "leader": True}
    cluster.wait_for(lambda: cluster.partitions(topic)[0]["id"] == follower, 10, "lead moved")
    # the coordinator's refusals, with their status and code, and the reason it gave
    refused = {
        ("expand", 2): (400, "E_PARTITION_NUM_REDUCED",
                        f"topic {topic} has 3 partitions; they cannot be fewer"),
        ("move", 7): (400, "INVALID_ARG_TOPIC_PARTITION_NUM", f"topic {topic} has no partition 7"),
    }  # fmt: skip
    for (action, value), (code_status, code, detail) in refused.items():
        arg = "partition_num" if action == "expand" else "partition"
        got = await admin.post(f"/api/cluster/topics/{topic}", {"action": action, arg: value})
        assert got == (code_status, {"message": code, "detail": detail}), (action, got)
    assert await admin.post(f"/api/cluster/topics/{topic}", {"action": "shrink"}) == (
        400, {"message": "INVALID_ACTION"})  # fmt: skip
    assert await admin.post(f"/api/cluster/topics/{topic}", {"action": "expand"}) == (
        400, {"message": "MISSING_ARG_PARTITION_NUM"})  # fmt: skip
    assert await admin.post("/api/cluster/nodes/nobody", {"action": "remove"}) == (
        400, {"message": "E_NODE_NOT_FOUND", "detail": "no node nobody in the cluster"})  # fmt: skip
    # nsqadmin given nsqd addresses only cannot reach a coordinator
    direct = await make_admin(nsqd_http_addresses=[cluster.nsqd_http(0)])
    assert await direct.post(f"/api/cluster/topics/{topic}",
                             {"action": "expand", "partition_num": 4}) == (
        400, {"message": "E_NO_LOOKUPD"})  # fmt: skip


def test_browser_creates_expands_moves_and_drains(
    cluster_ui: Ui,  # noqa: F811
    cluster: LocalCluster,
    cluster_shots: Path,  # noqa: F811
) -> None:
    topic = unique("ui")
    args = [f"--lookupd-http-address={a}" for a in cluster.lookupd_https()]
    program = AdminProgram(*args)

    def steps(page: Page, dialogs: Dialogs) -> None:
        open_page(page, f"{program.url}/nodes")
        form = "form#cluster-create"
        # a create the coordinator refuses: the page says its code and why
        page.fill(f"{form} input[name='topic']", topic)
        page.fill(f"{form} input[name='partition_num']", "1")
        page.fill(f"{form} input[name='replicator']", "4")
        page.click(f"{form} button[type='submit']")
        page.wait_for_selector("#messages .alert.error")
        refusal = page.locator("#messages .alert.error").inner_text()
        assert "No node is available for topic" in refusal, refusal
        assert "replicator 4 > 3 live nodes" in refusal, refusal
        status, _ = cluster.request("GET", cluster.lookupd_http(0), f"/lookup?topic={topic}")
        assert status == 404, "a refused create leaves nothing behind"
        page.fill(f"{form} input[name='partition_num']", "2")
        page.fill(f"{form} input[name='replicator']", "2")
        with page.expect_navigation():
            page.click(f"{form} button[type='submit']")
        page.wait_for_selector("body[data-ready='1']")
        assert page.url.endswith(f"/topics/{topic}")
        cluster.wait_for(lambda: settled(cluster, topic, 2, 2), 20, "created")
        # etcd has the partitions settled a moment before their leaders register the topic
        # with both lookupds (the page lists what the registered nodes report): reload until
        cluster.wait_for(lambda: rows_shown(page, f"{program.url}/topics/{topic}") == 2,
                         20, "the page lists both partitions")  # fmt: skip
        page.screenshot(path=str(cluster_shots / "ops-created.png"), full_page=True)

        # expand to three partitions
        page.fill("form#expand input[name='partition_num']", "3")
        click_confirmed(page, "form#expand button[type='submit']")
        cluster.wait_for(lambda: settled(cluster, topic, 3, 2), 20, "expanded")

        # move the lead of partition 0
        before = cluster.partitions(topic)[0]
        row0 = "#partitions tbody tr:nth-child(1)"
        click_confirmed(page, f"{row0} button[data-name='move-lead']")
        cluster.wait_for(
            lambda: cluster.partitions(topic)[0]["id"] != before["id"], 10, "lead moved"
        )
        # move partition 1's follower replica to the node that does not hold it
        info = cluster.partitions(topic)[1]
        follower = next(n for n in info["isr"] if n != info["id"])
        spare = next(n for n in cluster.live_nodes() if n not in holders(info))
        open_page(page, f"{program.url}/topics/{topic}")
        row1 = "#partitions tbody tr:nth-child(2) form[data-name='move']"
        page.select_option(f"{row1} select[name='move_from']", follower)
        page.fill(f"{row1} input[name='move_to']", spare)
        click_confirmed(page, f"{row1} button[type='submit']")
        cluster.wait_for(
            lambda: (
                settled(cluster, topic, 3, 2)
                and holders(cluster.partitions(topic)[1]) == holders(info) - {follower} | {spare}
            ),
            30,
            "replica moved",
        )
        open_page(page, f"{program.url}/topics/{topic}")
        page.screenshot(path=str(cluster_shots / "ops-moved.png"), full_page=True)

        # drain the node holding most of the topic: it ends holding nothing
        _, held = counts(cluster, topic)
        victim = max(sorted(held), key=lambda n: held[n])
        open_page(page, f"{program.url}/nodes")
        click_confirmed(page, f"#nodes button[data-name='drain'][data-url$='/{victim}']")
        cluster.wait_for(
            lambda: cluster.lookupd_json("/cluster/stats")["removing_nodes"].get(victim) == 0,
            60,
            f"{victim} drained",
        )
        assert all(victim not in holders(p) for p in cluster.partitions(topic).values())
        open_page(page, f"{program.url}/nodes")
        listing = page.locator("#nodes").inner_text()
        assert "drained" in listing and listing.count("msgs/s") == 3  # each node's load
        assert listing.count("x leads") == 2  # the fair shares (not of a drained node)
        page.screenshot(path=str(cluster_shots / "ops-drained.png"), full_page=True)

    try:
        cluster_ui.run(steps)
    finally:
        assert program.stop() == 0


def counts(cluster: LocalCluster, topic: str) -> tuple[dict[str, int], dict[str, int]]:
    leaders: dict[str, int] = {}
    held: dict[str, int] = {}
    for p in cluster.partitions(topic).values():
        leaders[p["id"]] = leaders.get(p["id"], 0) + 1
        for n in holders(p):
            held[n] = held.get(n, 0) + 1
    return leaders, held
