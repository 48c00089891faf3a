"""Replication on a real cluster (issue 19, first step): a topic with two replicas per
partition; what the leader acknowledged is on the follower, and after the leader is
SIGKILLed the new leader (the other ISR member) delivers every acknowledged message."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.testing import WireClient, consume, dpub, http_request, mpub
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.disks import SmallDisk

from .conftest import (
    OwnCluster,
    create,
    explain,
    leaders,
    stats_partitions,
    three_replicas,
    wire,
)


def test_acknowledged_messages_survive_the_leaders_death(own_cluster: OwnCluster) -> None:
    cluster = own_cluster()
    topic = "replicated"
    assert create(cluster, topic, partition_num=1, replicator=2) == (200, None)
    leader = leaders(cluster, topic)[0]
    (follower,) = [cluster.node_index(n) for n in cluster.partitions(topic)[0]["isr"]
                   if cluster.node_index(n) != leader]  # fmt: skip
    cluster.wait_for(lambda: stats_partitions(cluster, follower, topic), 10, "follower holds it")

    client = wire(cluster, leader)
    sent = [f"m{i:04d}".encode() for i in range(1000)]
    for start in range(0, len(sent), 100):
        client.send(mpub(topic, sent[start : start + 100]))
        assert client.read_frame() == (0, b"OK"), "acknowledged once both replicas have it"
    client.close()
    # what was acknowledged is on the follower already (acknowledged after the ISR had it)
    assert stats_partitions(cluster, follower, topic)[0]["high_watermark"] >= len(sent)

    cluster.kill_nsqd(leader)
    killed = time.monotonic()
    cluster.wait_for(lambda: leaders(cluster, topic)[0] == follower, 15, "the follower leads")
    cluster.wait_for(
        lambda: stats_partitions(cluster, follower, topic)[0]["role"] == "leader", 10,
        "the follower takes the lead",
    )  # fmt: skip
    print(f"\nleader killed: the follower leads after {time.monotonic() - killed:.2f}s")
    got = consume(cluster.nodes[follower].ports["TCP"], topic, "after", len(sent), rdy=500)
    assert sorted(got) == sent, "every acknowledged message, from the new leader"


def test_too_small_an_isr_stops_writes_until_the_old_leader_rejoins(
    own_cluster: OwnCluster,
) -> None:
    """replicator=2 with one replica left: not a majority, so writes are refused with
    E_FAILED_ON_NOT_WRITABLE (the connection stays open), none is acknowledged, and what
    was committed before is read at once; the killed node, restarted, catches up from the
    new leader, joins the ISR, and writes are taken again."""
    cluster = own_cluster()
    topic = "majority"
    assert create(cluster, topic, partition_num=1, replicator=2) == (200, None)
    leader = leaders(cluster, topic)[0]
    (follower,) = [cluster.node_index(n) for n in cluster.partitions(topic)[0]["isr"]
                   if cluster.node_index(n) != leader]  # fmt: skip
    client = wire(cluster, leader)
    client.send(mpub(topic, [b"before"] * 10))
    assert client.read_frame() == (0, b"OK")
    client.close()

    cluster.kill_nsqd(leader)
    cluster.wait_for(lambda: leaders(cluster, topic)[0] == follower, 15, "the follower leads")
    client = wire(cluster, follower)

    lonely: list[bytes] = []  # taken before the new leader knew its ISR (must be none)

    def refused() -> bool:
        client.send(mpub(topic, [b"lonely"]))
        answer = client.read_frame()
        if answer == (0, b"OK"):
            lonely.append(b"lonely")
        return answer == (1, b"E_FAILED_ON_NOT_WRITABLE")

    cluster.wait_for(refused, 10, "writes refused with one replica of two")
    assert lonely == [], "nothing acknowledged before the new leader knew its ISR"
    # What was committed before the failover is read at once, though no write is taken:
    # the new leader, its own whole ISR, commits everything it holds (not only once a
    # replica rejoins, which the coordinator makes on the third node seconds later), also
    # when its old leader died before telling it the last batch was committed (a CI run
    # once caught that window: 0 of the 10 read within 5 s).
    at = cluster.nodes[follower].ports["TCP"]
    assert consume(at, topic, "early", 10, timeout=5) == [b"before"] * 10
    assert len(cluster.partitions(topic)[0]["isr"]) == 1, "read before any replica rejoined"
    client.send(b"NOP\n")  # still open: not fatal
    status, body, _ = http_request(
        "POST", f"http://{cluster.nsqd_http(follower)}/pub?topic={topic}", b"x"
    )
    assert (status, body) == (400, b'{"message":"E_FAILED_ON_NOT_WRITABLE"}')

    cluster.restart_nsqd(leader)  # the old leader comes back, catches up, rejoins
    cluster.wait_for(lambda: len(cluster.partitions(topic)[0]["isr"]) == 2, 20, "ISR of 2")

    def taken() -> bool:
        client.send(mpub(topic, [b"after"]))
        return client.read_frame() == (0, b"OK")

    cluster.wait_for(taken, 10, "writes taken again")
    client.close()
    assert consume(at, topic, "early", 1) == [b"after"]  # (it had the 10 before)


def test_a_plain_producer_on_a_follower_carries_on_through_the_leaders_death(
    own_cluster: OwnCluster,
) -> None:
    """A plain NSQ producer pinned to a node that does not lead (CLUSTER.md "Publish to any
    node") goes on publishing while the leader is SIGKILLed: its publishes are forwarded
    to the leader, wait through the failover for the new one, and every one answered OK
    is delivered by the new leader. Nothing but OK is answered meanwhile."""
    cluster = own_cluster()
    topic = "pinned"
    leader = three_replicas(cluster, topic)
    pinned = (leader + 1) % 3

    # (a forward waits for the new leader up to the forwarder's patience, 10 s: the test
    # asserts that it is answered OK, bench/failover.py how fast; a loaded CI run took >5 s)
    client = wire(cluster, pinned, timeout=20.0)
    acked: list[bytes] = []
    answers: set[tuple[int, bytes]] = set()
    gaps: list[float] = []
    killed_at = -1

    def batch(n: int) -> None:
        bodies = [f"b{n:04d}-{j}".encode() for j in range(10)]
        started = time.monotonic()
        client.send(mpub(topic, bodies))
        answer = client.read_frame()
        answers.add(answer)
        gaps.append(time.monotonic() - started)
        if answer == (0, b"OK"):
            acked.extend(bodies)

    for n in range(30):
        batch(n)
    cluster.kill_nsqd(leader)
    killed_at = len(gaps)
    for n in range(30, 80):
        batch(n)
    client.close()
    assert answers == {(0, b"OK")}, "the producer saw only OK, through the failover"
    print(f"\nslowest publish across the failover: {max(gaps[killed_at:]):.2f}s")
    new_leader = leaders(cluster, topic)[0]
    assert new_leader != leader
    missing = until_delivered(cluster.nodes[new_leader].ports["TCP"], topic, set(acked))
    assert missing == set(), "every acknowledged message, from the new leader"


def until_delivered(port: int, topic: str, wanted: set[bytes], timeout: float = 20) -> set[bytes]:
    """SUB a new channel and FIN what comes until every body of ``wanted`` was seen (a
    publish retried across a failover may come twice); what was never seen."""
    consumer = WireClient(port, timeout=timeout)
    consumer.send(b"  V2" + f"SUB {topic} check\nRDY 500\n".encode())
    assert consumer.read_frame() == (0, b"OK")
    left = set(wanted)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        ftype, data = consumer.read_frame()
        if ftype == 2:
            left.discard(data[26:])
            consumer.send(b"FIN " + data[10:26] + b"\n")
    consumer.close()
    return left


def kill_the_leader(cluster: LocalCluster, topic: str, leader: int) -> int:
    """SIGKILL nsqd ``leader``; the index of the nsqd leading partition 0 after it, once
    it has taken the lead."""
    cluster.kill_nsqd(leader)
    cluster.wait_for(lambda: leaders(cluster, topic)[0] != leader, 15, "a new leader")
    new = leaders(cluster, topic)[0]
    cluster.wait_for(
        lambda: stats_partitions(cluster, new, topic)[0]["role"] == "leader", 10, "it leads"
    )
    return new


def confirmed(cluster: LocalCluster, i: int, topic: str, channel: str) -> int:
    """The confirmed offset of ``channel`` over partition 0 on nsqd ``i`` (-1: none)."""
    doc = cluster.nsqd_json(i, f"/stats?format=json&topic={topic}")
    for entry in doc["topics"] or []:
        for c in entry["channels"]:
            if c["channel_name"] == channel:
                return int(c["partitions"][0]["confirmed_offset"])
    return -1


def deferred(cluster: LocalCluster, i: int, topic: str, channel: str) -> int:
    """The deferred count of ``channel`` on nsqd ``i`` (-1: no such channel)."""
    doc = cluster.nsqd_json(i, f"/stats?format=json&topic={topic}")
    for entry in doc["topics"] or []:
        for c in entry["channels"]:
            if c["channel_name"] == channel:
                return int(c["deferred_count"])
    return -1


def test_a_channels_cursor_survives_the_leaders_death(own_cluster: OwnCluster) -> None:
    """The leader sends its channels' cursors and delayed stores to the followers every
    second; after its SIGKILL the new leader's channel goes on where the old one was: what
    was FINished before is not delivered again, what was not is, and what was REQ'd with a
    delay (or DPUB'd) comes at its time, not before."""
    cluster = own_cluster()
    topic = "cursors"
    assert create(cluster, topic, partition_num=1, replicator=3) == (200, None)
    leader = leaders(cluster, topic)[0]
    client = wire(cluster, leader)
    sent = [f"m{i:04d}".encode() for i in range(1000)]
    for start in range(0, len(sent), 100):
        client.send(mpub(topic, sent[start : start + 100]))
        assert client.read_frame() == (0, b"OK")
    assert consume(cluster.nodes[leader].ports["TCP"], topic, "c", 600, rdy=100) == sent[:600]
    followers = [i for i in range(3) if i != leader]
    for i in followers:  # within about a second, each follower has the cursor
        cluster.wait_for(lambda i=i: confirmed(cluster, i, topic, "c") == 600, 10, f"cursor on {i}")  # type: ignore[misc]

    delay_s = 8.0
    consumer = WireClient(cluster.nodes[leader].ports["TCP"])
    consumer.send(b"  V2" + f"SUB {topic} c\n".encode())
    assert consumer.read_frame() == (0, b"OK")
    consumer.send(b"RDY 2\n")
    requeued = []
    for _ in range(2):  # m0600 and m0601, requeued with a delay
        ftype, data = consumer.read_frame()
        assert ftype == 2
        requeued.append(data[26:])
        consumer.send(b"REQ " + data[10:26] + b" %d\n" % int(delay_s * 1000))
    client.send(dpub(topic, int(delay_s * 1000), b"later"))
    assert client.read_frame() == (0, b"OK")
    due = time.time() + delay_s
    client.close()
    assert requeued == sent[600:602]
    for i in followers:
        cluster.wait_for(lambda i=i: deferred(cluster, i, topic, "c") == 3, 10, f"deferred on {i}")  # type: ignore[misc]
    consumer.close()

    new = kill_the_leader(cluster, topic, leader)
    consumer = WireClient(cluster.nodes[new].ports["TCP"], timeout=20)
    consumer.send(b"  V2" + f"SUB {topic} c\n".encode())
    assert consumer.read_frame() == (0, b"OK")
    consumer.send(b"RDY 100\n")
    arrived: dict[bytes, float] = {}
    for _ in range(401):
        ftype, data = consumer.read_frame()
        assert ftype == 2 and data[26:] not in arrived, "each once"
        arrived[data[26:]] = time.time()
        consumer.send(b"FIN " + data[10:26] + b"\n")
    consumer.close()
    assert sorted(arrived) == sorted([*sent[600:], b"later"]), "nothing lost"
    for body in [*requeued, b"later"]:
        assert arrived[body] >= due - 0.5, f"{body!r} came {due - arrived[body]:.1f} s early"
    rest = [b for b in sorted(arrived, key=arrived.__getitem__) if b in sent[602:]]
    assert rest == sent[602:], "the channel goes on where it was on the old leader"


def test_a_paused_leader_acknowledges_nothing_once_replaced_and_rejoins(
    own_cluster: OwnCluster,
) -> None:
    """SIGSTOP of the leader (a long GC pause): another node leads, publishes through a
    third node go on; a publish that reached the paused leader is never acknowledged once
    it resumes (E_FAILED_ON_NOT_LEADER: it was not committed), its divergent tail is cut,
    and it rejoins the ISR with a log equal to the new leader's."""
    cluster = own_cluster()
    topic = "paused"
    old = three_replicas(cluster, topic)
    direct = wire(cluster, old)
    direct.send(mpub(topic, [b"before"] * 10))
    assert direct.read_frame() == (0, b"OK")

    cluster.pause_nsqd(old)
    try:
        direct.send(mpub(topic, [b"during"] * 10))  # waits in the paused node's socket
        cluster.wait_for(lambda: leaders(cluster, topic)[0] != old, 15, "another leader")
        new = leaders(cluster, topic)[0]
        third = next(i for i in range(3) if i not in (old, new))
        client = wire(cluster, third, timeout=20.0)  # (forwarded: it may wait for the election)
        for _ in range(5):
            client.send(mpub(topic, [b"after"] * 10))
            assert client.read_frame() == (0, b"OK")
        client.close()
    finally:
        cluster.resume_nsqd(old)
    assert direct.read_frame() == (1, b"E_FAILED_ON_NOT_LEADER"), "never acknowledged"
    direct.sock.settimeout(15)
    direct.send(mpub(topic, [b"again"] * 10))  # the same connection: forwarded now
    assert direct.read_frame() == (0, b"OK")
    direct.close()
    cluster.wait_for(lambda: len(cluster.partitions(topic)[0]["isr"]) == 3, 30, "back in the ISR")
    end = stats_partitions(cluster, new, topic)[0]["high_watermark"]
    cluster.wait_for(
        lambda: stats_partitions(cluster, old, topic)[0]["high_watermark"] == end, 10, "equal logs"
    )
    got = consume(cluster.nodes[new].ports["TCP"], topic, "all", 70, rdy=100)
    assert got == [b"before"] * 10 + [b"after"] * 50 + [b"again"] * 10


HOOKS = Path(__file__).parents[2] / "faults" / "hooks"  # sitecustomize: NSQPY_FSYNC_GATE


def test_a_stalled_follower_leaves_the_isr_and_writes_go_on(
    own_cluster: OwnCluster, tmp_path: Path
) -> None:
    """Under --sync-always one follower's disk stalls (every fsync held: its lease lives
    on): the leader reports it lagging after its timeout, the coordinator moves it to
    catch-up, and the publish waiting for it is answered by the remaining majority; once
    its disk is back it catches up and rejoins the ISR."""
    gates = {i: tmp_path / f"fsync-gate-{i}" for i in range(3)}
    path = os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))
    env = {
        i: {
            "NSQPY_FSYNC_GATE": str(gates[i]),
            "NSQPY_FSYNC_GATE_SUFFIX": ".log",
            "PYTHONPATH": path,
        }
        for i in range(3)
    }
    cluster = own_cluster(nsqd_flags=["--sync-always"], nsqd_env=env)
    topic = "stalled"
    leader = three_replicas(cluster, topic)
    stalled = (leader + 1) % 3
    client = WireClient(cluster.nodes[leader].ports["TCP"], timeout=30)
    client.send(b"  V2" + mpub(topic, [b"before"] * 10))
    assert client.read_frame() == (0, b"OK")
    stalled_id = cluster.node_id(stalled)
    gates[stalled].touch()
    try:
        started = time.monotonic()
        client.send(mpub(topic, [b"stalled"] * 10))
        assert client.read_frame() == (0, b"OK"), "answered without the stalled follower"
        print(f"\na publish waited {time.monotonic() - started:.1f}s for the ISR to shrink")
        cluster.wait_for(  # (the log lines reach the test through a reader thread)
            lambda: any(
                "lagging, says the leader" in line and stalled_id in line
                for proc in cluster.lookupds
                for line in list(proc.log_lines)
            ),
            10,
            "the coordinator's reason: lagging, not a lost lease",
        )
        # (it may be back in the ISR already: its fsyncs wait only when one is due)
        client.send(mpub(topic, [b"after"] * 10))
        assert client.read_frame() == (0, b"OK")
    finally:
        gates[stalled].unlink(missing_ok=True)
    cluster.wait_for(lambda: len(cluster.partitions(topic)[0]["isr"]) == 3, 30, "back in the ISR")
    client.close()


@contextlib.contextmanager
def small_disks(tmp_path: Path) -> Iterator[list[SmallDisk]]:
    """A 64 MiB tmpfs as the data path of each nsqd of the test's (first) own cluster."""
    disks = [SmallDisk(tmp_path / "cluster0" / f"nsqd{i}", 64 << 20).mount() for i in range(3)]
    try:
        yield disks
    finally:
        for disk in disks:
            disk.unmount()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_follower_whose_disk_is_full_leaves_the_isr_and_writes_go_on(
    own_cluster: OwnCluster, tmp_path: Path
) -> None:
    """Found by the Jepsen harness: a follower whose disk is full failed every APPEND,
    dialled its leader again at once, and the leader, seeing it connect, never called it
    lagging: the partition took no write for as long as the disk stayed full. Now its
    un-acked time survives its redials, the coordinator moves it to catch-up, the majority
    answers, and once the disk has room the follower catches up and rejoins the ISR with
    the leader's log."""
    with small_disks(tmp_path) as disks:
        cluster = own_cluster()
        topic = "diskfull"
        leader = three_replicas(cluster, topic)
        full = (leader + 1) % 3
        full_id = cluster.node_id(full)
        client = WireClient(cluster.nodes[leader].ports["TCP"], timeout=30)
        client.send(b"  V2" + mpub(topic, [b"before"] * 10))
        assert client.read_frame() == (0, b"OK")
        disks[full].fill()
        started = time.monotonic()
        for i in range(20):  # (the first may wait for the ISR to shrink, then none waits)
            client.send(mpub(topic, [f"full-{i}".encode()] * 50))
            assert client.read_frame() == (0, b"OK"), "answered without the full follower"
        print(f"\n20 publishes with a follower's disk full took {time.monotonic() - started:.1f}s")
        # (the leader answered from etcd's new ISR; lookupd's view follows within moments)
        cluster.wait_for(
            lambda: full_id not in cluster.partitions(topic)[0]["isr"], 5, "the ISR without it"
        )
        lines = [line for line in list(cluster.nodes[full].log_lines) if "No space left" in line]
        assert 0 < len(lines) <= 4, lines  # the same failure logged again only every 30 s
        disks[full].free()
        cluster.wait_for(
            lambda: full_id in cluster.partitions(topic)[0]["isr"], 30, "back in the ISR"
        )
        cluster.wait_for(
            lambda: log_bytes(cluster, full, topic) == log_bytes(cluster, leader, topic), 10,
            "the follower's log is the leader's",
        )  # fmt: skip
        client.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_leader_whose_disk_is_full_hands_the_partition_to_a_follower(
    own_cluster: OwnCluster, tmp_path: Path
) -> None:
    """Found by the Jepsen harness too: a leader whose disk is full answered every publish
    with E_MPUB_FAILED for as long as the disk stayed full, while two healthy replicas
    waited. Now it reports that it cannot write the partition (``NodeInfo.failing``), the
    coordinator elects the ISR member with the longest log, writes go on there, and the old
    leader, in catch-up, rejoins the ISR with the same log once its disk has room."""
    with small_disks(tmp_path) as disks:
        cluster = own_cluster()
        topic = "leaderfull"
        leader = three_replicas(cluster, topic)
        leader_id = cluster.node_id(leader)
        client = wire(cluster, leader)
        client.send(mpub(topic, [b"before"] * 10))
        assert client.read_frame() == (0, b"OK")
        disks[leader].fill()
        client.send(mpub(topic, [b"refused" * 150] * 50))  # (more than a page)
        kind, body = client.read_frame()
        assert kind == 1 and body.startswith(b"E_MPUB_FAILED"), body  # NSQ's answer
        client.close()
        filled = time.monotonic()
        cluster.wait_for(lambda: leaders(cluster, topic)[0] != leader, 10, "another leader")
        print(
            f"\nthe partition had a new leader {time.monotonic() - filled:.1f}s after the disk filled"
        )
        new = leaders(cluster, topic)[0]
        assert leader_id in cluster.partitions(topic)[0]["catchup"]
        # (answered once the other ISR member follows the new leader and has it: the test
        # asserts that writes go on, bench/failover.py how fast; a loaded CI run took over 5 s)
        client = wire(cluster, new, timeout=30.0)
        cluster.wait_for(lambda: stats_partitions(cluster, new, topic)[0]["role"] == "leader", 10,
                         "the new leader took over")  # fmt: skip
        client.send(mpub(topic, [b"after"] * 10))
        try:
            answer = client.read_frame()
        except TimeoutError:
            raise AssertionError(f"no answer within 30 s\n{explain(cluster, topic)}") from None
        assert answer == (0, b"OK"), explain(cluster, topic)
        client.close()
        disks[leader].free()
        cluster.wait_for(
            lambda: leader_id in cluster.partitions(topic)[0]["isr"], 30, "back in the ISR"
        )
        cluster.wait_for(
            lambda: log_bytes(cluster, leader, topic) == log_bytes(cluster, new, topic), 10,
            "the old leader's log is the new leader's",
        )  # fmt: skip


def log_bytes(cluster: LocalCluster, i: int, topic: str) -> bytes:
    """The whole log of partition 0 on nsqd ``i`` as stored (``/log/read`` batches)."""
    out, offset = b"", 0
    while True:
        status, body, headers = http_request(
            "GET",
            f"http://{cluster.nsqd_http(i)}/log/read?topic={topic}&offset={offset}"
            "&format=batches&max_count=100000&max_bytes=4000000",
        )
        assert status == 200, body
        if int(headers["X-NSQ-Record-Count"]) == 0:
            return out
        out += body
        offset = int(headers["X-NSQ-Next-Offset"])


def test_a_follower_killed_during_a_stream_rejoins_with_an_identical_log(
    own_cluster: OwnCluster,
) -> None:
    """A producer publishes without pause; a follower is SIGKILLed, restarted, catches up
    from the leader while the stream goes on and joins the ISR again; in the end its log
    is the leader's, byte for byte (offsets, epochs, records)."""
    cluster = own_cluster()
    topic = "stream"
    leader = three_replicas(cluster, topic)
    follower = (leader + 1) % 3
    stop = threading.Event()
    answers: list[tuple[int, bytes]] = []

    def produce() -> None:
        client = WireClient(cluster.nodes[leader].ports["TCP"], timeout=30)
        client.send(b"  V2")
        n = 0
        while not stop.is_set():
            client.send(mpub(topic, [b"s%06d" % (n + j) for j in range(20)]))
            answers.append(client.read_frame())
            n += 20
            time.sleep(0.005)
        client.close()

    def answered(more: int, what: str) -> None:  # (however fast the machine is now)
        want = len(answers) + more
        cluster.wait_for(lambda: len(answers) >= want, 30, f"{more} publishes answered {what}")

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        answered(50, "before the kill")
        cluster.kill_nsqd(follower)
        time.sleep(1)
        cluster.restart_nsqd(follower)
        cluster.wait_for(
            lambda: len(cluster.partitions(topic)[0]["isr"]) == 3, 30, "back in the ISR"
        )
        answered(25, "once it is back")
    finally:
        stop.set()
        producer.join(30)
    assert set(answers) == {(0, b"OK")}
    end = stats_partitions(cluster, leader, topic)[0]["high_watermark"]

    def has_all() -> bool:  # (and was told it is committed: its log reads stop there)
        part = stats_partitions(cluster, follower, topic)[0]
        return bool(part["high_watermark"] == part["committed_offset"] == end)

    cluster.wait_for(has_all, 10, "the follower has it all")
    assert log_bytes(cluster, follower, topic) == log_bytes(cluster, leader, topic)


def test_a_deferred_message_is_not_lost_with_its_leader(own_cluster: OwnCluster) -> None:
    """A DPUB'd message waits in the leader's delayed store, and the leader's cursor counts
    its offset as done; the followers get both (CURSORS carry the cursor and the delayed
    store's entries), so after the leader's SIGKILL the new leader delivers it at its time,
    not before."""
    cluster = own_cluster()
    topic = "deferred"
    leader = three_replicas(cluster, topic)
    consumer = WireClient(cluster.nodes[leader].ports["TCP"], timeout=10)
    consumer.send(b"  V2" + f"SUB {topic} c\nRDY 100\n".encode())
    assert consumer.read_frame() == (0, b"OK")
    client = wire(cluster, leader)
    client.send(mpub(topic, [b"now-%d" % i for i in range(10)]))
    assert client.read_frame() == (0, b"OK")
    published = time.monotonic()
    client.send(dpub(topic, 4000, b"later"))
    assert client.read_frame() == (0, b"OK")
    client.close()
    for _ in range(10):
        ftype, data = consumer.read_frame()
        assert ftype == 2 and data[26:].startswith(b"now-")
        consumer.send(b"FIN " + data[10:26] + b"\n")
    others = [i for i in range(3) if i != leader]
    for i in others:  # offset 10 is deferred: done for the cursor, held by the store
        cluster.wait_for(lambda i=i: confirmed(cluster, i, topic, "c") == 11, 10, f"cursor on {i}")  # type: ignore[misc]
        cluster.wait_for(lambda i=i: deferred(cluster, i, topic, "c") == 1, 10, f"store on {i}")  # type: ignore[misc]
    assert confirmed(cluster, leader, topic, "c") == 11, "the leader counts it as done"
    consumer.close()

    new = kill_the_leader(cluster, topic, leader)
    got = consume(cluster.nodes[new].ports["TCP"], topic, "c", 1, timeout=15)
    assert got == [b"later"], "delivered by the new leader"
    assert time.monotonic() - published >= 3.5, "at its time, not before"


def test_a_leader_back_before_its_lease_expired_leads_in_a_new_epoch(
    own_cluster: OwnCluster,
) -> None:
    """A leader SIGKILLed and restarted within its lease (10 s here) is still the leader in
    etcd: it takes the lead again only in a new epoch (a guarded txn of its own), as it may
    have lost, in a power loss, records its followers hold of the old one; they cut those
    by epoch. Publishing goes on."""
    cluster = own_cluster(lease_ttl="10s")
    topic = "comeback"
    leader = three_replicas(cluster, topic)
    before = cluster.partitions(topic)[0]
    client = wire(cluster, leader)
    client.send(mpub(topic, [b"before"] * 10))
    assert client.read_frame() == (0, b"OK")
    client.close()
    cluster.restart_nsqd(leader)  # SIGKILL, then at once again
    cluster.wait_for(
        lambda: cluster.partitions(topic)[0]["leader_epoch"] == before["leader_epoch"] + 1,
        15,
        "a new leader epoch",
    )
    after = cluster.partitions(topic)[0]
    assert after["id"] == before["id"], "the same leader, in a new epoch"
    cluster.wait_for(  # (the log lines reach the test through a reader thread)
        lambda: any("leading again, in a new epoch" in line
                    for line in list(cluster.nodes[leader].log_lines)),
        10,
        "the node's reason",
    )  # fmt: skip
    client = wire(cluster, leader)

    def taken() -> bool:
        client.send(mpub(topic, [b"after"] * 10))
        return client.read_frame() == (0, b"OK")

    cluster.wait_for(taken, 15, "writes taken again")
    client.close()


def test_a_replica_that_stays_dead_is_made_again_on_another_node(
    own_cluster: OwnCluster,
) -> None:
    """Two replicas on three nodes; the follower is SIGKILLed and stays dead. A publish
    taken just before the coordinator sees it dead waits: only the leader has it, and one
    of two replicas is not a majority. Once the ISR is the leader alone, writes are refused
    (``E_FAILED_ON_NOT_WRITABLE``); after the repair delay (the short one: at most half
    the replicas live) the coordinator puts the third node in its place, which copies the
    log and joins the ISR: the waiting publish is answered OK and writes go on. Every
    acknowledged message is there."""
    cluster = own_cluster(lookupd_flags=["--replica-repair-delay=3s"])
    topic = "repaired"
    assert create(cluster, topic, partition_num=1, replicator=2) == (200, None)
    cluster.wait_for(lambda: len(cluster.partitions(topic)[0]["isr"]) == 2, 15, "two in the ISR")
    info = cluster.partitions(topic)[0]
    leader = cluster.node_index(info["id"])
    (follower,) = [cluster.node_index(n) for n in info["isr"] if n != info["id"]]
    (third,) = {0, 1, 2} - {leader, follower}
    client = wire(cluster, leader)
    acked = [f"before-{i}".encode() for i in range(100)]
    client.send(mpub(topic, acked))
    assert client.read_frame() == (0, b"OK")

    cluster.kill_nsqd(follower)
    waiting = wire(cluster, leader)
    waiting.sock.settimeout(60)
    waiting.send(mpub(topic, [b"waiting"]))  # taken while the ISR still names the follower
    cluster.wait_for(lambda: len(cluster.partitions(topic)[0]["isr"]) == 1, 15, "ISR shrunk")
    assert waiting.frame_within(0.5) is None, "not acknowledged while only the leader has it"
    answers: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    n = 0
    while time.monotonic() < deadline:  # until writes go on with the third node
        body = f"during-{n}".encode()
        n += 1
        client.send(mpub(topic, [body]))
        answer = client.read_frame()
        answers.append(answer)
        if answer == (0, b"OK"):
            acked.append(body)
            break
        time.sleep(0.1)
    assert answers[-1] == (0, b"OK"), "writes went on"
    assert set(answers[:-1]) == {(1, b"E_FAILED_ON_NOT_WRITABLE")}, "refused meanwhile"
    assert waiting.read_frame() == (0, b"OK"), "answered once a second replica had it"
    waiting.close()
    acked.insert(100, b"waiting")
    # (the leader took writes on its own watch's ISR; lookupd 0's view follows its own)
    cluster.wait_for(
        lambda: (
            sorted(cluster.node_index(n) for n in cluster.partitions(topic)[0]["isr"])
            == sorted([leader, third])
        ),
        10,
        "the third node in the ISR lookupd 0 shows",
    )
    client.close()
    end = stats_partitions(cluster, leader, topic)[0]["high_watermark"]
    cluster.wait_for(
        lambda: stats_partitions(cluster, third, topic)[0]["high_watermark"] == end, 10, "a copy"
    )
    got = consume(cluster.nodes[leader].ports["TCP"], topic, "all", len(acked), rdy=100)
    assert got == acked


def test_an_ordered_channel_resumes_exactly_after_the_last_finished_message(
    own_cluster: OwnCluster,
) -> None:
    """An ordered topic of three replicas: the leader delivers the next message of an
    ordered channel only once every ISR follower has the cursor that finished the previous
    one (CURSORS at once, CURSORS_ACK). So when it is SIGKILLed right after handing out
    message 20, the new leader starts again at message 20, never at one already
    finished."""
    cluster = own_cluster()
    topic = "ordered_cursor"
    assert create(cluster, topic, partition_num=1, replicator=3, orderedmulti="true") == (
        200,
        None,
    )
    cluster.wait_for(lambda: len(cluster.partitions(topic)[0]["isr"]) == 3, 15, "full ISR")
    leader = leaders(cluster, topic)[0]
    sent = [f"o{i:03d}".encode() for i in range(40)]
    client = wire(cluster, leader)
    client.send(mpub(topic, sent))
    assert client.read_frame() == (0, b"OK")
    client.close()
    consumer = WireClient(cluster.nodes[leader].ports["TCP"])
    consumer.send(b"  V2" + f"SUB {topic} c\n".encode())
    assert consumer.read_frame() == (0, b"OK")
    consumer.send(b"RDY 10\n")
    for i in range(21):  # one at a time: 0..19 finished, 20 handed out
        ftype, data = consumer.read_frame()
        assert ftype == 2 and data[26:] == sent[i]
        if i < 20:
            consumer.send(b"FIN " + data[10:26] + b"\n")
    new = kill_the_leader(cluster, topic, leader)
    consumer.close()
    rest = consume(cluster.nodes[new].ports["TCP"], topic, "c", 20, rdy=10)
    assert rest == sent[20:], "no finished message again, nothing skipped, in order"
