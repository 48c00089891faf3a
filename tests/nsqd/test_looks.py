"""The ticker looks at a client connection when its heartbeat or a deadline is due, not at
every tick: idle clients cost a tick nothing (``nsqd.looks``)."""

from __future__ import annotations

import pytest

from nsqpy.nsqd.flow import MAX_LOOK_NS, expired, next_look
from nsqpy.nsqd.looks import LookSchedule
from nsqpy.nsqd.server import NsqdServer
from nsqpy.nsqd.tcp import V2Connection
from nsqpy.testing import AsyncWire, FakeClock, eventually, identify


def test_a_schedule_hands_over_what_is_due_once_and_never_late() -> None:
    looks = LookSchedule[str](100)
    looks.file("a", 250)
    looks.file("b", 0)
    looks.file("c", 1000)
    assert looks.due(99) == ["b"]  # (0: at the next look)
    assert looks.due(199) == []
    assert looks.due(200) == ["a"]  # its tick began: early by up to a tick, never late
    assert looks.due(10_000) == ["c"]
    assert len(looks) == 0 and looks.due(20_000) == []
    looks.file("a", 20_500)
    looks.file("a", 20_300)  # (filed again: only the new time counts)
    assert looks.when("a") == 20_300
    assert looks.due(20_450) == ["a"]
    assert looks.due(20_600) == []
    looks.file("d", 20_700)
    looks.forget("d")
    assert looks.when("d") is None and looks.due(20_800) == [] and len(looks) == 0
    looks.file("e", 21_900)
    looks.file("f", 25_000)
    assert looks.due(21_000) == []
    assert sorted(looks.due(100)) == ["e", "f"]  # (the clock went back: all, to file again)
    assert len(looks) == 0
    with pytest.raises(ValueError):
        LookSchedule[str](0)


async def test_idle_connections_are_looked_at_when_their_heartbeat_is_due_not_at_every_tick(
    nsqd: NsqdServer, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked: list[V2Connection] = []
    heartbeat = V2Connection.heartbeat

    def counted(self: V2Connection, now_ns: int) -> None:
        looked.append(self)
        heartbeat(self, now_ns)

    monkeypatch.setattr(V2Connection, "heartbeat", counted)
    wires = [await AsyncWire.connect(nsqd.tcp_port) for _ in range(20)]
    await eventually(lambda: len(nsqd.connections) == 20)
    # (the server's own ticks, every 10 ms, look at each once: the next look is then the
    # default heartbeat's, 30 s away, until the IDENTIFY below makes it 1 s)
    await eventually(lambda: {id(c) for c in looked} == {id(c) for c in nsqd.connections})
    for wire in wires:
        wire.answer_heartbeats = False
        await wire.send(identify({"heartbeat_interval": 1000}))
        assert await wire.read_frame() == (0, b"OK")
    await eventually(lambda: all(c.look_at for c in nsqd.connections))  # (IDENTIFYs' looks)
    looked.clear()
    for _ in range(9):  # 900 ms of ticks: no heartbeat and no deadline due
        clock.advance_ms(100)
        nsqd._tick(1)
    assert looked == []
    clock.advance_ms(100)  # a heartbeat interval since the IDENTIFYs
    nsqd._tick(1)
    assert sorted(map(id, looked)) == sorted(map(id, nsqd.connections))
    for wire in wires:
        assert await wire.read_frame() == (0, b"_heartbeat_")


def test_the_next_look_is_the_earliest_of_the_heartbeat_and_the_deadlines() -> None:
    ms = 1_000_000
    common = {"pre_auth_ns": 0, "read_since": 0, "stalled_since": 0, "last_heartbeat": 0}
    # heartbeat every second, reading: the heartbeat comes first (the read deadline is 2 s)
    assert next_look(0, 1000 * ms, reading=True, **common) == 1000 * ms
    # a stall since 100 ms closes the connection a heartbeat interval later
    stalled = {**common, "stalled_since": 100 * ms, "last_heartbeat": 500 * ms}
    assert next_look(500 * ms, 1000 * ms, reading=False, **stalled) == 1100 * ms + 1
    # no heartbeat (IDENTIFY -1) before AUTH: only the read deadline of the default interval
    pre_auth = {**common, "pre_auth_ns": 30_000 * ms, "read_since": 5 * ms}
    assert next_look(10 * ms, -1, reading=True, **pre_auth) == 60_005 * ms + 1
    # no heartbeat and no deadline: looked at again only after MAX_LOOK_NS
    assert next_look(10 * ms, -1, reading=True, **common) == 10 * ms + MAX_LOOK_NS
    # (and that is the first moment ``expired`` says so)
    deadline = {"pre_auth_ns": 30_000 * ms, "read_since": 5 * ms, "stalled_since": 0}
    assert not expired(60_005 * ms, -1, reading=True, **deadline)
    assert expired(60_005 * ms + 1, -1, reading=True, **deadline)


async def test_a_connection_is_looked_at_again_when_the_clock_went_back(
    nsqd: NsqdServer, clock: FakeClock
) -> None:
    wire = await AsyncWire.connect(nsqd.tcp_port)
    wire.answer_heartbeats = False
    await wire.send(identify({"heartbeat_interval": 1000}))
    assert await wire.read_frame() == (0, b"OK")
    (conn,) = nsqd.connections
    await eventually(lambda: conn.look_at > 0)  # (looked at: next at the heartbeat, 1 s on)
    clock.advance_ms(-120_000)  # the wall clock steps back two minutes
    await wire.send(b"NOP\n")  # (a command: its read deadline starts now, on the new time)
    await eventually(lambda: conn.last_recv == clock.now)
    clock.advance_ms(2001)  # two heartbeat intervals without a command
    await wire.expect_closed(timeout=5)


async def test_a_connection_whose_look_fails_leaves_the_others_looked_at(
    nsqd: NsqdServer, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    wires = [await AsyncWire.connect(nsqd.tcp_port) for _ in range(5)]
    for wire in wires:
        wire.answer_heartbeats = False
        await wire.send(identify({"heartbeat_interval": 1000}))
        assert await wire.read_frame() == (0, b"OK")
    await eventually(lambda: all(c.look_at for c in nsqd.connections))  # (next: 1 s on)
    broken = next(iter(nsqd.connections))
    heartbeat = V2Connection.heartbeat

    def failing(self: V2Connection, now_ns: int) -> None:
        if self is broken:
            raise RuntimeError("a bug in one connection's look")
        heartbeat(self, now_ns)

    monkeypatch.setattr(V2Connection, "heartbeat", failing)
    for _ in range(2):  # two heartbeats of every other connection (within the read deadline)
        clock.advance_ms(1000)
        nsqd._tick(1)
    got = 0
    for wire in wires:
        try:
            for _ in range(2):
                assert await wire.read_frame(timeout=1.0) == (0, b"_heartbeat_")
            got += 1
        except TimeoutError:
            pass
    assert got == 4


@pytest.mark.parametrize("back_ms", [5_000, 120_000])  # (below and above MAX_LOOK_NS)
async def test_heartbeats_go_on_after_the_clock_went_back(
    nsqd: NsqdServer, clock: FakeClock, back_ms: int
) -> None:
    """A wall clock stepped back (a correction, a machine resumed) does not stop the
    heartbeats until it is back where it was (a client would time out meanwhile): one goes
    at the first look on the new time, the next an interval later."""
    wire = await AsyncWire.connect(nsqd.tcp_port)
    wire.answer_heartbeats = False
    await wire.send(identify({"heartbeat_interval": 1000}))
    assert await wire.read_frame() == (0, b"OK")
    (conn,) = nsqd.connections
    await eventually(lambda: conn.look_at > 0)
    clock.advance_ms(1000)
    assert await wire.read_frame(timeout=5) == (0, b"_heartbeat_")
    await wire.send(b"NOP\n")
    await eventually(lambda: conn.last_recv == clock.now)
    clock.advance_ms(-back_ms)  # the wall clock steps back
    assert await wire.read_frame(timeout=5) == (0, b"_heartbeat_")
    clock.advance_ms(1000)  # one interval on the new time
    assert await wire.read_frame(timeout=5) == (0, b"_heartbeat_")
    clock.advance_ms(1000)
    assert await wire.read_frame(timeout=5) == (0, b"_heartbeat_")
