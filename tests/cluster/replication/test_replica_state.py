"""``ReplicaState`` on its own: no sockets, no event loop, a fake clock. Frames go from one
state to another through the real codec (``ReplicationReader``), and the logs are real
``PartitionLog``s. Each test names a rule the safety of replication rests on."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from nsqpy.cluster.replica_state import (
    FOLLOWER,
    LEADER,
    MAX_REPORTS,
    FollowerLink,
    Refused,
    ReplicaState,
)
from nsqpy.protocol.replication import (
    E_NOT_LEADER,
    E_NOT_REPLICA,
    E_OFFSET_MISMATCH,
    E_STALE_EPOCH,
    MAGIC,
    Ack,
    Append,
    Buffer,
    ChannelCursor,
    Cursors,
    CursorsAck,
    EpochEnd,
    Fetch,
    Heartbeat,
    Hello,
    MalformedFrame,
    ReplicationFrame,
    ReplicationReader,
)
from nsqpy.storage import PartitionLog
from nsqpy.storage.policy import SyncPolicy

from .conftest import lead

TOPIC = "t"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[dict[str, PartitionLog]]:
    opened: dict[str, PartitionLog] = {}
    yield opened
    for log in opened.values():
        log.close()


def decoded(bufs: Sequence[Buffer]) -> list[ReplicationFrame]:
    reader = ReplicationReader(expect_magic=True)
    reader.feed(MAGIC + b"".join(bytes(b) for b in bufs))
    return list(reader.frames())


def state(
    name: str, tmp: Path, logs: dict[str, PartitionLog], clock: FakeClock, **kw: object
) -> ReplicaState:
    sync = kw.pop("sync", None)
    policy = sync if isinstance(sync, SyncPolicy) else SyncPolicy()
    log = logs[name] = PartitionLog(tmp / name, segment_bytes=4096, sync=policy)
    changes: list[tuple[int, bool]] = []
    st = ReplicaState(name, TOPIC, 0, log, clock=clock, **kw)  # type: ignore[arg-type]
    st.on_change = lambda s: changes.append((s.committed, s.writable))
    st.changes = changes  # type: ignore[attr-defined]
    return st


def link_up(leader: ReplicaState, follower: ReplicaState, epoch: int) -> FollowerLink:
    """HELLO, catch-up by epoch and FETCH, as the shells do them: the follower's link."""
    link, _ = leader.accept(Hello(follower.node_id, "c", TOPIC, 0, epoch))
    while True:
        asked, query = follower.epoch_query()
        (answer,) = decoded(leader.leader_frame(link, *decoded([query])))  # type: ignore[arg-type]
        assert isinstance(answer, EpochEnd)
        if follower.on_epoch_end(asked, answer):
            break
    (fetch,) = decoded([follower.fetch_frame(epoch, 1 << 20)])
    assert isinstance(fetch, Fetch)
    assert leader.leader_frame(link, fetch) == []
    return link


def pair(
    tmp: Path,
    logs: dict[str, PartitionLog],
    clock: FakeClock,
    isr: Sequence[str] = ("L", "F"),
    **kw: object,
) -> tuple[ReplicaState, ReplicaState, FollowerLink]:
    """Leader L and follower F in epoch 1 (ISR ``isr``, as many replicas as it names but
    one more when F is not in it), F linked up and FETCHing from its end."""
    leader = state("L", tmp, logs, clock, **kw)
    follower = state("F", tmp, logs, clock, sync=kw.get("sync"))
    replicator = len(isr) if "F" in isr else len(isr) + 1
    catchup = () if "F" in isr else ("F",)
    leader.assign(LEADER, 1, isr, catchup, replicator)
    follower.assign(FOLLOWER, 1, isr, catchup, replicator)
    return leader, follower, link_up(leader, follower, 1)


def pump(leader: ReplicaState, link: FollowerLink, follower: ReplicaState, epoch: int) -> None:
    """What the leader has to send, taken by the follower, and its ACK taken back."""
    for frame in decoded(leader.leader_output(link)):
        assert isinstance(frame, Append)
        follower.take_append(frame, epoch)
    follower.log.flush()
    _, ack = follower.ack_frame(epoch)
    for frame in decoded([ack]):
        leader.leader_frame(link, frame)  # type: ignore[arg-type]


def caught_up_pair(
    tmp: Path,
    logs: dict[str, PartitionLog],
    clock: FakeClock,
    batches: int,
    revision: int,
    **kw: object,
) -> tuple[ReplicaState, ReplicaState, FollowerLink]:
    """L leading alone in its ISR (2 replicas), F a catch-up member that copied ``batches``
    batches and was reported caught up in the report written at ``revision``."""
    leader, follower, link = pair(tmp, logs, clock, ("L",), **kw)
    lead(leader.log, 1, batches)
    leader.local_progress()
    pump(leader, link, follower, 1)
    assert leader.caught_up() == ("F",)
    leader.reported(revision)
    return leader, follower, link


def test_a_new_state_commits_nothing_and_takes_no_write(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    st = state("L", tmp_path, logs, clock)
    lead(st.log, 1, 3)
    assert (st.committed, st.writable, st.readable_offset) == (0, False, 0)
    assert st.local_progress() is False, "no role yet: nothing committed"
    st.assign(LEADER, 1, ["L"], (), 1)
    assert st.writable and st.committed == st.log.flushed_offset == 30


def test_a_sole_isr_member_of_several_replicas_shows_what_it_holds_and_answers_no_publish(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """replicator 2, ISR of the leader alone: not writable. What it appended while it was
    (before the ISR shrank) is committed, so consumers read it (the coordinator elects only
    from the ISR: no failover can take it back), but the publish is not answered while one
    replica of two holds it: only once a member joins the ISR, holding it too."""
    leader, follower, link = pair(tmp_path, logs, clock)
    lead(leader.log, 1, 2)
    leader.local_progress()
    pump(leader, link, follower, 1)
    assert (leader.committed, leader.answerable) == (20, 20)
    lead(leader.log, 1, 1)  # appended while writable, not yet on F
    leader.assign(LEADER, 1, ["L"], ["F"], 2)  # F fell out of the ISR
    assert not leader.writable
    leader.local_progress()
    assert (leader.committed, leader.readable_offset, leader.answerable) == (30, 30, 20)
    assert leader.changes[-1] == (30, False)  # type: ignore[attr-defined]
    pump(leader, link, follower, 1)  # F, a catch-up member now, gets the batch
    assert leader.caught_up() == ("F",) and leader.answerable == 20
    leader.reported(2)
    leader.assign(LEADER, 1, ["L", "F"], (), 2)  # the coordinator lets F join
    assert leader.writable and (leader.committed, leader.answerable) == (30, 30)


def test_a_promoted_follower_reads_at_once_everything_its_new_isr_holds(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """Kafka's high watermark never goes back on a leader change, and a new leader raises it
    to what every member of its new ISR holds. Left the only ISR member (its old leader
    dead), it shows at once everything it holds, though the old leader never told it that
    the last batch was committed; with another ISR member that lacks the batch, it shows
    only what it was told, until that member has it too."""
    leader, follower, link = pair(tmp_path, logs, clock)
    lead(leader.log, 1, 3)
    leader.local_progress()
    pump(leader, link, follower, 1)  # F has 30, L commits 30
    assert (leader.committed, follower.committed) == (30, 0), "F was not told yet"
    pump(leader, link, follower, 1)  # F is told 30 (an empty APPEND: committed moved)
    assert (leader.committed, follower.committed) == (30, 30)
    lead(leader.log, 1, 1)
    for frame in decoded(leader.leader_output(link)):  # F gets 40, never ACKs it
        follower.take_append(frame, 1)  # type: ignore[arg-type]
    follower.log.flush()
    assert follower.log.flushed_offset == 40 and follower.committed == 30
    follower.assign(LEADER, 2, ["F", "G"], (), 3)  # G, another ISR member, has not 40 yet
    assert follower.writable and follower.readable_offset == 30
    follower.assign(LEADER, 2, ["F"], ("G",), 3)  # G dropped out: F alone
    assert not follower.writable
    assert follower.committed == 40 and follower.readable_offset == 40
    assert follower.changes[-1] == (40, False)  # type: ignore[attr-defined]


@pytest.mark.parametrize("joined", [True, False], ids=["joined", "not-joined"])
def test_a_member_reported_caught_up_is_waited_for_until_an_assignment_after_a_report_without_it(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock, joined: bool
) -> None:
    """The coordinator may make F an ISR member on the strength of a report naming it
    caught up (its txn guarded by that report's revision) until the next report is in etcd.
    So once F lags and a report leaves it out, the leader still waits for F until it has
    applied etcd's assignment as of that report's revision: in it F is an ISR member (it
    was joined meanwhile: waited for as one) or it never will be by that report (no longer
    waited for). The data-plane simulation found a leader that stopped waiting at the
    report and committed, on an ISR it had not seen yet, what F lacked (seed 6218)."""
    leader, _, _ = caught_up_pair(tmp_path, logs, clock, 2, 5, timeout=5.0)
    assert leader.committed == 20  # (the report naming F is in etcd at revision 5)
    # (the coordinator may join F now, at revision 6; the leader has not seen it)
    clock.now += 6.0  # F is silent: it lags, and the next report leaves it out
    assert leader.caught_up() == ()
    leader.reported(7)
    lead(leader.log, 1, 1)
    leader.local_progress()
    assert leader.committed == 20, "F may be an ISR member already: it lacks 20..30"
    leader.seen(6)  # an assignment older than the report without F changes nothing
    leader.local_progress()
    assert leader.committed == 20 and "F" in leader.waited()
    if joined:
        leader.assign(LEADER, 1, ["L", "F"], (), 2)
        leader.seen(7)
        leader.local_progress()
        assert leader.committed == 20 and leader.waited() == ("F",)
    else:
        leader.seen(7)
        leader.local_progress()
        assert leader.committed == 30 and leader.waited() == ()


def test_a_member_reported_caught_up_then_dropped_is_waited_for_until_a_report_without_it(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """F, reported caught up, is dropped from the partition (a cancelled move, a repair)
    and added back before the leader reports again: the coordinator may join it on the old
    report, whose guard still holds. So the leader keeps waiting for F, though no longer a
    holder, until a report without it is in etcd and seen (found in review: the waiting set
    was the old report's members that the applied assignment still named)."""
    leader, _, link = caught_up_pair(tmp_path, logs, clock, 2, 5)
    leader.seen(5)
    leader.assign(LEADER, 1, ["L"], (), 2)  # F dropped (revision 6)
    leader.seen(6)
    assert not link.open and "F" not in leader.peers
    lead(leader.log, 1, 1)
    leader.local_progress()
    assert leader.committed == 20, "F, re-added, could be joined on the report of revision 5"
    assert leader.caught_up() == (), "F is no catch-up member now: not reported"
    leader.reported(7)
    leader.local_progress()
    assert leader.committed == 20, "the report without F is in etcd, not yet seen"
    leader.seen(7)
    leader.local_progress()
    assert leader.committed == 30


def test_a_follower_that_links_again_is_trusted_for_its_durable_end_only_until_it_fetches(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """A new HELLO may come from a follower that restarted and lost what it had not
    synced: until its FETCH says where its log ends, the leader counts only the durable
    end it was told, so it does not report a catch-up member caught up on an end it may
    have lost."""
    leader, follower, link = pair(tmp_path, logs, clock, ("L",))
    lead(leader.log, 1, 3)
    leader.local_progress()
    pump(leader, link, follower, 1)  # F flushed 30, synced nothing: ACK (30, 0)
    assert (leader.peers["F"].end, leader.peers["F"].durable) == (30, 0)
    _, replaced = leader.accept(Hello("F", "c", TOPIC, 0, 1))  # F restarted
    assert replaced is link and not link.open
    assert leader.peers["F"].end == 0 and leader.caught_up() == ()
    follower.log.truncate(0)  # (what it lost)
    link = link_up(leader, follower, 1)
    pump(leader, link, follower, 1)
    assert leader.peers["F"].end == 30 and leader.caught_up() == ("F",)


def test_a_follower_cut_below_its_committed_offset_takes_that_offset_down_with_its_log(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """A leader that lost its log (a power loss before its fsync) may lead again in a new
    epoch with nothing of the follower's epochs (EPOCH_END -1, -1): the follower's log is
    emptied and begins again at 0. The committed offset it was told belonged to the old
    log: it comes down with it, so that, promoted later, it shows nothing it appends
    before its ISR holds it (the data-plane simulation found this, seed 14804)."""
    leader, follower, link = pair(tmp_path, logs, clock)
    lead(leader.log, 1, 3)
    leader.local_progress()
    pump(leader, link, follower, 1)
    pump(leader, link, follower, 1)
    assert follower.committed == 30
    follower.assign(FOLLOWER, 2, ["N", "F"], (), 2)  # N leads now, with nothing of epoch 1
    assert follower.on_epoch_end(1, EpochEnd(-1, -1))
    assert follower.log.high_watermark == 0 and follower.committed == 0
    assert follower.changes[-1] == (0, False)  # type: ignore[attr-defined]
    follower.assign(LEADER, 3, ["F", "N"], (), 2)  # N is gone before F fetched anything
    lead(follower.log, 3, 1)
    follower.local_progress()
    assert follower.readable_offset == 0, "nothing N does not hold is shown"


def test_an_ack_beyond_what_the_link_was_sent_is_refused_and_commits_nothing(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    leader = state("L", tmp_path, logs, clock)
    follower = state("F", tmp_path, logs, clock)
    leader.assign(LEADER, 1, ["L", "F"], (), 2)
    link, _ = leader.accept(Hello("F", "c", TOPIC, 0, 1))
    with pytest.raises(Refused) as before:
        leader.leader_frame(link, Ack(1, 0, 0))
    assert before.value.frame[1] == E_OFFSET_MISMATCH, "an ACK before any FETCH"
    follower.assign(FOLLOWER, 1)
    link = link_up(leader, follower, 1)
    lead(leader.log, 1, 2)
    leader.local_progress()
    assert [f.count for f in decoded(leader.leader_output(link))] == [20]  # type: ignore[union-attr]
    for lie in (Ack(1, 21, 0), Ack(1, 20, 21)):
        with pytest.raises(Refused) as refused:
            leader.leader_frame(link, lie)
        assert refused.value.frame[1] == E_OFFSET_MISMATCH
    assert leader.committed == 0 and leader.peers["F"].end == 0
    leader.leader_frame(link, Ack(1, 20, 10))
    assert leader.committed == 20
    with pytest.raises(Refused):  # going back on the same link
        leader.leader_frame(link, Ack(1, 10, 10))
    assert leader.committed == 20


def test_a_fetch_that_disagrees_with_the_leaders_epochs_is_refused(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """A FETCH carries the follower's last epoch: from an offset beyond where that epoch
    ends here it is refused (the follower must catch up by epoch first), so the leader
    never counts a follower as holding records it cannot hold."""
    leader = state("L", tmp_path, logs, clock)
    lead(leader.log, 1, 1)  # epoch 1: 0..10
    lead(leader.log, 3, 1)  # epoch 3: 10..20
    leader.assign(LEADER, 3, ["L", "F"], (), 2)
    link, _ = leader.accept(Hello("F", "c", TOPIC, 0, 3))
    for lie in (Fetch(3, 15, 1 << 20, 2), Fetch(3, 15, 1 << 20, 1), Fetch(3, 21, 1 << 20, 3)):
        with pytest.raises(Refused) as refused:
            leader.leader_frame(link, lie)
        assert refused.value.frame[1] in (E_OFFSET_MISMATCH, E_NOT_REPLICA)
    assert leader.peers["F"].end == 0
    leader.leader_frame(link, Fetch(3, 10, 1 << 20, 1))  # all of epoch 1: true
    assert leader.peers["F"].end == 10
    leader.leader_frame(link, Fetch(3, 15, 1 << 20, 3))
    assert leader.peers["F"].end == 15


def test_a_hello_from_a_node_holding_no_replica_or_of_another_epoch_is_refused(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    leader = state("L", tmp_path, logs, clock)
    with pytest.raises(Refused) as not_led:
        leader.accept(Hello("F", "c", TOPIC, 0, 0))
    assert not_led.value.frame[1] == E_NOT_LEADER
    leader.assign(LEADER, 4, ["L", "F"], ["C"], 3)
    cases = [("intruder", 4, E_NOT_REPLICA), ("L", 4, E_NOT_REPLICA), ("F", 3, E_STALE_EPOCH),
             ("F", 5, E_NOT_LEADER)]  # fmt: skip
    for node, epoch, code in cases:
        with pytest.raises(Refused) as refused:
            leader.accept(Hello(node, "c", TOPIC, 0, epoch))
        assert refused.value.frame[1] == code, (node, epoch)
    leader.accept(Hello("C", "c", TOPIC, 0, 4))  # a catch-up member is served
    first, _ = leader.accept(Hello("F", "c", TOPIC, 0, 4))
    second, replaced = leader.accept(Hello("F", "c", TOPIC, 0, 4))
    assert replaced is first and not first.open
    with pytest.raises(Refused):  # the replaced link's frames are not taken
        leader.leader_frame(first, Heartbeat())
    leader.leader_frame(second, Heartbeat())


def test_a_link_of_an_old_epoch_is_ended_and_its_frames_refused(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    leader, _follower, link = pair(tmp_path, logs, clock)
    with pytest.raises(MalformedFrame):
        leader.leader_frame(link, Ack(2, 0, 0))  # another epoch on this link
    leader.assign(LEADER, 2, ["L", "F"], (), 2)  # leading again, in a new epoch
    with pytest.raises(Refused) as ended:
        leader.leader_output(link)
    assert ended.value.frame[1] == E_NOT_LEADER
    with pytest.raises(Refused):
        leader.leader_frame(link, Ack(1, 0, 0))
    assert leader.peers == {}, "what it knew of followers in epoch 1 is forgotten"


def test_lagging_by_the_injected_clock(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """Silence, an APPEND un-acked, and a member never connected, each for longer than
    ``timeout`` by the clock (no sleeping): the rules ``lagging`` reports."""
    leader, follower, link = pair(tmp_path, logs, clock, ("L", "F", "G"), timeout=5.0)
    assert leader.lagging(leader.isr) == []
    clock.now += 5.5
    assert leader.lagging(leader.isr) == ["F", "G"], "silent F, G never connected"
    leader.leader_frame(link, Heartbeat())
    assert leader.lagging(leader.isr) == ["G"]
    lead(leader.log, 1, 1)
    sent = decoded(leader.leader_output(link))  # sent at 105.5, not acknowledged yet
    clock.now += 3
    leader.leader_frame(link, Heartbeat())
    assert leader.lagging(["F"]) == []
    clock.now += 3  # heard 0 s ago, but the APPEND is 6 s un-acked
    leader.leader_frame(link, Heartbeat())
    assert leader.lagging(["F"]) == ["F"]
    for frame in sent:
        follower.take_append(frame, 1)  # type: ignore[arg-type]
    pump(leader, link, follower, 1)  # (flushed and acknowledged)
    assert leader.lagging(["F"]) == []


def test_syncdisk_always_commits_durable_ends_only(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """Under ``always`` the leader commits on durable ends, whatever end a follower says
    it wrote; and a follower's link acknowledges no end beyond its durable one there
    (``durable_only``: what it appended while an fsync ran waits for its own)."""
    leader, follower, link = pair(tmp_path, logs, clock, sync=SyncPolicy(always=True))
    lead(leader.log, 1, 2)
    leader.log.sync()
    leader.local_progress()
    pump(leader, link, follower, 1)  # F flushed, not synced: ACK (20, 0)
    assert leader.peers["F"].end == 20 and leader.committed == 0, "written is not durable"
    assert follower.ack_frame(1, durable_only=True)[0] == (0, 0)
    follower.log.sync()
    _, ack = follower.ack_frame(1)
    leader.leader_frame(link, *decoded([ack]))  # type: ignore[arg-type]
    assert leader.committed == 20


def test_cursors_go_when_due_and_changed_and_count_once_acknowledged_on_the_current_link(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """CURSORS go on a link only once it FETCHed, every ``interval`` when the channels'
    cursors changed (or at once after ``cursors_due``); a channel's confirmed offset counts
    for ordered delivery (``replicated_confirmed``) only once every follower named
    acknowledged a CURSORS carrying it, on its current link. An ACK of a seq the link was
    never sent takes nothing; one of another epoch is refused."""
    leader, follower, link = pair(tmp_path, logs, clock, ("L", "F", "G"))
    now = [ChannelCursor("c", 5)]
    look = lambda: now  # noqa: E731
    fresh, _ = leader.accept(Hello("G", "c", TOPIC, 0, 1))
    assert leader.cursors_output(fresh, look, 1.0) is None, "G has not FETCHed"
    first = leader.cursors_output(link, look, 1.0)
    assert first is not None
    (frame,) = [f for f in decoded([first]) if not isinstance(f, Append)]  # (the commit first)
    assert isinstance(frame, Cursors) and frame.channels == (ChannelCursor("c", 5),)
    assert leader.cursors_output(link, look, 1.0) is None, "not due yet"
    assert leader.replicated_confirmed("c", ["F"]) == -1, "nothing acknowledged yet"
    leader.leader_frame(link, CursorsAck(1, 77))
    assert leader.replicated_confirmed("c", ["F"]) == -1, "a seq never sent takes nothing"
    clock.now += 1.5
    again = leader.cursors_output(link, look, 1.0)  # (unacknowledged for the interval)
    (resent,) = [f for f in decoded([again or b""]) if not isinstance(f, Append)]
    assert isinstance(resent, Cursors) and resent.channels == frame.channels, "sent again"
    assert resent.seq == frame.seq + 1
    (ack,) = decoded([follower.cursors_ack(frame, 1)])
    leader.leader_frame(link, ack)  # type: ignore[arg-type]
    assert leader.replicated_confirmed("c", ["F"]) == 5
    assert leader.replicated_confirmed("c", ["F", "G"]) == -1, "G took none"
    assert leader.replicated_confirmed("other", ["F"]) == -1
    clock.now += 1.5
    leader.leader_frame(link, *decoded([follower.cursors_ack(resent, 1)]))  # type: ignore[arg-type]
    assert leader.cursors_output(link, look, 1.0) is None, "due, but unchanged and taken"
    now = [ChannelCursor("c", 9)]
    assert leader.cursors_output(link, look, 1.0) is None, "changed, not due"
    leader.cursors_due(link)
    second = leader.cursors_output(link, look, 1.0)
    assert second is not None
    assert leader.replicated_confirmed("c", ["F"]) == 5, "not acknowledged yet"
    (later,) = decoded([second])
    assert isinstance(later, Cursors)
    leader.leader_frame(link, *decoded([follower.cursors_ack(later, 1)]))  # type: ignore[arg-type]
    assert leader.replicated_confirmed("c", ["F"]) == 9
    with pytest.raises(Refused):
        leader.leader_frame(link, CursorsAck(0, later.seq))
    with pytest.raises(MalformedFrame):
        follower.cursors_ack(later, 2)
    leader.accept(Hello("F", "c", TOPIC, 0, 1))  # F links again: its new link took nothing
    assert leader.replicated_confirmed("c", ["F"]) == -1


def test_reports_never_seen_are_merged_not_dropped(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """A leader that applies no assignment for long (its member rounds fail) keeps at most
    ``MAX_REPORTS`` reports apart; the oldest are merged, so a member they name is waited
    for as long as before, or longer, and never forgotten."""
    leader, _, _ = caught_up_pair(tmp_path, logs, clock, 1, 1)
    for revision in range(2, 2 + 3 * MAX_REPORTS):
        leader.reported(revision)  # (nothing built: reports naming nobody)
    assert len(leader.reports) == MAX_REPORTS
    assert leader.joining == {"F"}, "the first report's member is still waited for"
    leader.seen(2 + 3 * MAX_REPORTS)
    assert leader.joining == set()


def test_a_hello_as_a_replica_is_taken_only_from_its_incarnation_in_etcd(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """Whoever knows a follower's node id (``/cluster/stats`` lists them) could say it in a
    HELLO: the leader takes the link only from the start of that node etcd has (its
    ``NodeInfo.incarnation``), so the real follower's link is never closed by a stranger,
    and a node etcd does not have at all is refused. A node of an older version
    registers no incarnation: its HELLOs are taken as before."""
    registered = {"F": "f-start-2"}
    leader = state("L", tmp_path, logs, clock, incarnation_of=registered.get)
    leader.assign(LEADER, 1, ("L", "F", "G"), (), 3)
    link, _ = leader.accept(Hello("F", "c", TOPIC, 0, 1, "f-start-2"))
    for forged in ("", "f-start-1", "guessed"):
        with pytest.raises(Refused) as refused:
            leader.accept(Hello("F", "c", TOPIC, 0, 1, forged))
        assert refused.value.frame[1] == E_NOT_REPLICA
        assert "not from its incarnation" in refused.value.frame[2]
        assert link.open and leader.peers["F"].link is link  # (the real one stays)
    with pytest.raises(Refused, match="is not registered"):
        leader.accept(Hello("G", "c", TOPIC, 0, 1, "g"))
    registered["F"] = "f-start-3"  # F restarted: its new start takes over
    again, replaced = leader.accept(Hello("F", "c", TOPIC, 0, 1, "f-start-3"))
    assert replaced is link and not link.open and again.open
    registered["G"] = ""  # an older version
    leader.accept(Hello("G", "c", TOPIC, 0, 1))


def test_a_moved_commit_lingers_for_records_to_carry_it_and_goes_before_any_cursors(
    tmp_path: Path, logs: dict[str, PartitionLog], clock: FakeClock
) -> None:
    """A committed offset that moved with nothing new to send waits ``linger`` for an
    APPEND of records to carry it (``commit_due_in`` says how long), then goes in an empty
    APPEND; records sent meanwhile carry it and nothing is owed. A CURSORS sent while it is
    owed goes after it: a follower caps a cursor at the committed offset it knows."""
    leader, follower, link = pair(tmp_path, logs, clock)
    lead(leader.log, 1, 1)
    leader.local_progress()
    pump(leader, link, follower, 1)  # F takes 0..10 and ACKs: the commit moves to 10
    assert leader.committed == 10 and follower.committed < 10
    assert leader.leader_output(link, 0.005) == [], "it waits for records"
    assert leader.commit_due_in(link, 0.005) == pytest.approx(0.005)
    clock.now += 0.002
    assert leader.commit_due_in(link, 0.005) == pytest.approx(0.003)
    lead(leader.log, 1, 1)  # records come: they carry it
    leader.local_progress()
    (append,) = decoded(leader.leader_output(link, 0.005))
    assert isinstance(append, Append) and (append.count, append.committed_offset) == (10, 10)
    assert leader.commit_due_in(link, 0.005) is None, "nothing owed"
    follower.take_append(append, 1)
    follower.log.flush()
    leader.leader_frame(link, *decoded([follower.ack_frame(1)[1]]))  # type: ignore[arg-type]
    assert leader.committed == 20
    assert leader.leader_output(link, 0.005) == []
    clock.now += 0.005  # the linger is up: it goes alone
    (alone,) = decoded(leader.leader_output(link, 0.005))
    assert isinstance(alone, Append) and (alone.count, alone.committed_offset) == (0, 20)
    assert leader.commit_due_in(link, 0.005) is None
    lead(leader.log, 1, 1, per_batch=5)
    leader.local_progress()
    pump(leader, link, follower, 1)  # (carried, then owed again: 25)
    assert leader.committed == 25 and leader.leader_output(link, 0.005) == []
    cursors = leader.cursors_output(link, lambda: [ChannelCursor("c", 25)], 1.0)
    assert cursors is not None
    first, second = decoded([cursors])
    assert isinstance(first, Append) and (first.count, first.committed_offset) == (0, 25)
    assert isinstance(second, Cursors) and second.channels == (ChannelCursor("c", 25),)
    assert leader.commit_due_in(link, 0.005) is None, "the CURSORS took it"
