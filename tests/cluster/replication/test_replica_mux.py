"""Every partition's link between two nodes on one connection (nsqpy.cluster.replica_mux):
a real LeaderFeed on loopback, FollowerFetch instances sharing a MuxPool, real logs."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import struct
from collections.abc import AsyncIterator, Callable, Iterable
from types import SimpleNamespace
from typing import Any

import pytest

from nsqpy.cluster.replica import Link, LinkClosed
from nsqpy.cluster.replica_follower import FollowerFetch
from nsqpy.cluster.replica_mux import (
    DATA,
    HEADER,
    MAX_CHUNK,
    MUX_MAGIC,
    PING,
    MuxConn,
    MuxPool,
    Stream,
)
from nsqpy.cluster.replica_state import ReplicaState
from nsqpy.protocol.replication import (
    HEARTBEAT_FRAME,
    MAGIC,
    Buffer,
    ChannelCursor,
    Cursors,
    MalformedFrame,
    ReplicationFrame,
    ReplicationReader,
    encode_error,
    encode_hello,
)
from nsqpy.storage import PartitionLog
from nsqpy.storage.policy import SyncPolicy
from nsqpy.testing.polling import eventually

from .conftest import TOPIC, Cluster, assert_same, lead

PARTITIONS = 12


async def many(cluster: Cluster, pool: MuxPool, **feed: float) -> list[FollowerFetch]:
    """PARTITIONS led partitions with records, each followed by F1 through ``pool``."""
    for p in range(PARTITIONS):
        lead(cluster.leader_log(p, epoch=1), 1, 3 + p)
    await cluster.start_feed(**feed)
    followers = []
    for p in range(PARTITIONS):
        cluster.set_isr(p, ["L", "F1"])
        followers.append(cluster.follower(cluster.log(f"f1-{p}"), partition=p, pool=pool))
    return followers


def caught_up(cluster: Cluster, followers: list[FollowerFetch]) -> bool:
    return all(
        f.plog.flushed_offset == cluster.logs[p].high_watermark
        and cluster.states[p].committed == cluster.logs[p].high_watermark
        for p, f in enumerate(followers)
    )


async def test_every_partition_between_two_nodes_shares_one_connection(cluster: Cluster) -> None:
    pool = MuxPool()
    try:
        followers = await many(cluster, pool)
        await eventually(lambda: caught_up(cluster, followers), 10, what="all caught up")
        for p, f in enumerate(followers):
            assert_same(cluster.logs[p], f.plog)
        assert cluster.feed is not None
        assert list(pool.conns) == [cluster.address] and len(cluster.feed._muxes) == 1
        (conn,) = cluster.feed._muxes
        assert len(conn.streams) == PARTITIONS
        # a live append on one partition goes over the same connection
        cluster.logs[5].append_bodies([b"live"] * 10)
        cluster.logs[5].flush()
        cluster.feed.notify(TOPIC, 5)
        await eventually(lambda: caught_up(cluster, followers), 5, what="the append")
        assert len(cluster.feed._muxes) == 1
    finally:
        await pool.close()


async def test_idle_streams_send_nothing_and_pings_keep_every_follower_heard(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At rest only PINGs cross the connection, one each way per heartbeat interval
    whatever the number of partitions, and they keep every follower heard (none lagging)
    long past the timeout."""
    chunks: list[tuple[int, int]] = []
    write = MuxConn._write

    def counting(self: MuxConn, out: list[Buffer]) -> None:
        chunks.extend((k, s) for k, s, _ in (HEADER.unpack(b) for b in out if len(b) == 9))
        write(self, out)

    monkeypatch.setattr(MuxConn, "_write", counting)
    pool = MuxPool(timeout=1.0, heartbeat_interval=0.2)
    try:
        followers = await many(cluster, pool, timeout=1.0, heartbeat_interval=0.2)
        await eventually(lambda: caught_up(cluster, followers), 10, what="all caught up")
        await eventually(  # (the leader's last commits told: nothing else is owed)
            lambda: all(f.committed_offset == f.plog.flushed_offset for f in followers),
            5,
            what="every commit told",
        )
        await eventually(  # (and the followers' fsyncs by the time bound, and their ACKs)
            lambda: all(
                cluster.states[p].peers["F1"].durable == f.plog.flushed_offset
                for p, f in enumerate(followers)
            ),
            10,
            what="every follower's fsync told",
        )
        chunks.clear()
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(2.0)  # twice the timeout
        took = loop.time() - start  # (more than 2 s on a busy machine: more PINGs)
        assert chunks and {kind for kind, _ in chunks} == {PING}
        assert len(chunks) <= 2 * (took / 0.2 + 2)  # each end, not each partition
        for p in range(PARTITIONS):
            assert cluster.states[p].lagging(["F1"]) == []
        assert all(f.state == "streaming" for f in followers)
    finally:
        await pool.close()


@contextlib.asynccontextmanager
async def quiet_follower(
    cluster: Cluster, every_ms: int, **options: Any
) -> AsyncIterator[tuple[PartitionLog, PartitionLog, FollowerFetch]]:
    """A leader's log of 40 records and a follower on a connection of its own, whose log
    fsyncs by time only, every ``every_ms``: (the leader's log, the follower's, the
    follower), once the follower took them all."""
    leader = cluster.leader_log()
    lead(leader, 1, 4)
    pool = MuxPool(timeout=5.0, heartbeat_interval=1.0)
    try:
        await cluster.start_feed(timeout=5.0, heartbeat_interval=1.0)
        cluster.set_isr(0, ["L", "F1"])
        mine = cluster.log("f1", SyncPolicy(every_messages=0, every_ms=every_ms))
        f = cluster.follower(mine, pool=pool, **options)
        await eventually(lambda: mine.flushed_offset == 40, 5, what="taken")
        yield leader, mine, f
    finally:
        await pool.close()


def ten_more(cluster: Cluster, leader: PartitionLog) -> None:
    """Ten more records led, in the same epoch, and the feed told."""
    lead(leader, 1, 1)
    assert cluster.feed is not None
    cluster.feed.notify(TOPIC, 0)


async def test_a_follower_fsyncs_by_the_time_bound_when_its_stream_goes_quiet(
    cluster: Cluster,
) -> None:
    """A follower whose policy syncs by time only (0.2 s) fsyncs what it took once the
    bound is up, and acknowledges the durable end, though the leader sends nothing more
    (an idle stream hears nothing at all, not even heartbeats), twice over: the records it
    caught up with, then a later one that came while it waited for nothing."""
    async with quiet_follower(cluster, 200) as (leader, mine, _):
        peer = cluster.states[0].peers
        await eventually(lambda: mine.durable_offset == 40, 5, what="fsynced")
        await eventually(lambda: peer["F1"].durable == 40, 5, what="told")  # (its ACK)
        ten_more(cluster, leader)  # (after a quiet time)
        await eventually(lambda: mine.flushed_offset == 50, 5, what="taken again")
        await eventually(lambda: mine.durable_offset == 50, 5, what="fsynced again")
        await eventually(lambda: peer["F1"].durable == 50, 5, what="told again")


async def test_a_follower_fsyncs_what_it_took_when_its_leader_goes(cluster: Cluster) -> None:
    """The leader's end closes while the follower holds records not fsynced, under a time
    bound far away (a minute): they are synced as the session ends, not left until a
    next session that a lost leader may never bring."""
    async with quiet_follower(cluster, 60_000) as (_, mine, _):
        assert mine.durable_offset == 0
        assert cluster.feed is not None
        await cluster.feed.close()
        cluster.feed = None
        await eventually(lambda: mine.durable_offset == 40, 5, what="fsynced")


async def test_a_halted_follower_fsyncs_what_it_took(cluster: Cluster) -> None:
    """A follower halted (the node leads the partition now, or follows another leader)
    with records not fsynced, under a time bound a minute away, fsyncs them in a worker
    thread: halting cancels its session before that session's end could."""
    async with quiet_follower(cluster, 60_000) as (_, mine, f):
        assert mine.durable_offset == 0
        f.halt()
        await eventually(lambda: mine.durable_offset == 40, 5, what="fsynced")


async def test_a_timeout_raised_taking_a_frame_ends_the_session_at_once(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TimeoutError raised while a frame is taken (a disk's ETIMEDOUT) ends the
    follower's session: it is not taken for the end of the wait for the log's fsync time
    bound, a wait that would then go round without waiting, on a loop that runs nothing
    else, until that bound."""
    async with quiet_follower(cluster, 2_000, backoff=0.5, max_backoff=0.5) as (leader, mine, f):
        waits = 0
        recv = Stream.recv

        async def counted(self: Stream, timeout: float | None = None) -> list[ReplicationFrame]:
            nonlocal waits
            waits += 1
            return await recv(self, timeout)

        def failing(data: Buffer, start_offset: int) -> int:
            raise TimeoutError(errno.ETIMEDOUT, "the disk timed out")

        monkeypatch.setattr(Stream, "recv", counted)
        monkeypatch.setattr(mine, "append_raw", failing)
        sessions = f.sessions
        ten_more(cluster, leader)
        await eventually(lambda: f.sessions > sessions, 10, what="a new session")
        assert waits < 100  # (a wait per session and turn, not a spin until the bound)


async def test_a_silent_connection_is_closed_and_its_followers_fall_behind(
    cluster: Cluster,
) -> None:
    """A follower node that stops answering (its PINGs stop): the leader closes the
    connection after the timeout, and every partition on it reports the follower
    lagging; the follower dials again once it can."""
    pool = MuxPool(timeout=30.0, heartbeat_interval=0.2)
    try:
        followers = await many(cluster, pool, timeout=1.0, heartbeat_interval=0.2)
        await eventually(lambda: caught_up(cluster, followers), 10, what="all caught up")
        conn = pool.conns[cluster.address]
        assert conn.pinger is not None
        conn.pinger.cancel()  # the follower's process stalls: it neither sends nor reads
        reading(conn).pause_reading()
        feed = cluster.feed
        assert feed is not None
        await eventually(lambda: not feed._muxes, 5, what="the leader closed it")
        cluster.advance(1.5)  # (past the states' timeout)
        assert all(cluster.states[p].lagging(["F1"]) == ["F1"] for p in range(PARTITIONS))
        reading(conn).resume_reading()
        await eventually(lambda: len(feed._muxes) == 1 and caught_up(cluster, followers),
                         10, what="dialled again")  # fmt: skip
    finally:
        await pool.close()


async def test_a_leader_without_multiplexing_gets_a_link_per_partition(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A leader of an older version answers the connection's magic with a link's magic
    and an ERROR: the pool says so (None), and the followers link partition by partition."""

    async def old(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4)
        writer.write(MAGIC + encode_error(0, "E_BAD_FRAME", "bad magic"))
        writer.close()

    server = await asyncio.start_server(old, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = MuxPool()
    try:
        with caplog.at_level(logging.INFO, "nsqpy.cluster.replica"):
            assert await pool.open(f"127.0.0.1:{port}") is None
            assert await pool.open(f"127.0.0.1:{port}") is None  # (not dialled again)
        assert sum("partition by partition" in r.message for r in caplog.records) == 1
        lead(cluster.leader_log(0, epoch=1), 1, 5)
        await cluster.start_feed()
        cluster.set_isr(0, ["L", "F1"])
        pool._plain_until[cluster.address] = float("inf")
        f = cluster.follower(cluster.log("f1"), pool=pool)
        await eventually(lambda: caught_up(cluster, [f]), 5, what="over a link of its own")
        assert cluster.feed is not None and not cluster.feed._muxes and not pool.conns
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()


def reading(conn: MuxConn) -> asyncio.Transport:
    """The connection's socket transport (it reads as well as writes)."""
    transport = conn.writer.transport
    assert isinstance(transport, asyncio.Transport)
    return transport


async def raw_mux(cluster: Cluster) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, _, port = cluster.address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(MUX_MAGIC)
    assert await reader.readexactly(4) == MUX_MAGIC
    return reader, writer


async def read_chunks(reader: asyncio.StreamReader) -> list[tuple[int, int, bytes]]:
    """Chunks until the leader closes the connection (or 3 s pass)."""
    got = []
    try:
        async with asyncio.timeout(3.0):
            while True:
                kind, sid, length = HEADER.unpack(await reader.readexactly(HEADER.size))
                got.append((kind, sid, await reader.readexactly(length)))
    except (asyncio.IncompleteReadError, TimeoutError):
        pass
    return got


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">BII", 9, 1, 0),  # an unknown kind
        struct.pack(">BII", DATA, 1, (1 << 20) + 1),  # longer than a chunk may be
        struct.pack(">BII", PING, 0, 3) + b"abc",  # a PING with bytes
        struct.pack(">BII", DATA, 0, 1) + b"x",  # DATA on stream 0
    ],
    ids=["kind", "length", "ping-bytes", "stream-0"],
)
async def test_garbage_on_the_connection_closes_it_with_one_line(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, garbage: bytes
) -> None:
    lead(cluster.leader_log(0, epoch=1), 1, 1)
    await cluster.start_feed()
    reader, writer = await raw_mux(cluster)
    with caplog.at_level(logging.INFO, "nsqpy.cluster.replica"):
        writer.write(garbage)
        chunks = await read_chunks(reader)
    writer.close()
    assert reader.at_eof() and all(kind == PING for kind, _, _ in chunks)
    lines = [r for r in caplog.records if "broke the protocol" in r.message]
    assert len(lines) == 1, caplog.text


async def test_a_refused_stream_leaves_the_connection_and_its_other_streams(
    cluster: Cluster,
) -> None:
    """A HELLO for a partition not held here: that stream gets ERROR and CLOSE; the
    connection stays, and a stream opened after it on the same connection is served."""
    lead(cluster.leader_log(0, epoch=1), 1, 1)
    await cluster.start_feed()
    cluster.set_isr(0, ["L", "F1"])
    reader, writer = await raw_mux(cluster)
    try:
        bad = MAGIC + encode_hello("F1", "c1", TOPIC, 7, 1)
        writer.write(HEADER.pack(DATA, 1, len(bad)) + bad)
        good = MAGIC + encode_hello("F1", "c1", TOPIC, 0, 1)
        writer.write(HEADER.pack(DATA, 2, len(good)) + good)
        got: dict[int, bytes] = {1: b"", 2: b""}
        closed: set[int] = set()
        async with asyncio.timeout(3.0):
            while not (1 in closed and got[2].startswith(MAGIC) and len(got[2]) > 4):
                kind, sid, length = HEADER.unpack(await reader.readexactly(HEADER.size))
                data = await reader.readexactly(length)
                if kind == DATA:
                    got[sid] += data
                elif kind != PING:
                    closed.add(sid)
        assert b"E_NOT_REPLICA" in got[1] and 2 not in closed
    finally:
        writer.close()


async def test_a_busy_stream_does_not_hide_the_idle_ones_from_the_leader(cluster: Cluster) -> None:
    """One partition busy (its follower ACKs more often than the heartbeat), one idle, on
    the same connection: the idle one's follower is still heard (the PINGs go every
    interval whatever else the connection carries), long past the timeout."""
    pool = MuxPool(timeout=1.0, heartbeat_interval=0.2)
    try:
        for p in range(2):
            lead(cluster.leader_log(p, epoch=1), 1, 2)
        feed = await cluster.start_feed(timeout=1.0, heartbeat_interval=0.2)
        followers = []
        for p in range(2):
            cluster.set_isr(p, ["L", "F1"])
            followers.append(cluster.follower(cluster.log(f"f1-{p}"), partition=p, pool=pool))
        await eventually(lambda: caught_up(cluster, followers), 10, what="both caught up")
        for _ in range(30):  # 3 s, three times the timeout: partition 0 busy
            cluster.logs[0].append_bodies([b"busy"] * 5)
            cluster.logs[0].flush()
            feed.notify(TOPIC, 0)
            await asyncio.sleep(0.1)
        assert cluster.states[1].lagging(["F1"]) == []
        assert cluster.states[0].lagging(["F1"]) == []
    finally:
        await pool.close()


async def test_a_leader_that_steps_down_closes_its_idle_streams(cluster: Cluster) -> None:
    """The leader's state becomes a follower: its idle stream, which sends nothing, is
    ended at the next PING (E_NOT_LEADER to the follower), not left open."""
    pool = MuxPool(timeout=2.0, heartbeat_interval=0.2)
    try:
        lead(cluster.leader_log(0, epoch=1), 1, 2)
        feed = await cluster.start_feed(timeout=2.0, heartbeat_interval=0.2)
        cluster.set_isr(0, ["L", "F1"])
        f = cluster.follower(cluster.log("f1"), pool=pool)
        await eventually(lambda: caught_up(cluster, [f]), 5, what="caught up")
        sessions = f.sessions
        cluster.states[0].assign("follower", 2)  # (etcd made another node the leader)
        await eventually(lambda: not feed._conns, 2, what="the leader ended the stream")
        assert f.sessions == sessions  # (it cannot link again: refused, E_NOT_LEADER)
    finally:
        await pool.close()


async def test_a_leader_closing_during_the_dial_is_not_taken_for_an_older_version() -> None:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4)
        writer.close()

    server = await asyncio.start_server(closing, "127.0.0.1", 0)
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    pool = MuxPool()
    try:
        with pytest.raises(ConnectionError):
            await pool.open(address)
        assert not pool._plain_until
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()


async def test_partitions_dialing_an_older_leader_together_find_it_out_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dials = 0

    async def old(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal dials
        dials += 1
        await reader.readexactly(4)
        writer.write(MAGIC + encode_error(0, "E_BAD_MAGIC", "bad magic"))
        writer.close()

    server = await asyncio.start_server(old, "127.0.0.1", 0)
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    pool = MuxPool()
    try:
        with caplog.at_level(logging.INFO, "nsqpy.cluster.replica"):
            got = await asyncio.gather(*(pool.open(address) for _ in range(20)))
        assert got == [None] * 20 and dials == 1
        assert sum("partition by partition" in r.message for r in caplog.records) == 1
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()


async def test_a_thousand_refused_streams_on_one_connection_are_one_line(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    lead(cluster.leader_log(0, epoch=1), 1, 1)
    await cluster.start_feed()
    reader, writer = await raw_mux(cluster)
    try:
        with caplog.at_level(logging.INFO, "nsqpy.cluster.replica"):
            for sid in range(1, 1001):  # HELLOs for partitions this node does not hold
                hello = MAGIC + encode_hello("F1", "c1", TOPIC, 100 + sid, 1)
                writer.write(HEADER.pack(DATA, sid, len(hello)) + hello)
            closes = 0
            async with asyncio.timeout(10.0):
                while closes < 1000:
                    kind, _, length = HEADER.unpack(await reader.readexactly(HEADER.size))
                    await reader.readexactly(length)
                    closes += kind == 2
        assert sum("refused" in r.message for r in caplog.records) == 1, caplog.text
    finally:
        writer.close()


async def test_a_stream_that_breaks_the_protocol_closes_its_connection(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    lead(cluster.leader_log(0, epoch=1), 1, 1)
    await cluster.start_feed()
    reader, writer = await raw_mux(cluster)
    with caplog.at_level(logging.INFO, "nsqpy.cluster.replica"):
        for sid in (1, 2, 3):  # not a link's magic
            writer.write(HEADER.pack(DATA, sid, 8) + b"GARBAGE!")
        chunks = await read_chunks(reader)
    writer.close()
    assert reader.at_eof()
    assert {kind for kind, _, _ in chunks} <= {DATA, 2, PING}
    assert sum("broke the protocol" in r.message for r in caplog.records) == 1, caplog.text


async def test_cursors_of_partitions_finished_in_one_turn_go_in_one_write(
    cluster: Cluster,
) -> None:
    """FINs of several partitions' ordered messages in one read of the consumer's
    connection (``cursors_now`` for each, one after the other): their CURSORS share one
    system call on the connection to the follower, not one each; and the follower, taking
    them in one read, acknowledges them all."""
    cursors = {p: ChannelCursor("c", 0) for p in range(PARTITIONS)}
    pool = MuxPool()
    try:
        followers = await many(
            cluster,
            pool,
            cursor_interval=60.0,  # (sent only when asked: cursors_now)
        )
        feed = cluster.feed
        assert feed is not None
        feed._cursors = lambda t, p: [cursors[p]]
        await eventually(lambda: caught_up(cluster, followers), 10, what="all caught up")
        await eventually(  # (no commit owed: nothing else goes in the turn of the FINs)
            lambda: all(f.committed_offset == f.plog.flushed_offset for f in followers),
            5,
            what="every commit told",
        )
        (conn,) = feed._muxes
        writes: list[int] = []  # how many CURSORS each write carried, when any
        writelines = conn.writer.writelines

        def counted(bufs: Iterable[Buffer]) -> None:
            data = b"".join(bytes(b) for b in bufs)
            writes.extend([n] if (n := cursors_in(data)) else [])
            writelines([data])

        conn.writer.writelines = counted  # type: ignore[method-assign,assignment]
        for p in range(PARTITIONS):  # (one turn of the event loop: no await between)
            cursors[p] = ChannelCursor("c", cluster.logs[p].high_watermark)
            feed.cursors_now(TOPIC, p)
        await eventually(
            lambda: all(
                feed.replicated_confirmed(TOPIC, p, "c", ["F1"]) == cursors[p].confirmed
                for p in range(PARTITIONS)
            ),
            5,
            what="every CURSORS acknowledged",
        )
        assert writes == [PARTITIONS], f"{PARTITIONS} partitions' CURSORS in writes of {writes}"
    finally:
        await pool.close()


def cursors_in(data: bytes) -> int:
    """The CURSORS frames in whole chunks written on a connection (each DATA chunk a
    stream's whole frames, as the leader writes them)."""
    found, pos = 0, 0
    while pos < len(data):
        kind, _, length = HEADER.unpack_from(data, pos)
        pos += HEADER.size + length
        if kind == DATA:
            reader = ReplicationReader(expect_magic=False)
            reader.feed(data[pos - length : pos])
            found += sum(isinstance(f, Cursors) for f in reader.frames())
    return found


async def test_a_handled_stream_takes_each_read_at_once() -> None:
    """``Stream.handle``: what was received before goes to the handler at once; after it,
    every whole frame a read of the connection brought (over several chunks) goes to the
    handler in one call at the end of that read (``recv`` hands out nothing); ``poke``
    makes the ``recv`` that waits return with no frame; and what the handler raises is
    raised by ``recv``, after which nothing more is handed to it or kept."""
    conn = SimpleNamespace(
        peer="p", max_buffer=1 << 20, accept=None, log=logging.getLogger(), fed={}
    )
    stream = Stream(conn, 1)  # type: ignore[arg-type]
    hb = HEARTBEAT_FRAME

    def read(*chunks: bytes) -> None:
        """What ``MuxConn._chunks`` does with one read: each chunk fed, then taken."""
        for chunk in chunks:
            stream.feed(chunk)
        fed, conn.fed = conn.fed, {}
        for each in fed.values():
            each.take()

    read(MAGIC + hb + hb)
    groups: list[int] = []
    stream.handle(lambda frames: groups.append(len(frames)))
    assert groups == [2], "what came before, at once"
    read(hb, hb + hb[:3], hb[3:])
    assert groups == [2, 3], "a read's frames in one call, a frame split over chunks whole"
    waiting = asyncio.ensure_future(stream.recv())
    await asyncio.sleep(0)
    assert not waiting.done(), "recv hands out nothing of a handled stream"
    stream.poke()
    assert await waiting == []

    def broken(frames: list[ReplicationFrame]) -> None:
        groups.append(-1)
        raise MalformedFrame("no")

    stream.handler = broken
    read(hb)
    read(hb * 1000)
    with pytest.raises(MalformedFrame, match="no"):
        await stream.recv()
    assert groups == [2, 3, -1], "nothing more after a failure"
    assert stream.decoder.buffered == 0, "nor kept"


async def mux_pair(
    accept: Callable[[Stream], None], early: bytes = b""
) -> tuple[MuxConn, MuxConn, asyncio.Server]:
    """A listener's and a dialer's ``MuxConn`` on one loopback connection; ``early``
    goes from the dialer right behind its magic, before the listener has read either."""
    made: asyncio.Future[MuxConn] = asyncio.get_running_loop().create_future()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.2)  # (the early bytes arrive meanwhile: they wait unread)
        assert await reader.readexactly(len(MUX_MAGIC)) == MUX_MAGIC
        writer.write(MUX_MAGIC)
        made.set_result(MuxConn(reader, writer, timeout=30.0, heartbeat_interval=10.0,
                                logger=logging.getLogger(), accept=accept))  # fmt: skip

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
    writer.write(MUX_MAGIC + early)
    assert await reader.readexactly(len(MUX_MAGIC)) == MUX_MAGIC
    dialer = MuxConn(reader, writer, timeout=30.0, heartbeat_interval=10.0,
                     logger=logging.getLogger())  # fmt: skip
    return await asyncio.wait_for(made, 5), dialer, server


async def test_a_connection_takes_what_came_with_the_magic() -> None:
    """Bytes that came behind the dialer's magic, read with it before the connection
    took over its socket, are the connection's first chunks: nothing is lost."""
    accepted: list[Stream] = []
    opening = MAGIC + HEARTBEAT_FRAME
    early = HEADER.pack(DATA, 1, len(opening)) + opening
    listener, dialer, server = await mux_pair(accepted.append, early)
    try:
        assert len(accepted) == 1
        assert [type(f).__name__ for f in await accepted[0].recv(1.0)] == ["Heartbeat"]
        assert listener.writer.transport.get_protocol() is listener
    finally:
        listener.shutdown()
        dialer.shutdown()
        server.close()


async def test_drain_waits_for_the_peer_to_read_and_fails_once_the_connection_is_lost() -> None:
    """The connection is its transport's protocol, so it keeps the flow control: ``drain``
    waits while the peer reads nothing and more is sent than the sockets hold, returns
    once the peer reads again, and raises once the connection is lost."""
    listener, dialer, server = await mux_pair(lambda stream: None)
    blob = b"x" * MAX_CHUNK
    try:
        reading(dialer).pause_reading()
        for _ in range(32):  # (DATA for a stream the dialer does not have: dropped there)
            listener.send_data(7, [blob])
        drained = asyncio.ensure_future(listener.drain())
        await asyncio.sleep(0.3)
        assert not drained.done(), "drained while the peer read nothing"
        reading(dialer).resume_reading()
        await asyncio.wait_for(drained, 10)
        reading(dialer).pause_reading()
        for _ in range(32):
            listener.send_data(7, [blob])
        drained = asyncio.ensure_future(listener.drain())
        await asyncio.sleep(0.3)
        assert not drained.done()
        dialer.writer.transport.abort()
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(drained, 10)
    finally:
        listener.shutdown()
        dialer.shutdown()
        server.close()


async def test_acks_that_came_in_one_read_commit_once(cluster: Cluster) -> None:
    """Several ACKs of each follower in one read of the connection (the leader was busy):
    the last says what the others did, so the committed offset moves once, the followers
    are told it once and the publishes it answers are answered together."""
    leader = cluster.leader_log(epoch=1)
    lead(leader, 1, 2)
    feed = await cluster.start_feed()
    cluster.set_isr(0, ["L", "F1", "F2"])
    pool = MuxPool()
    try:
        f1 = cluster.follower(cluster.log("f1"), "F1", pool=pool)
        f2 = cluster.follower(cluster.log("f2"), "F2", pool=pool)
        state = cluster.states[0]
        await eventually(lambda: state.committed == leader.high_watermark, 5, what="caught up")
        (conn,) = feed._muxes
        moves: list[int] = []
        told = state.on_change

        def counted(s: ReplicaState) -> None:
            moves.append(s.committed)
            if told is not None:
                told(s)

        state.on_change = counted
        reading(conn).pause_reading()  # (the leader is busy: the ACKs wait in its socket)
        for _ in range(3):  # (one at a time: each follower acknowledges each)
            leader.append_bodies([b"x" * 200] * 20)
            leader.flush()
            feed.notify(TOPIC, 0)
            await eventually(lambda: all(f.plog.flushed_offset == leader.high_watermark
                                         for f in (f1, f2)), 5)  # fmt: skip
        end = leader.high_watermark
        commits = [f.committed_offset for f in (f1, f2)]
        reading(conn).resume_reading()
        await eventually(lambda: f1.committed_offset == f2.committed_offset == end, 5)
        assert moves == [end], "one commit for the ACKs of one read"
        assert commits != [end, end]
    finally:
        await pool.close()


async def test_a_connection_whose_peer_ended_with_the_magic_ends_at_once() -> None:
    """The listener answered the magic, sent a PING and closed its side before the dialer
    made its connection: the connection takes the PING and ends at once (LinkClosed), not
    after its timeout of silence."""

    served: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(writer)
        await reader.readexactly(len(MUX_MAGIC))
        writer.write(MUX_MAGIC + HEADER.pack(PING, 0, 0))
        writer.write_eof()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
    try:
        writer.write(MUX_MAGIC)
        assert await reader.readexactly(len(MUX_MAGIC)) == MUX_MAGIC
        await asyncio.sleep(0.2)  # (the PING and the end arrive before the connection is made)
        conn = MuxConn(reader, writer, timeout=30.0, heartbeat_interval=10.0,
                       logger=logging.getLogger())  # fmt: skip
        with pytest.raises(LinkClosed):
            await asyncio.wait_for(conn.run(), 5)
        with pytest.raises(ConnectionResetError):
            await conn.drain()
    finally:
        for each in [writer, *served]:
            each.close()
        server.close()


def test_sending_on_a_lost_connection_under_uvloop_raises_and_logs_nothing() -> None:
    """On uvloop (the daemons' loop) a write to a closed transport raises RuntimeError
    (asyncio's drops it): the connection's writes stop once its transport is closing, the
    CURSORS left for the end of the turn too, so nothing is logged as a failed callback;
    a link of its own raises LinkClosed, as its read would."""
    import uvloop

    async def main() -> list[dict[str, Any]]:
        failures: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: failures.append(ctx))
        listener, dialer, server = await mux_pair(lambda stream: None)
        try:
            dialer.writer.transport.abort()
            await eventually(lambda: listener.writer.transport.is_closing(), 5)
            listener.send_data(1, [b"cursors"], soon=True)  # (written at the turn's end)
            listener.send_data(1, [b"records"])
            await asyncio.sleep(0.1)
        finally:
            listener.shutdown()
            dialer.shutdown()
            server.close()
        plain = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection(*plain.sockets[0].getsockname()[:2])
            link = Link(reader, writer)
            writer.transport.abort()
            with pytest.raises(LinkClosed):
                link.send([HEARTBEAT_FRAME])
            await link.refuse((0, "E_TEST", "refused on a closed link"))
        finally:
            plain.close()
            await plain.wait_closed()
        await asyncio.sleep(0.1)  # (the transports closed meanwhile)
        return failures

    assert uvloop.run(main()) == []
