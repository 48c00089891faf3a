"""A partition log's leader-epoch history and the questions the catch-up protocol asks of it.

Owns the pure functions over a history: a list of (epoch, first offset), epochs strictly
increasing and first offsets non-decreasing, one entry per epoch that has records (the
offset of its first record) and last, maybe, an epoch begun at the log's end with none yet
(Kafka's leader-epoch checkpoint; ``PartitionLog`` keeps it in ``<dir>/epochs``). Files
and policy live in ``nsqpy.storage.log``. Imports only the standard library.

How a follower's log is made equal to its leader's (KIP-101/KIP-279, Raft's log matching)::

    while True:
        asked = follower.last_epoch
        answer = <the leader's log>.end_offset_for_epoch(asked)   # over the wire
        if follower.match_leader(asked, answer):                  # truncates as needed
            break
    # then pull: leader.read_raw(follower.high_watermark) -> follower.append_raw(...)

Each round that does not finish drops at least the follower's last epoch, so the loop
ends. Offsets below the follower's end are then the leader's, byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence

NO_EPOCH = (-1, -1)  # end_offset_for_epoch: no epoch at or below the one asked is known here


def end_offset_for_epoch(
    epochs: Sequence[tuple[int, int]], epoch: int, end: int
) -> tuple[int, int]:
    """(the largest known epoch <= ``epoch``, where it ends: the first offset of the next
    epoch, or ``end`` for the last one); ``NO_EPOCH`` when ``epoch`` is below every epoch
    known (or none is): nothing of this log can be kept by the one asking."""
    found = NO_EPOCH
    for i, (e, _first) in enumerate(epochs):
        if e > epoch:
            break
        found = (e, epochs[i + 1][1] if i + 1 < len(epochs) else end)
    return found


def trimmed(epochs: Sequence[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    """The history of a log cut to end at ``end``: epochs whose first offset is below it
    (an epoch begun at ``end`` with no record goes too: that leadership is over)."""
    return [ef for ef in epochs if ef[1] < end]


__all__ = ["NO_EPOCH", "end_offset_for_epoch", "trimmed"]
