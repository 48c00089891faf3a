"""NSQ clients that know nothing of clusters (pynsq, gnsq from PyPI, nsqpy's own client and
tools) on a cluster topic of 3 partitions with one replica each, one partition led by each nsqd: they
publish to every nsqd over TCP and consume through the nsqlookupds, which name the
partition leaders as producers; every message published is consumed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nsqpy.client import Consumer, Message, Producer
from nsqpy.testing import eventually
from nsqpy.testing.cluster import LocalCluster

from .conftest import OwnCluster, create, leaders, run_client, stats_partitions, three_replicas

N = 20  # messages published to each nsqd
AT_LEAST = 200  # publishes through a failover (the leader dies after the 100th)


def one_partition_per_node(cluster: LocalCluster, topic: str) -> None:
    assert create(cluster, topic, partition_num=3, replicator=1) == (200, None)
    assert sorted(leaders(cluster, topic).values()) == [0, 1, 2]
    for i in range(3):  # every nsqd leads its partition before anyone publishes
        cluster.wait_for(
            lambda i=i: cluster.nsqd_json(i, f"/stats?format=json&topic={topic}")["topics"],  # type: ignore[misc]
            15,
            f"nsqd {i} holds {topic}",
        )


def everything(nodes: int = 3) -> list[str]:
    return sorted(f"{i}-{j}" for i in range(nodes) for j in range(N))


@pytest.mark.compat
@pytest.mark.parametrize("script", ["pynsq_cluster.py", "gnsq_cluster.py"])
def test_pypi_client_publishes_to_every_nsqd_and_consumes_through_lookupd(
    shared: LocalCluster, topic_name: str, script: str
) -> None:
    one_partition_per_node(shared, topic_name)
    report = run_client(
        script,
        ",".join(shared.nsqd_tcp(i) for i in range(3)),
        ",".join(shared.lookupd_https()),
        topic_name,
        N,
    )
    assert report["pub"] == ["OK"] * 6
    assert report["bodies"] == everything()
    if "nsqd" in report:  # pynsq tells which nsqd its Reader connected to: all three leaders
        assert sorted(report["nsqd"]) == sorted(shared.nsqd_tcp(i) for i in range(3))
    for i in range(3):  # each nsqd got its own messages, in the partition it leads
        (entry,) = shared.nsqd_json(i, f"/stats?format=json&topic={topic_name}")["topics"]
        assert entry["message_count"] == N


async def test_nsqpy_client_publishes_to_every_nsqd_and_consumes_through_lookupd(
    shared: LocalCluster, topic_name: str
) -> None:
    await asyncio.to_thread(one_partition_per_node, shared, topic_name)
    for i in range(3):
        async with Producer(shared.nsqd_tcp(i)) as producer:
            await producer.pub(topic_name, f"{i}-0".encode())
            await producer.mpub(topic_name, [f"{i}-{j}".encode() for j in range(1, N)])
    got: list[str] = []

    async def handler(message: Message) -> None:
        got.append(message.body.decode())

    async with Consumer(
        topic_name,
        "cluster",
        handler,
        lookupd_http_addresses=shared.lookupd_https(),
        max_in_flight=50,
        lookupd_poll_interval=1,
    ):
        await eventually(lambda: len(got) >= 3 * N, timeout=20, what="every message consumed")
    assert sorted(got) == everything()


@pytest.mark.compat
@pytest.mark.parametrize("script", ["pynsq_failover.py", "gnsq_failover.py"])
def test_pypi_client_carries_on_through_the_leaders_death(
    own_cluster: OwnCluster, script: str
) -> None:
    """A PyPI client's producer pinned to a node that does not lead, and its consumer
    through nsqlookupd, on a topic with three replicas: the leader is SIGKILLed while they
    run. Every publish is answered OK (forwarded, it waits for the new leader) and every
    one is consumed (the consumer finds the new leader at its next lookupd poll)."""
    cluster = own_cluster()
    topic = "failover"
    leader = three_replicas(cluster, topic)
    pinned = (leader + 1) % 3
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(
            run_client,
            script,
            cluster.nsqd_tcp(pinned),
            ",".join(cluster.lookupd_https()),
            topic,
            6,
            AT_LEAST,
            timeout=90,
        )
        cluster.wait_for(
            lambda: stats_partitions(cluster, leader, topic)[0]["message_count"] >= 100,
            20,
            "the client publishing",
        )
        cluster.kill_nsqd(leader)
        report = running.result()
    print(f"\n{script} through a failover: {report}")
    assert report["errors"] == [], "only OK answers"
    assert report["acked"] == report["sent"] >= AT_LEAST
    assert report["missing"] == [], "every acknowledged message consumed"


async def test_nsqpy_consumer_finds_the_new_leader_at_once(own_cluster: OwnCluster) -> None:
    """nsqpy's Consumer through lookupd with the default 60 s poll interval: when the
    leader it consumes from dies, it polls lookupd every half second until the new leader
    is there, and consumes what is published after the failover within seconds."""
    cluster = await asyncio.to_thread(own_cluster)
    topic = "nsqpy_failover"
    assert await asyncio.to_thread(create, cluster, topic, partition_num=1, replicator=3) == (
        200,
        None,
    )
    leader = leaders(cluster, topic)[0]
    pinned = (leader + 1) % 3
    got: set[str] = set()

    async def handler(message: Message) -> None:
        got.add(message.body.decode())

    async with (
        Producer(cluster.nsqd_tcp(pinned)) as producer,
        Consumer(
            topic, "c", handler, lookupd_http_addresses=cluster.lookupd_https(), max_in_flight=50
        ) as consumer,
    ):
        await producer.mpub(topic, [f"before-{j}".encode() for j in range(10)])
        await eventually(lambda: len(got) == 10, timeout=10, what="consumed from the leader")
        assert consumer.lookupd_poll_interval == 60
        await asyncio.to_thread(cluster.kill_nsqd, leader)
        lost = time.monotonic()
        after = [f"after-{j}" for j in range(10)]
        await producer.mpub(topic, [b.encode() for b in after])  # forwarded: waits for it
        elected = time.monotonic()  # (the publish was answered: a new leader has it)
        await eventually(lambda: set(after) <= got, timeout=5, what="consumed after failover")
        print(
            f"\nnew leader answering {elected - lost:.1f}s after the kill, consumed from it"
            f" {time.monotonic() - elected:.1f}s later"
        )


def test_nsq_tools_carry_on_through_the_leaders_death(
    own_cluster: OwnCluster, tmp_path: Path
) -> None:
    """nsqpy's ``to_nsq`` pinned to a node that does not lead (its publishes forwarded) and
    ``nsq_tail`` through nsqlookupd, as real processes, on a topic with three replicas: the
    leader is SIGKILLed while they run. ``to_nsq`` sees no failed publish (it would exit 1
    at the first) and ``nsq_tail`` prints every line."""
    cluster = own_cluster()
    topic = "tools_failover"
    leader = three_replicas(cluster, topic)
    pinned = (leader + 1) % 3
    bindir = Path(sys.executable).parent
    lookupds = [f"--lookupd-http-address={a}" for a in cluster.lookupd_https()]
    lines = [f"line-{i:04d}" for i in range(600)]
    (tmp_path / "lines").write_text("".join(f"{line}\n" for line in lines))
    printed: set[str] = set()
    with (
        open(tmp_path / "lines", "rb") as stdin,
        open(tmp_path / "to_nsq.err", "wb") as errors,
        subprocess.Popen(
            [bindir / "nsq_tail", f"--topic={topic}", "--channel=tail", *lookupds],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        ) as tail,
        subprocess.Popen(
            [bindir / "to_nsq", f"--topic={topic}", "--rate=100",
             f"--nsqd-tcp-address={cluster.nsqd_tcp(pinned)}"],
            stdin=stdin,
            stderr=errors,
        ) as to,  # (it publishes at 100 a second: 6 s)
    ):  # fmt: skip
        try:

            def read_tail() -> None:
                assert tail.stdout is not None
                for raw in tail.stdout:
                    printed.add(raw.decode().strip())

            threading.Thread(target=read_tail, daemon=True).start()
            cluster.wait_for(
                lambda: stats_partitions(cluster, leader, topic)[0]["message_count"] >= 150,
                20,
                "to_nsq publishing",
            )
            cluster.kill_nsqd(leader)
            assert to.wait(60) == 0, (tmp_path / "to_nsq.err").read_text()[-2000:]
            cluster.wait_for(lambda: printed >= set(lines), 60, "nsq_tail printed every line")
        finally:
            for proc in (to, tail):
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
    assert printed <= set(lines), "nothing printed that was never sent"
