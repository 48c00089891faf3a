"""The data-plane simulation (``data_sim``) over many seeds: acknowledged and shown records
are on every ISR member after every step, an offset shown never changes, every lie is
refused, and the logs end equal. The simulation runs the real ``ReplicaState``; the last
two tests show that its checker catches the defects found in earlier versions (a node that
had just become leader showed its consumers its local end; a leader stopped waiting for a
member joining the ISR too early)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.cluster import replica_state
from nsqpy.cluster.replica_state import LEADER, ReplicaState

from .data_sim import JOIN_SEEDS, PROMOTION_SEEDS, SEEDS_THAT_FOUND_BUGS, run_schedule


@pytest.fixture
def quick_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder in memory where the machine has one (/dev/shm): the simulation models power
    loss itself (a log keeps what it fsynced), so real fsyncs would only cost time."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=shm, prefix="nsqpy-sim-") as d:
        yield Path(d)


def test_two_hundred_schedules(quick_dir: Path) -> None:
    elections = crashes = acked = renewals = lies = 0
    for seed in range(200):
        world = run_schedule(seed, quick_dir / f"s{seed}")
        elections += world.elections
        crashes += world.crashes
        renewals += world.renewals
        acked += len(world.acked)
        lies += world.lies
    print(
        f"\n200 schedules: {crashes} power losses, {elections} elections, {renewals} leaders"
        f" back in a new epoch, {acked} acknowledged, {lies} lies refused"
    )
    assert crashes > 50 and elections > 50 and renewals > 20 and acked > 10_000 and lies > 100


def test_a_schedule_is_reproducible(quick_dir: Path) -> None:
    one = run_schedule(7, quick_dir / "a")
    two = run_schedule(7, quick_dir / "b")
    assert (one.acked, one.shown, one.elections) == (two.acked, two.shown, two.elections)


@pytest.mark.parametrize("seed", SEEDS_THAT_FOUND_BUGS)
def test_the_seeds_that_found_bugs(seed: int, quick_dir: Path) -> None:
    run_schedule(seed, quick_dir / "s")


def test_the_checker_catches_a_new_leader_that_shows_its_local_end(
    quick_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule as it was before the replica state owned it: a partition that became
    leader let its consumers read to its flushed end until the ISR was known. With that
    rule patched back in, the checker fails on the seeds that found it."""
    assign = ReplicaState.assign

    def flawed(self: ReplicaState, role: str, epoch: int, *args: object, **kw: object) -> None:
        promoted = role == LEADER and (self.role, self.epoch) != (role, epoch)
        assign(self, role, epoch, *args, **kw)  # type: ignore[arg-type]
        if promoted:
            self.committed = max(self.committed, self.log.flushed_offset)

    monkeypatch.setattr(replica_state.ReplicaState, "assign", flawed)
    each_fails(PROMOTION_SEEDS, quick_dir)


def test_the_checker_catches_a_leader_that_stops_waiting_for_a_joining_member_too_early(
    quick_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule as it was: a catch-up member reported caught up was waited for only until
    the next report (without it) was in etcd, whether or not the leader had applied the
    assignment of that revision, in which the coordinator may have made it an ISR member.
    With that rule patched back in, the checker fails on the seeds that found it."""

    def flawed(self: ReplicaState, revision: int) -> None:
        self.reports = [(revision, frozenset(self.joining_next))]
        self.joining_next = set()

    monkeypatch.setattr(replica_state.ReplicaState, "reported", flawed)
    each_fails(JOIN_SEEDS, quick_dir)


def each_fails(seeds: tuple[int, ...], folder: Path) -> None:
    """Each seed's schedule fails the checker: a record acknowledged or shown that an ISR
    member lacks."""
    for seed in seeds:
        with pytest.raises(AssertionError, match="lacks"):
            run_schedule(seed, folder / f"flawed{seed}")


def test_the_checker_catches_a_publish_answered_while_a_minority_holds_it(
    quick_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publishes answered up to the committed offset whatever the ISR (a leader that is
    its own whole ISR of three replicas answering alone): the checker's majority rule
    fails at once."""
    flawed = property(lambda self: self.committed, lambda self, value: None)
    monkeypatch.setattr(replica_state.ReplicaState, "answerable", flawed, raising=False)
    with pytest.raises(AssertionError, match="answered while only"):
        for seed in range(20):
            run_schedule(seed, quick_dir / f"minority{seed}")
