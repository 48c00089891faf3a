"""CURSORS naming only the channels that may differ from what the follower holds
(``ReplicaState.cursors_output``): an ordered channel's FIN costs its own cursor, not every
channel's. The follower takes only the last CURSORS of a read and acknowledges that one
(``FollowerFetch._take``); whatever the frames and however they are grouped into reads, it
must end up holding every channel's cursor as the leader had them, and the leader must
count as taken exactly what the follower holds. No sockets: frames go through the real
codec, the follower's side is its state's ``cursors_ack`` and the adoption rule of
``nsqd.replicas`` (named channels taken, a full set deletes the others)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nsqpy.cluster import replica_state
from nsqpy.cluster.replica_state import FollowerLink, ReplicaState
from nsqpy.protocol.replication import Append, ChannelCursor, Cursors, CursorsAck
from nsqpy.storage import PartitionLog

from .test_replica_state import FakeClock, decoded, pair


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def logs() -> Iterator[dict[str, PartitionLog]]:
    opened: dict[str, PartitionLog] = {}
    yield opened
    for log in opened.values():
        log.close()


INTERVAL = 1.0


def cursors_of(frame: bytes | None) -> Cursors:
    assert frame is not None
    (found,) = [f for f in decoded([frame]) if not isinstance(f, Append)]  # (a commit first)
    assert isinstance(found, Cursors)
    return found


class Follower:
    """What a follower holds of the channels: the last CURSORS of each read taken as
    ``Replication._adopt_cursors`` takes it, and acknowledged as ``FollowerFetch`` does."""

    def __init__(self, state: ReplicaState) -> None:
        self.state = state
        self.held: dict[str, ChannelCursor] = {}

    def read(self, frames: list[Cursors]) -> CursorsAck:
        last = frames[-1]
        for c in last.channels:
            self.held[c.name] = c
        if last.full:
            named = {c.name for c in last.channels}
            self.held = {n: c for n, c in self.held.items() if n in named}
        (ack,) = decoded([self.state.cursors_ack(last, 1)])
        assert isinstance(ack, CursorsAck)
        return ack


def send(leader: ReplicaState, link: FollowerLink, now: list[ChannelCursor]) -> Cursors:
    leader.cursors_due(link)
    return cursors_of(leader.cursors_output(link, lambda: now, INTERVAL))


def test_after_a_full_set_is_acknowledged_a_fin_names_its_own_channel_only(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    leader, follower, link = pair(tmp_path, logs, clock)
    them = Follower(follower)
    now = [ChannelCursor("a", 5), ChannelCursor("b", 7, ranges=((9, 12),)), ChannelCursor("c", 1)]
    first = send(leader, link, now)
    assert first.full and first.channels == tuple(now), "a link begins with a full set"
    leader.leader_frame(link, them.read([first]))
    now = [now[0], ChannelCursor("b", 8, ranges=((9, 12),)), now[2]]
    second = send(leader, link, now)
    assert (second.full, second.channels) == (False, (now[1],))
    leader.leader_frame(link, them.read([second]))
    assert them.held == {c.name: c for c in now}
    assert [leader.replicated_confirmed(n, ["F"]) for n in "abc"] == [5, 8, 1]
    # a new channel is named on its own too; one that went takes a full set
    now = [*now, ChannelCursor("d", 0)]
    third = send(leader, link, now)
    assert (third.full, [c.name for c in third.channels]) == (False, ["b", "d"])
    leader.leader_frame(link, them.read([third]))
    now = [now[0], now[1], now[3]]
    fourth = send(leader, link, now)
    assert fourth.full and fourth.channels == tuple(now)
    leader.leader_frame(link, them.read([fourth]))
    assert them.held == {c.name: c for c in now}
    # and a full set again once the interval is up since the last
    now = [now[0], ChannelCursor("b", 9), now[2]]
    assert not send(leader, link, now).full
    clock.now += INTERVAL
    now = [now[0], ChannelCursor("b", 10), now[2]]
    assert send(leader, link, now).full


def test_a_full_set_the_follower_skipped_is_not_taken_for_what_it_holds(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """A full set acknowledged with a later CURSORS of the same read was never taken by the
    follower: the frames after it name everything, until a full set is acknowledged on its
    own."""
    leader, follower, link = pair(tmp_path, logs, clock)
    them = Follower(follower)
    now = [ChannelCursor("a", 5), ChannelCursor("b", 7)]
    leader.leader_frame(link, them.read([send(leader, link, now)]))
    clock.now += INTERVAL
    now = [ChannelCursor("a", 6), ChannelCursor("b", 7)]
    full = send(leader, link, now)
    now = [ChannelCursor("a", 6), ChannelCursor("b", 8)]
    after = send(leader, link, now)
    assert full.full and after.full, "no full set acknowledged since the last went"
    leader.leader_frame(link, them.read([full, after]))
    assert them.held == {c.name: c for c in now}
    now = [ChannelCursor("a", 7), ChannelCursor("b", 8)]
    assert (send(leader, link, now).full, them.held["a"].confirmed) == (False, 6)


def test_a_channel_a_later_full_set_went_without_is_named_once_back(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """The follower took two full sets, the second without channel c; the leader hears of
    the first only then, and c is back as the first had it: the next CURSORS names c."""
    leader, follower, link = pair(tmp_path, logs, clock)
    them = Follower(follower)
    a, c = ChannelCursor("a", 5), ChannelCursor("c", 3)
    first = send(leader, link, [a, c])
    second = send(leader, link, [ChannelCursor("a", 6)])
    assert first.full and second.full
    acks = [them.read([first]), them.read([second])]
    assert set(them.held) == {"a"}
    leader.leader_frame(link, acks[0])
    back = send(leader, link, [ChannelCursor("a", 7), c])
    assert c in back.channels
    leader.leader_frame(link, acks[1])
    leader.leader_frame(link, them.read([back]))
    assert link.cursors_taken == {"a": 7, "c": 3} and them.held == {
        "a": ChannelCursor("a", 7),
        "c": c,
    }


def cursor(name: str, n: int) -> ChannelCursor:
    return ChannelCursor(name, n // 2, ranges=((100 + n % 2, 200),))


@contextlib.contextmanager
def model(
    factory: pytest.TempPathFactory,
) -> Iterator[tuple[FakeClock, ReplicaState, FollowerLink, Follower]]:
    """A leader's state, its link to a follower and that follower's model, on fresh logs
    (a property test's example each: function-scoped fixtures would be shared by them)."""
    logs: dict[str, PartitionLog] = {}
    clock = FakeClock()
    leader, follower, link = pair(factory.mktemp("deltas"), logs, clock)
    try:
        yield clock, leader, link, Follower(follower)
    finally:
        for log in logs.values():
            log.close()


def change_and_send(
    leader: ReplicaState,
    link: FollowerLink,
    cursors: dict[str, ChannelCursor],
    change: dict[str, int | None],
) -> tuple[Cursors | None, dict[str, ChannelCursor]]:
    """Channels of ``cursors`` changed (None: deleted), a CURSORS due: what went, if any,
    and every channel's cursor as the leader has them now."""
    for name, value in change.items():
        if value is None:
            cursors.pop(name, None)
        else:
            cursors[name] = cursor(name, value)
    now = [cursors[n] for n in sorted(cursors)]
    leader.cursors_due(link)
    frame = leader.cursors_output(link, lambda: now, INTERVAL)
    return (None if frame is None else cursors_of(frame)), {c.name: c for c in now}


# Each step: channels changed (None: deleted) and a CURSORS due; the follower reads up to n
# of the CURSORS on the wire at once; the leader takes the oldest CURSORS_ACK on the way;
# or the clock moves on. A channel's cursor is a small number, so values come back often.
changes = st.dictionaries(
    st.sampled_from(["a", "b", "c"]), st.one_of(st.none(), st.integers(0, 3)), max_size=2
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("change"), changes),
        st.tuples(st.just("read"), st.integers(1, 3)),
        st.tuples(st.just("ack"), st.just(0)),
        st.tuples(st.just("wait"), st.sampled_from([0.4, 1.1])),
    ),
    max_size=40,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=steps)
@example(  # (a full set taken after one it went without, c back as before: found by review)
    steps=[("change", {"c": 1}), ("change", {"c": None}), ("read", 1), ("read", 1),
           ("ack", 0), ("change", {"c": 1}), ("read", 1)]
)  # fmt: skip
def test_whatever_the_frames_reads_and_late_acks_the_leader_counts_what_the_follower_took(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[str, object]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replica_state, "UNACKED_CURSORS", 3)  # (the trim, often)
    wire: list[tuple[Cursors, dict[str, ChannelCursor]]] = []  # (frame, the leader's then)
    acks: list[tuple[CursorsAck, dict[str, ChannelCursor]]] = []  # (ack, what it took)
    with model(tmp_path_factory) as (clock, leader, link, them):
        cursors = {"a": cursor("a", 0)}
        for kind, arg in steps:
            if kind == "change":
                frame, had = change_and_send(leader, link, cursors, arg)  # type: ignore[arg-type]
                if frame is not None:
                    wire.append((frame, had))
            elif kind == "read" and wire:
                batch, wire[:] = wire[: int(arg)], wire[int(arg) :]  # type: ignore[call-overload]
                acks.append((them.read([f for f, _ in batch]), dict(them.held)))
                assert them.held == batch[-1][1], "the follower holds what the leader had"
            elif kind == "ack" and acks:
                ack, took = acks.pop(0)
                before = link.cursors_taken
                leader.leader_frame(link, ack)
                if link.cursors_taken is not before:
                    assert link.cursors_taken == {n: c.confirmed for n, c in took.items()}
            elif kind == "wait":
                clock.now += arg  # type: ignore[operator]


channel_names = st.sampled_from(["a", "b", "c", "d"])
# a channel's cursor as a small number (its value comes back often: confirmed n // 2, and a
# range that moves with n % 2), or None: the channel deleted
read_changes = st.dictionaries(channel_names, st.one_of(st.none(), st.integers(0, 5)), max_size=3)
reads = st.lists(
    st.tuples(
        st.lists(read_changes, min_size=1, max_size=3),  # each then a CURSORS due; all read at once
        st.sampled_from([0.0, 0.0, 0.4, 1.1]),  # clock seconds after the read
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(reads=reads)
def test_whatever_the_frames_and_reads_the_follower_holds_what_the_leader_counts(
    tmp_path_factory: pytest.TempPathFactory,
    reads: list[tuple[list[dict[str, int | None]], float]],
) -> None:
    with model(tmp_path_factory) as (clock, leader, link, them):
        cursors = {"a": cursor("a", 0)}
        for frames, wait in reads:
            sent: list[Cursors] = []
            taken_state: dict[str, ChannelCursor] = {}
            for change in frames:
                frame, had = change_and_send(leader, link, cursors, change)
                if frame is not None:
                    sent.append(frame)
                    taken_state = had
            clock.now += wait
            if not sent:
                continue
            leader.leader_frame(link, them.read(sent))
            assert them.held == taken_state, "the follower holds what the leader had"
            assert link.cursors_taken == {n: c.confirmed for n, c in them.held.items()}
