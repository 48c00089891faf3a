"""The replication link over real loopback sockets: LeaderFeed serving FollowerFetch
instances, real PartitionLogs on both ends (nsqpy.cluster.replica_leader/_follower)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence

import pytest

from nsqpy.cluster.replica_follower import FollowerFetch
from nsqpy.cluster.replica_leader import LeaderFeed
from nsqpy.cluster.replica_mux import MuxPool
from nsqpy.cluster.replica_state import ReplicaState
from nsqpy.protocol.replication import (
    E_STALE_EPOCH,
    MAGIC,
    Append,
    Buffer,
    ChannelCursor,
    Cursors,
    ErrorFrame,
    Hello,
    ReplicationReader,
    encode_ack,
    encode_hello,
)
from nsqpy.storage import log as storage_log
from nsqpy.storage.log import PartitionLog
from nsqpy.storage.policy import SyncPolicy
from nsqpy.testing.polling import eventually

from .conftest import CLUSTER, TOPIC, Cluster, assert_same, contents, lead


def converged(leader_end: int, *followers: FollowerFetch) -> Callable[[], bool]:
    def check() -> bool:
        return all(f.plog.flushed_offset == leader_end for f in followers)

    return check


async def two_followers(
    cluster: Cluster, batches: int
) -> tuple[PartitionLog, LeaderFeed, FollowerFetch, FollowerFetch]:
    """A leader's log of ``batches`` batches, its feed with the defaults, and followers F1
    and F2 (the ISR with it), dialled."""
    leader = cluster.leader_log(epoch=1)
    lead(leader, 1, batches)
    feed = await cluster.start_feed()
    cluster.set_isr(0, ["L", "F1", "F2"])
    f1 = cluster.follower(cluster.log("f1"), "F1")
    f2 = cluster.follower(cluster.log("f2"), "F2")
    return leader, feed, f1, f2


async def test_catch_up_several_epochs_and_segments(cluster: Cluster) -> None:
    leader = cluster.leader_log(epoch=4)
    lead(leader, 1, 30)
    lead(leader, 2, 25)
    lead(leader, 4, 30)
    assert len(list(leader.directory.glob("*.log"))) > 3
    await cluster.start_feed(window=32 << 10, chunk=8 << 10)
    cluster.set_isr(0, ["L", "F1"])
    mine = cluster.log("f1")
    f = cluster.follower(mine)
    await eventually(converged(leader.high_watermark, f), 10, what="follower caught up")
    assert_same(leader, mine)
    assert len(list(mine.directory.glob("*.log"))) > 3
    await eventually(lambda: cluster.states[0].committed == leader.high_watermark, 5)
    assert cluster.progress[-1] == (TOPIC, 0, leader.high_watermark)
    await eventually(lambda: f.committed_offset == leader.high_watermark, 5)
    assert f.readable_offset == leader.high_watermark


async def test_live_appends_and_committed_is_the_min(cluster: Cluster) -> None:
    leader, feed, f1, f2 = await two_followers(cluster, 3)
    await eventually(converged(leader.high_watermark, f1, f2), 5)
    await eventually(lambda: cluster.states[0].committed == leader.high_watermark, 5)
    for _ in range(5):
        leader.append_bodies([b"x" * 200] * 50)
        leader.flush()
        feed.notify(TOPIC, 0)
        end = leader.high_watermark
        await eventually(converged(end, f1, f2), 2, what="live append replicated")
        await eventually(lambda: cluster.states[0].committed == end, 2)  # noqa: B023
    assert cluster.states[0].holds(["L", "F1", "F2"]) == leader.high_watermark
    # one follower gone: committed is held at what it acked
    held = leader.high_watermark
    await f2.stop()
    leader.append_bodies([b"y" * 200] * 50)
    leader.flush()
    feed.notify(TOPIC, 0)
    await eventually(converged(leader.high_watermark, f1), 2)
    await eventually(lambda: cluster.states[0].peers["F1"].end == leader.high_watermark, 2)
    assert cluster.states[0].holds(["L", "F1", "F2"]) == held
    assert cluster.states[0].holds(["L", "F1"]) == leader.high_watermark
    assert cluster.states[0].committed == held
    # the ISR shrinks (the coordinator's move): the next ACK or flush moves committed on
    cluster.set_isr(0, ["L", "F1"])
    feed.notify(TOPIC, 0)
    assert cluster.states[0].committed == leader.high_watermark
    await eventually(lambda: f1.committed_offset == leader.high_watermark, 2)


async def test_divergent_tail_is_truncated(cluster: Cluster) -> None:
    leader = cluster.leader_log(epoch=3)
    lead(leader, 1, 10)
    mine = cluster.log("f1")
    while (raw := leader.read_raw(mine.high_watermark)).count:  # epoch 1, as replicated
        mine.append_raw(raw.data, raw.offset)
        mine.flush()
    lead(mine, 2, 5)  # an epoch this node led that the leader never had
    lead(leader, 3, 12)
    assert mine.epochs()[-1][0] == 2
    await cluster.start_feed()
    f = cluster.follower(mine)
    await eventually(converged(leader.high_watermark, f), 5)
    assert_same(leader, mine)
    assert 2 not in dict(mine.epochs())


async def test_link_killed_mid_stream(cluster: Cluster) -> None:
    leader = cluster.leader_log(epoch=2)
    lead(leader, 1, 40, per_batch=40)
    lead(leader, 2, 40, per_batch=40)
    feed = await cluster.start_feed(window=16 << 10, chunk=4 << 10)
    mine = cluster.log("f1")
    f = cluster.follower(mine, backoff=0.01)
    await eventually(lambda: mine.flushed_offset > 0, 5)
    assert feed.disconnect(TOPIC, 0) == 1
    await eventually(lambda: f.sessions >= 2, 5, what="the follower reconnected")
    await eventually(converged(leader.high_watermark, f), 10)
    assert_same(leader, mine)
    offsets = [o for o, _, _ in contents(mine)]
    assert offsets == list(range(leader.high_watermark))  # no duplicate, no gap


async def test_garbage_is_closed_and_others_are_served(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    leader = cluster.leader_log(epoch=1)
    lead(leader, 1, 5)
    await cluster.start_feed()
    host, port = cluster.address.rsplit(":", 1)
    caplog.set_level(logging.INFO, logger="nsqpy.cluster.replica")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET / HTTP/1.1\r\n\r\n")
    async with asyncio.timeout(5):
        answer = await reader.read()  # the leader answers ERROR and closes
    writer.close()
    await writer.wait_closed()
    frames = ReplicationReader()
    frames.feed(answer)
    (error,) = frames.frames()
    assert isinstance(error, ErrorFrame) and error.code == "E_BAD_MAGIC"
    lines = [r for r in caplog.records if "broke the protocol" in r.getMessage()]
    assert len(lines) == 1
    f = cluster.follower(cluster.log("f1"))
    await eventually(converged(leader.high_watermark, f), 5)


async def test_stale_epoch_hello(cluster: Cluster) -> None:
    leader = cluster.leader_log(epoch=5)
    lead(leader, 5, 3)
    await cluster.start_feed()
    host, port = cluster.address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(MAGIC + encode_hello("F9", CLUSTER, TOPIC, 0, 3))
    async with asyncio.timeout(5):
        answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    frames = ReplicationReader()
    frames.feed(answer)
    (error,) = frames.frames()
    assert isinstance(error, ErrorFrame)
    assert (error.code, error.leader_epoch) == (E_STALE_EPOCH, 5)
    # a FollowerFetch parks on it until it is given the new epoch
    f = cluster.follower(cluster.log("f1"), epoch=3)
    await eventually(lambda: f.leader_epoch_seen == 5 and f.state == "waiting", 5)
    f.set_leader(cluster.address, 5)
    await eventually(converged(leader.high_watermark, f), 5)


async def test_hello_is_answered_and_lagging_is_reported(cluster: Cluster) -> None:
    leader = cluster.leader_log(epoch=1)
    lead(leader, 1, 2)
    await cluster.start_feed(timeout=0.3, heartbeat_interval=0.05)
    cluster.set_isr(0, ["L", "F1", "GONE"])
    host, port = cluster.address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(MAGIC + encode_hello("F1", CLUSTER, TOPIC, 0, 1))
    frames = ReplicationReader()
    async with asyncio.timeout(5):
        frames.feed(await reader.readexactly(4 + 4 + 1 + 2 * 3 + 2 + len(CLUSTER) + 1 + 2 + 4))
    assert next(frames.frames()) == Hello("L", CLUSTER, TOPIC, 0, 1)
    writer.close()
    await writer.wait_closed()
    f = cluster.follower(cluster.log("f1"), "F1")
    await eventually(converged(leader.high_watermark, f), 5)
    await eventually(lambda: cluster.states[0].lagging(cluster.isr()) == ["GONE"], 5)
    await f.stop()
    await eventually(lambda: cluster.states[0].lagging(cluster.isr()) == ["F1", "GONE"], 5)


async def test_syncdisk_always_commits_durable_ends(cluster: Cluster) -> None:
    always = SyncPolicy(always=True)
    leader = cluster.leader_log(epoch=1, sync=always)
    lead(leader, 1, 4)
    feed = await cluster.start_feed()
    cluster.set_isr(0, ["L", "F1"])
    mine = cluster.log("f1", always)
    f = cluster.follower(mine)
    await eventually(converged(leader.high_watermark, f), 5)
    await eventually(lambda: mine.durable_offset == leader.high_watermark, 5)
    await eventually(lambda: cluster.states[0].peers["F1"].durable == mine.durable_offset, 5)
    assert cluster.states[0].committed == 0  # the leader has not fsynced yet
    leader.sync()
    feed.notify(TOPIC, 0)
    assert cluster.states[0].committed == leader.high_watermark


async def cursor_feed(
    cluster: Cluster, state: list[ChannelCursor]
) -> tuple[LeaderFeed, list[tuple[str, int]]]:
    """A feed whose partitions' cursors are ``state`` as it is when asked, due every 60 s
    unless changed and asked at once; with the (topic, partition) of each CURSORS_ACK."""
    acked: list[tuple[str, int]] = []
    feed = await cluster.start_feed(
        cursors=lambda t, p: list(state),
        cursor_interval=60.0,
        on_cursors_acked=lambda t, p: acked.append((t, p)),
    )
    return feed, acked


async def link_turn(leader: PartitionLog, feed: LeaderFeed, f: FollowerFetch) -> None:
    """One more turn of the link's send loop, seen through: a batch it carries (the
    cursors, when it sends them, go in the same turn, and reach the follower with it)."""
    lead(leader, 1, 1)
    feed.notify(TOPIC, 0)
    await eventually(converged(leader.high_watermark, f), 5, what="the turn's batch")


async def test_cursors_go_every_interval_when_changed_and_at_once_when_asked(
    cluster: Cluster,
) -> None:
    """CURSORS carry the owner's cursors (and delayed-store entries) to a follower when they
    changed, no more often than ``cursor_interval``; ``cursors_now`` (an ordered channel's
    FIN) sends them at once."""
    leader = cluster.leader_log(epoch=1)
    lead(leader, 1, 2)
    state = [ChannelCursor("c", 5, 0, (), ((7, 123, 1),))]
    feed, acked = await cursor_feed(cluster, state)
    got: list[Cursors] = []
    f = cluster.follower(cluster.log("f1"), on_cursors=got.append)
    await eventually(lambda: len(got) == 1, 5, what="the first CURSORS")
    assert got[0].channels == tuple(state) and got[0].full and got[0].seq == 1
    await eventually(lambda: acked == [(TOPIC, 0)], 5, what="CURSORS_ACK")
    assert feed.replicated_confirmed(TOPIC, 0, "c", ["F1"]) == 5
    assert feed.replicated_confirmed(TOPIC, 0, "c", ["F1", "F2"]) == -1, "F2 has none"
    assert feed.replicated_confirmed(TOPIC, 0, "other", ["F1"]) == -1
    await eventually(converged(leader.high_watermark, f), 5)

    async def turn() -> None:
        await link_turn(leader, feed, f)

    state[0] = ChannelCursor("c", 9)
    await turn()
    assert len(got) == 1, "a change waits for the interval"
    feed.cursors_now("other-topic")
    await turn()
    assert len(got) == 1, "another topic's ordered channel sends nothing here"
    feed.cursors_now(TOPIC, 1)
    await turn()
    assert len(got) == 1, "nor a FIN in another partition of the topic"
    assert feed.replicated_confirmed(TOPIC, 0, "c", ["F1"]) == 5, "not sent yet"
    feed.cursors_now(TOPIC, 0)
    await eventually(lambda: len(got) == 2, 2, what="CURSORS at once")
    assert got[1].channels == (ChannelCursor("c", 9),) and got[1].seq == 2
    await eventually(lambda: feed.replicated_confirmed(TOPIC, 0, "c", ["F1"]) == 9, 2)
    feed.cursors_now(TOPIC)
    await turn()
    assert len(got) == 2, "nothing changed: nothing sent"
    cluster.advance(60.0)  # the interval passed (the injected clock): a change goes
    state[0] = ChannelCursor("c", 11)
    await turn()
    assert len(got) == 3 and got[2].channels == (ChannelCursor("c", 11),)


async def test_cursors_a_follower_could_not_store_are_not_acknowledged_and_come_again(
    cluster: Cluster,
) -> None:
    """A follower that could not store a CURSORS (its sink says False: a storage failure)
    sends no CURSORS_ACK: the leader counts none of it taken, its next CURSORS names those
    channels again though only another one changed, and with nothing changed at all they
    go again once the last waited ``cursor_interval`` unacknowledged (an ordered channel
    waiting for its own cursor must not wait for ever)."""
    leader = cluster.leader_log(epoch=1)
    lead(leader, 1, 2)
    state = [ChannelCursor("a", 5), ChannelCursor("b", 3)]
    feed, acked = await cursor_feed(cluster, state)
    got: list[Cursors] = []
    stored = [True]

    def sink(frame: Cursors) -> bool:
        got.append(frame)
        return stored[0]

    f = cluster.follower(cluster.log("f1"), on_cursors=sink)
    await eventually(lambda: acked == [(TOPIC, 0)], 5, what="the first CURSORS acknowledged")
    await eventually(converged(leader.high_watermark, f), 5)
    stored[0] = False  # (the next cannot be stored)
    state[0] = ChannelCursor("a", 9)
    feed.cursors_now(TOPIC, 0)
    await eventually(lambda: len(got) == 2, 2, what="the second CURSORS")
    assert (got[1].full, got[1].channels) == (False, (ChannelCursor("a", 9),))

    async def turn() -> None:  # (an ACK would have come with its batch)
        await link_turn(leader, feed, f)

    await turn()
    assert feed.replicated_confirmed(TOPIC, 0, "a", ["F1"]) == 5, "counted though not stored"
    state[1] = ChannelCursor("b", 4)
    feed.cursors_now(TOPIC, 0)
    await eventually(lambda: len(got) == 3, 2, what="the third CURSORS")
    assert got[2].channels == (ChannelCursor("a", 9), ChannelCursor("b", 4)), "a named again"
    stored[0] = True  # (the disk is fine again; nothing changes any more)
    await turn()
    assert len(got) == 3 and feed.replicated_confirmed(TOPIC, 0, "a", ["F1"]) == 5
    cluster.advance(60.0)  # (the injected clock: the last CURSORS waited the interval)
    await turn()
    await eventually(lambda: len(got) == 4, 2, what="the last CURSORS again")
    assert got[3].channels == got[2].channels and got[3].seq == got[2].seq + 1
    await eventually(lambda: feed.replicated_confirmed(TOPIC, 0, "a", ["F1"]) == 9, 2)


async def test_unchanged_cursors_are_looked_at_only_with_the_heartbeat(cluster: Cluster) -> None:
    """An idle link wakes once per ``heartbeat_interval`` (0.5 s), not every
    ``cursor_interval`` (0.05 s), while the channels' cursors stay the same; cursors that
    move are looked at every ``cursor_interval``. Counted over 1.5 s (the injected clock
    kept with the loop's)."""
    leader = cluster.leader_log(epoch=1)
    lead(leader, 1, 2)
    looks = [0]
    moving = [False]

    def cursors(topic: str, partition: int) -> list[ChannelCursor]:
        looks[0] += 1
        return [ChannelCursor("c", looks[0] if moving[0] else 1)]

    await cluster.start_feed(cursors=cursors, cursor_interval=0.05, heartbeat_interval=0.5)
    f = cluster.follower(cluster.log("f1"))
    await eventually(converged(leader.high_watermark, f), 5)

    async def count(seconds: float) -> int:
        start, loop = looks[0], asyncio.get_running_loop()
        until, last = loop.time() + seconds, loop.time()
        while (now := loop.time()) < until:
            cluster.advance(now - last)
            last = now
            await asyncio.sleep(0.01)
        return looks[0] - start

    still = await count(1.5)
    moving[0] = True
    moved = await count(1.5)
    assert still <= 6, f"unchanged cursors looked at {still} times in 1.5 s"
    assert moved >= 12, f"moving cursors looked at {moved} times in 1.5 s"


async def test_an_idle_link_stays_up_however_often_the_owner_wakes_it(cluster: Cluster) -> None:
    """Nothing new to send while the owner pokes the feed every 50 ms (nsqd's flush
    ticker calls ``notify`` with no new records): heartbeats still go out every
    ``heartbeat_interval``, so the follower's read never times out. On the injected clock:
    100 wakes 50 ms apart, 5 s, and the follower is still heard within the last interval
    (it answers each heartbeat)."""
    leader = cluster.leader_log(epoch=1)
    lead(leader, 1, 2)
    feed = await cluster.start_feed(heartbeat_interval=0.5, timeout=2.0)
    cluster.set_isr(0, ["L", "F1"])
    f = cluster.follower(cluster.log("f1"), timeout=2.0)
    await eventually(converged(leader.high_watermark, f), 5)
    peer = cluster.states[0].peers["F1"]
    for _ in range(100):
        cluster.advance(0.05)
        feed.notify(TOPIC, 0)
        for _ in range(5):
            await asyncio.sleep(0)  # (the send loop's turn, the follower's answer)
    end = cluster.clock()
    await eventually(lambda: peer.last_heard >= end - 0.5, 5, what="heartbeats answered")
    assert f.sessions == 1, "the link was never dropped for silence"


async def in_sync_follower(
    cluster: Cluster, timeout: float
) -> tuple[PartitionLog, LeaderFeed, PartitionLog, FollowerFetch]:
    """A leader log of two batches, its feed (``timeout``, quick heartbeats), ISR L and F1,
    and follower F1 (quick redials) once it has everything."""
    leader = cluster.leader_log(epoch=1)
    lead(leader, 1, 2)
    feed = await cluster.start_feed(timeout=timeout, heartbeat_interval=0.05)
    cluster.set_isr(0, ["L", "F1"])
    mine = cluster.log("f1")
    f = cluster.follower(mine, backoff=0.01, max_backoff=0.05)
    await eventually(converged(leader.high_watermark, f), 5)
    return leader, feed, mine, f


async def test_a_follower_failing_every_write_is_reported_lagging_across_its_redials(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower whose disk is full fails each APPEND, drops the link and dials again (and
    ACKs its unchanged end after each dial). Its redials must not make it look fresh: the
    leader reports it lagging after ``timeout``; once it can write again it catches up and
    the report goes."""
    leader, feed, mine, f = await in_sync_follower(cluster, timeout=0.5)

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mine, "append_raw", full)
    lead(leader, 1, 2)
    feed.notify(TOPIC, 0)
    sessions = f.sessions
    await eventually(lambda: f.sessions >= sessions + 3, 5, what="it dialled again, several times")
    await eventually(lambda: cluster.states[0].lagging(cluster.isr()) == ["F1"], 5)
    monkeypatch.undo()
    await eventually(converged(leader.high_watermark, f), 5)
    await eventually(lambda: cluster.states[0].lagging(cluster.isr()) == [], 5)
    assert_same(leader, mine)


async def test_a_follower_that_has_everything_when_it_dials_again_is_not_lagging(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower wrote an APPEND but its link dropped before the ACK went out; it dials
    again and FETCHes from the leader's end. The leader's un-acked clock survives redials
    (the test above), but nothing waits for this follower: its first ACK in the new session
    (of its unchanged end, with nothing in flight) stops the clock, and with no new data it
    must not turn lagging."""
    leader, feed, _mine, f = await in_sync_follower(cluster, timeout=0.3)
    real = encode_ack
    dropped: list[int] = []

    def lost(*args: int) -> bytes:
        if not dropped:
            dropped.append(1)
            raise OSError("the link dropped before the ACK went out")
        return real(*args)

    monkeypatch.setattr("nsqpy.cluster.replica_state.encode_ack", lost)
    sessions = f.sessions
    lead(leader, 1, 1)
    feed.notify(TOPIC, 0)
    await eventually(lambda: dropped and f.sessions > sessions, 5, what="it dialled again")
    await eventually(converged(leader.high_watermark, f), 5)

    def all_acked() -> bool:
        link = cluster.states[0].peers["F1"].link
        return link is not None and not link.inflight

    await eventually(all_acked, 5, what="everything sent acknowledged")
    cluster.advance(0.6)  # twice the timeout (the injected clock), with nothing new to send
    now = cluster.clock()
    feed.notify(TOPIC, 0)  # (a heartbeat is due: the follower answers it)
    await eventually(lambda: cluster.states[0].peers["F1"].last_heard >= now, 5)
    assert cluster.states[0].lagging(cluster.isr()) == []


async def test_a_follower_acknowledges_what_it_wrote_before_its_scheduled_fsync(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower whose log is due an fsync (its schedule: here after every message) sends
    the ACK of what it wrote first: the leader commits while the fsync is still running,
    and the durable end follows in another ACK once it is done. (Under ``always`` the
    commit waits for it: test_sync_always.)"""
    import threading

    from nsqpy.storage import log as log_module

    release = threading.Event()
    real = log_module.fsync_segment

    def held(fd: int) -> None:
        release.wait(10)
        real(fd)

    leader = cluster.leader_log(epoch=1)
    feed = await cluster.start_feed()
    cluster.set_isr(0, ["L", "F1"])
    mine = cluster.log("f1", SyncPolicy(every_messages=1, every_ms=0))
    f = cluster.follower(mine)
    await eventually(lambda: f.state == "streaming", 5)
    monkeypatch.setattr(log_module, "fsync_segment", held)
    try:
        leader.append_bodies([b"x" * 100] * 20)
        leader.flush()
        feed.notify(TOPIC, 0)
        end = leader.high_watermark
        await eventually(lambda: cluster.states[0].committed == end, 3, what="committed")
        assert mine.durable_offset < end, "the fsync is still held"
    finally:
        release.set()
    await eventually(lambda: cluster.states[0].peers["F1"].durable == end, 5, what="durable")


@pytest.mark.parametrize("at_once", [True, False], ids=["cursors_now", "the_links_turn"])
async def test_cursors_never_go_before_the_commit_they_cover(
    cluster: Cluster, at_once: bool
) -> None:
    """A channel's cursor moves to the offset just committed (a FIN of the message that
    commit let out, before the link told the follower of it): the APPEND carrying that
    commit goes first on the wire (a follower caps a cursor at what it knows committed),
    whether ``cursors_now`` sends the CURSORS right away (an ordered channel) or the
    link's send loop does on its turn (every ``cursor_interval``, here every turn)."""
    leader = cluster.leader_log(epoch=1)
    lead(leader, 1, 1)
    state = cluster.states[0]
    cluster.set_isr(0, ["L", "F1"])
    cursor = [ChannelCursor("c", 0)]
    interval = 60.0 if at_once else 0.0
    feed = await cluster.start_feed(cursors=lambda t, p: list(cursor), cursor_interval=interval)
    moved = state.on_change
    assert moved is not None
    inline: list[int] = []  # cursors sent by cursors_now, from inside the commit's ACK

    def on_change(s: ReplicaState) -> None:
        moved(s)
        if s.committed > cursor[0].confirmed:  # the FIN of the last message let out
            cursor[0] = ChannelCursor("c", s.committed)
            if at_once:
                feed.cursors_now(TOPIC, 0)
                inline.append(s.committed)

    state.on_change = on_change
    wire = ReplicationReader(expect_magic=False)
    got: list[Cursors] = []
    f = cluster.follower(cluster.log("f1"), on_cursors=got.append)
    await eventually(lambda: feed._conns.get((TOPIC, 0)), 5, what="the link")
    (conn,) = feed._conns[(TOPIC, 0)].values()
    link = conn.link

    def recording(send: Callable[[Sequence[Buffer]], None]) -> Callable[[Sequence[Buffer]], None]:
        def record(bufs: Sequence[Buffer]) -> None:
            for buf in bufs:  # (the wire's order is the calls': ``send`` writes what
                wire.feed(buf)  # ``send_soon`` left waiting first)
            send(bufs)

        return record

    link.send = recording(link.send)  # type: ignore[method-assign,assignment]
    link.send_soon = recording(link.send_soon)  # type: ignore[method-assign,assignment]
    for _ in range(3):
        lead(leader, 1, 1)
        feed.notify(TOPIC, 0)
        end = leader.flushed_offset

        def sent(e: int = end) -> bool:
            return bool(got) and got[-1].channels[0].confirmed == e

        await eventually(sent, 5, what="the CURSORS of the commit")
    assert len(inline) >= (3 if at_once else 0) and f.committed_offset == leader.flushed_offset
    told = 0  # the commit the follower was sent
    cursors = 0
    for frame in wire.frames():
        if isinstance(frame, Append):
            told = max(told, frame.committed_offset)
        elif isinstance(frame, Cursors):
            cursors += 1
            assert frame.channels[0].confirmed <= told, "a cursor before its commit"
    assert cursors >= 3


async def test_a_commit_rides_on_the_next_records_and_goes_alone_once_its_linger_is_up(
    cluster: Cluster,
) -> None:
    """A committed offset that moved with nothing new to send waits ``commit_linger`` for
    an APPEND of records to carry it: publishes that keep coming cost the follower one
    frame each, not two. With nothing more published it goes alone once the linger is up
    (0.2 s here); the follower learns every commit either way."""
    leader = cluster.leader_log(epoch=1)
    lead(leader, 1, 1)
    feed = await cluster.start_feed(commit_linger=0.2)
    cluster.set_isr(0, ["L", "F1"])
    f = cluster.follower(cluster.log("f1"))
    await eventually(lambda: f.committed_offset == leader.high_watermark, 5, what="caught up")
    (conn,) = feed._conns[(TOPIC, 0)].values()
    appends: list[Append] = []
    wire = ReplicationReader(expect_magic=False)
    send = conn.link.send

    def recording(bufs: Sequence[Buffer]) -> None:
        for buf in bufs:
            wire.feed(buf)
        appends.extend(a for a in wire.frames() if isinstance(a, Append))
        send(bufs)

    conn.link.send = recording  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    for _ in range(5):  # each publish after the last one's commit, within the linger
        lead(leader, 1, 1)
        feed.notify(TOPIC, 0)
        end = leader.flushed_offset
        await eventually(lambda: cluster.states[0].committed == end, 2)  # noqa: B023
    committed_at = loop.time()
    assert [a.count for a in appends] == [10] * 5, "no APPEND of the commit alone yet"
    assert [a.committed_offset for a in appends[1:]] == [a.start_offset for a in appends[1:]]
    assert f.committed_offset == end - 10, "the last commit waits for records to carry it"
    await eventually(lambda: f.committed_offset == end, 2, what="the commit alone")
    waited = loop.time() - committed_at
    assert appends[-1].count == 0 and appends[-1].committed_offset == end
    assert waited >= 0.1, f"it went {waited:.3f} s after the commit, its linger 0.2 s"


async def test_under_sync_always_what_came_during_an_fsync_is_acknowledged_after_its_own(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A multiplexed follower under ``--sync-always`` takes the APPENDs that arrive while
    an fsync runs in a thread, but the ACK after that fsync names no end beyond what it
    made durable: a follower whose next fsync stalls must look un-acked to the leader (and
    so lag), not caught up with nothing committed."""
    always = SyncPolicy(always=True)
    leader = cluster.leader_log(epoch=1, sync=always)
    lead(leader, 1, 1)
    leader.sync()
    feed = await cluster.start_feed()
    cluster.set_isr(0, ["L", "F1"])
    mine = cluster.log("f1", always)
    pool = MuxPool()
    turns = threading.Semaphore(0)  # each fsync waits for one
    try:
        cluster.follower(mine, pool=pool)
        await eventually(lambda: cluster.states[0].committed == leader.high_watermark, 5)
        real_fsync, loop_thread = storage_log.fsync_segment, threading.current_thread()

        def stalled(fd: int) -> None:  # (the follower's, in a worker thread: once it
            if threading.current_thread() is not loop_thread:  # knows what it covers)
                turns.acquire(timeout=10)
            real_fsync(fd)

        monkeypatch.setattr(storage_log, "fsync_segment", stalled)
        ends = []
        for _ in range(2):  # A, whose fsync waits; then B, taken during it
            lead(leader, 1, 1)
            leader.sync()
            feed.notify(TOPIC, 0)
            ends.append(leader.high_watermark)
            await eventually(lambda: mine.flushed_offset == ends[-1], 5)
        turns.release()  # A's fsync goes; B's will stall
        peer = cluster.states[0].peers["F1"]
        await eventually(lambda: peer.durable == ends[0], 5, what="A durable, acknowledged")
        await asyncio.sleep(0.2)
        assert (peer.end, peer.durable) == (ends[0], ends[0]), "B is not durable yet"
        turns.release()
        await eventually(lambda: cluster.states[0].committed == ends[1], 5, what="B committed")
    finally:
        for _ in range(4):
            turns.release()
        await pool.close()


async def test_by_default_every_follower_is_told_a_commit_in_the_turn_that_made_it(
    cluster: Cluster,
) -> None:
    """With the feed's defaults a commit goes to every follower in the same turn of the
    event loop as the ACK that made it, even with no record to carry it: a follower
    promoted by a failover shows readers only what it was told is committed, so a commit
    held back (``commit_linger``) would leave acknowledged messages unreadable there."""
    leader, feed, f1, f2 = await two_followers(cluster, 1)
    end = leader.high_watermark
    await eventually(lambda: f1.committed_offset == f2.committed_offset == end, 5)
    told: dict[str, int] = {}

    def recording(
        node: str, send: Callable[[Sequence[Buffer]], None]
    ) -> Callable[[Sequence[Buffer]], None]:
        wire = ReplicationReader(expect_magic=False)

        def record(bufs: Sequence[Buffer]) -> None:
            for buf in bufs:
                wire.feed(buf)
            for frame in wire.frames():
                if isinstance(frame, Append):
                    told[node] = max(told.get(node, 0), frame.committed_offset)
            send(bufs)

        return record

    for conn in feed._conns[(TOPIC, 0)].values():
        conn.link.send = recording(conn.peer.node_id, conn.link.send)  # type: ignore[method-assign,assignment]
    loop = asyncio.get_running_loop()
    state = cluster.states[0]
    moved = state.on_change
    seen: list[dict[str, int]] = []

    def look(commit: int) -> None:
        seen.append(told | {"commit": commit})

    def on_change(s: ReplicaState) -> None:
        if moved is not None:
            moved(s)
        if s.committed > end:  # (what was sent by the end of this turn)
            loop.call_soon(look, s.committed)

    state.on_change = on_change
    lead(leader, 1, 1)
    feed.notify(TOPIC, 0)
    await eventually(lambda: bool(seen), 5, what="the commit")
    commit = seen[0]["commit"]
    assert seen[0] == {"F1": commit, "F2": commit, "commit": commit}


async def test_a_leader_reads_a_flush_from_memory_until_every_follower_has_it(
    cluster: Cluster, preads: list[int]
) -> None:
    """A replicated partition's leader (``keep_tail``) sends its followers what a flush
    wrote without reading its log back, and lets those bytes go once both have them."""
    leader, feed, f1, f2 = await two_followers(cluster, 2)
    await eventually(converged(leader.high_watermark, f1, f2), 5)
    assert leader.keep_tail
    reads = preads
    reads.clear()
    start = leader.high_watermark
    leader.append_bodies([b"x" * 200] * 50)
    leader.flush()
    feed.notify(TOPIC, 0)
    await eventually(converged(leader.high_watermark, f1, f2), 5)
    assert reads == [], "the followers' APPENDs were read back from the disk"
    assert [r.body for r in f1.plog.read(start, 100)] == [b"x" * 200] * 50
    reads.clear()
    assert leader.read_raw(start).count == 50 and reads, "still held once both had it"
