"""The publish lane (``V2Connection._publish_lane``, ``NsqdServer.publish_now``): a read that
is exactly one PUB or MPUB to an existing topic is appended and committed without the
parse-and-dispatch path. It must answer and store exactly what the ordinary path does, and
step aside whenever the ordinary path has something to decide."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.nsqd.tcp import V2Connection
from nsqpy.storage import log as log_module
from nsqpy.testing import (
    AsyncWire,
    FakeClock,
    count_lane,
    eventually,
    mpub,
    nsqd_options,
    pub,
    publisher,
    read_message,
    subscriber,
)

ERR = 1
Step = tuple[bytes, int]  # what one write sends, how many frames answer it (-1: closed after)


def steps(topic: str) -> list[list[Step]]:
    """Connections, each a list of writes; a topic name is what the two runs differ in."""
    t = topic
    return [
        [
            (pub(t, b"creates the topic"), 1),  # a new topic: the ordinary path
            (pub(t, b"a"), 1),
            (mpub(t, [b"b", b"c", b"d" * 300]), 1),
            (pub(t, b"e") + pub(t, b"f"), 2),  # two in one read: the ordinary path
            (mpub(t, [b"g"]), 1),
            (f"PUB {t}\r\n".encode() + struct.pack(">i", 1) + b"h", 1),  # a CR
            (f"PUB {t} 0\n".encode() + struct.pack(">i", 1) + b"i", 1),  # a partition
            (pub(t + "_other", b"j"), 1),
            (pub(t, b"k"), 1),
        ],
        [(pub(t, b"x" * 2000), -1)],  # over --max-msg-size: E_BAD_MESSAGE, closed
        [(f"MPUB {t}\n".encode() + struct.pack(">ii", 4, 0), -1)],  # no messages
        [(f"MPUB {t}\n".encode() + struct.pack(">ii", 12, 1) + struct.pack(">i", -3), -1)],
        [(f"PUB {t}\n".encode() + struct.pack(">i", 0), -1)],  # an empty body
    ]


async def server_side(nsqd: NsqdServer, before: set[V2Connection]) -> V2Connection:
    await eventually(lambda: len(nsqd.connections - before) == 1)
    (conn,) = nsqd.connections - before
    return conn


async def transcript(nsqd: NsqdServer, topic: str, lane: bool) -> tuple[list[object], int]:
    """The frames every write of ``steps`` got, and how many publishes the lane took."""
    taken = 0
    frames: list[object] = []
    for connection in steps(topic):
        before = set(nsqd.connections)
        wire = await publisher(nsqd.tcp_port)
        conn = await server_side(nsqd, before)
        counted = count_lane(conn)
        if not lane:
            conn._lane = None
        for data, answers in connection:
            await wire.send(data)
            if answers < 0:
                frames.append(await wire.read_frame())
                await wire.expect_closed()
                continue
            frames.extend([await wire.read_frame() for _ in range(answers)])
        await wire.close()
        taken += counted[0]
    return [repr(f).replace(topic, "T") for f in frames], taken


async def bodies(nsqd: NsqdServer, topic: str, count: int) -> list[bytes]:
    wire = await subscriber(nsqd.tcp_port, topic, "c", rdy=100)
    got = [(await read_message(wire)).body for _ in range(count)]
    await wire.close()
    return got


async def test_the_lane_answers_and_stores_what_the_ordinary_path_does(
    tmp_path: Path, clock: FakeClock
) -> None:
    nsqd = NsqdServer(nsqd_options(tmp_path, max_msg_size=1024), clock=clock)
    await nsqd.start()
    try:
        with_lane, taken = await transcript(nsqd, "lane", lane=True)
        without, not_taken = await transcript(nsqd, "plain", lane=False)
        assert with_lane == without
        assert repr((0, b"OK")) in with_lane
        assert sum(f.startswith(f"({ERR},") for f in with_lane) == 4  # type: ignore[attr-defined]
        assert taken == 4 and not_taken == 0  # a, b-d, g and k went by the lane
        topics = nsqd.broker.topics
        assert topics["lane"].depth == topics["plain"].depth == 11
        assert await bodies(nsqd, "lane", 11) == await bodies(nsqd, "plain", 11)
    finally:
        await nsqd.stop()


async def lane_connection(nsqd: NsqdServer) -> tuple[AsyncWire, V2Connection]:
    """A publisher that published once to ``t`` (answered), and its server side."""
    before = set(nsqd.connections)
    wire = await publisher(nsqd.tcp_port)
    conn = await server_side(nsqd, before)
    await wire.send(pub("t", b"0"))
    assert await wire.read_frame() == (0, b"OK")
    return wire, conn


async def test_the_lane_commits_at_once_while_publishers_are_few(nsqd: NsqdServer) -> None:
    """As ``commit_now`` at the end of a read: with at most one connection answered by the
    last commit, the lane writes at once, also when this turn's commit was already
    scheduled by something else (a delivery, another touch), which it takes over."""
    wire, conn = await lane_connection(nsqd)
    log = nsqd.broker.topics["t"].partitions[0].log
    nsqd._schedule_commit()  # (what a touch of another connection in this turn leaves)
    assert nsqd.publish_now(conn, nsqd.broker.topics["t"], [b"1"], Exception)  # type: ignore[arg-type]
    assert log.flushed_offset == 2 and not nsqd.broker.has_dirty()
    assert not nsqd._commit_scheduled  # (the scheduled commit was taken over, not left)
    assert await wire.read_frame() == (0, b"OK")


async def test_the_lane_groups_its_commit_when_several_publish(nsqd: NsqdServer) -> None:
    """With several connections answered by the last commit, the lane appends and leaves
    the writing to the turn's commit, grouped with theirs (the ordinary path's
    ``commit_now`` does not commit then either): nothing is written or answered before it
    runs, then the publish is answered and stored."""
    wire, conn = await lane_connection(nsqd)
    topic = nsqd.broker.topics["t"]
    log = topic.partitions[0].log
    nsqd._group = 2  # what the last commit leaves when it answered two connections
    assert nsqd.publish_now(conn, topic, [b"1"], Exception)  # type: ignore[arg-type]
    assert nsqd.broker.has_dirty() and log.flushed_offset == 1 and nsqd._commit_scheduled
    assert await wire.read_frame() == (0, b"OK")  # once the turn's commit wrote it
    assert topic.depth == 2 and log.flushed_offset == 2 and not nsqd.broker.has_dirty()


async def test_under_sync_always_the_lane_answers_after_the_fsync(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--sync-always: a publish the lane takes is answered only once the fsync covering it
    is done, as the ordinary path's."""
    held = threading.Event()
    calls: list[int] = []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if not held.wait(30):
            raise TimeoutError("never let through")

    nsqd = NsqdServer(nsqd_options(tmp_path, sync_always=True), clock=clock)
    await nsqd.start()
    try:
        held.set()
        wire, conn = await lane_connection(nsqd)
        held.clear()
        monkeypatch.setattr(log_module, "fsync_segment", fsync)
        taken = count_lane(conn)
        await wire.send(pub("t", b"1"))
        await eventually(lambda: bool(calls))  # the fsync runs (held, in a worker thread)
        assert taken == [1]
        with pytest.raises(TimeoutError):
            await wire.read_frame(timeout=0.3)
        held.set()
        assert await wire.read_frame() == (0, b"OK")
    finally:
        held.set()
        await nsqd.stop()
