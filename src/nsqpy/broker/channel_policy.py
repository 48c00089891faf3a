"""A channel's paths beyond NSQ: dead letters, TTL expiry and the depth bound's drops.

Owns ``PolicyPaths``, the part of ``Channel`` that its ``ChannelPolicy`` drives: after a
failed attempt (timeout, REQ, a consumer gone) a message that used its last attempt goes
to the dead-letter topic and is confirmed here; a message past its topic's TTL before
its first delivery is confirmed unread and counted (in delivery, and by the sweep
``expire_head`` without consumers, which reads what the channel reads: the topic log, or
on an ephemeral topic the channel's own memory queue); ``drop_oldest`` confirms the
oldest unread messages for a full topic under the ``drop_oldest`` policy. ``Channel``
inherits it and provides the attributes and cursor helpers declared below. Must not
import asyncio or any server.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, cast

from nsqpy.broker.policy import ChannelPolicy
from nsqpy.errors import StorageError
from nsqpy.storage import CursorState, OffsetOutOfRange

if TYPE_CHECKING:
    from array import array

    from nsqpy.broker.channel import Channel, InFlight
    from nsqpy.broker.deferred import Deferred
    from nsqpy.broker.memqueue import MemoryQueue
    from nsqpy.broker.partition import Partition

FROM_LOG, FROM_DEFERRED = 0, 1  # where an in-flight message came from


class PolicyPaths:
    """Mixed into ``Channel``."""

    topic: Partition  # the partition this cursor reads
    cursor: CursorState
    queue: MemoryQueue | None
    deferred: Deferred
    in_flight: dict[int, InFlight]
    policy: ChannelPolicy
    dead_letter_count: int
    expired_count: int
    depth_dropped_count: int
    _leased: int
    _unsaved: int
    _ahead: array[int]  # DPUBs deferred on arrival, ahead of the read (``DeferralPaths``)
    _ahead_at: int

    def _confirm(self, offset: int) -> None:
        raise NotImplementedError

    def _defer(
        self, offset: int, deliver_at: int, attempts: int, timestamp: int, body: bytes
    ) -> None:
        raise NotImplementedError

    def _defer_read(self, offset: int, deliver_at: int, timestamp: int, body: bytes) -> bool:
        raise NotImplementedError

    def _skip_confirmed(self) -> None:
        raise NotImplementedError

    def _read_failed(self, exc: Exception) -> None:
        raise NotImplementedError

    def _storage_failed(self, what: str, exc: Exception) -> None:
        raise NotImplementedError

    def _ahead_next(self) -> int:
        raise NotImplementedError

    def _take_ahead(self, offset: int) -> bool:
        raise NotImplementedError

    @property
    def _channel(self) -> Channel:
        return cast("Channel", self)

    def _expire(self, offset: int, now: int, *, confirm: bool = True) -> None:
        """Past the topic's TTL before its first delivery: confirmed (unless it left the
        cursor's window for the deferred set), never delivered."""
        if confirm:
            self._confirm(offset)
        self.expired_count += 1
        tracer = self.policy.tracer
        if tracer is not None:
            tracer.channel_event(self._channel, offset, "expired", None, 0, now)

    def _exhausted(self, offset: int, item: InFlight, reason: str, now: int) -> bool:
        """After a failed attempt: dead-letter the message when it used its last attempt.

        True when it went to the dead-letter topic; it is then confirmed here (or its
        deferred entry removed) and gone from the in-flight table. A deferred entry the
        store refuses to remove (a full disk) stays leased: due again when its lease ends.
        """
        policy = self.policy
        if not policy.max_attempts or item.attempts < policy.max_attempts:
            return False
        if policy.dead_letter is None or not policy.dead_letter(
            self._channel, offset, item, reason, now
        ):
            return False
        self.in_flight.pop(offset, None)
        if item.source == FROM_DEFERRED:
            self._leased -= 1
            try:
                self.deferred.remove(offset)
            except StorageError as exc:
                self._storage_failed("failed to remove a dead-lettered deferred message", exc)
        else:
            self._confirm(offset)
        self.dead_letter_count += 1
        if policy.tracer is not None:
            policy.tracer.channel_event(
                self._channel, offset, "dead_lettered", item.client, item.attempts, now, reason
            )
        return True

    def expire_head(self, now: int, batch: int = 64) -> int:
        """The TTL sweep: confirm the expired messages at the head of the unread log.

        Consumers or not, so /stats shows them gone. Stops at the first live message;
        passes a DPUB already deferred (``_ahead_next``) and defers one not yet deferred.
        """
        ttl = self.policy.ttl_ns
        if not ttl:
            return 0
        cutoff, cursor, end, done = now - ttl, self.cursor, self.topic.readable_end, 0
        # A channel of an ephemeral topic reads its own queue: the topic forgot what it took.
        read_frames = self.topic.log.read_frames if self.queue is None else self.queue.read_frames
        while cursor.next_read < end:
            if cursor.ranges:
                self._skip_confirmed()
                if cursor.next_read >= end:
                    break
            try:
                frames = read_frames(cursor.next_read, min(batch, end - cursor.next_read))
            except (OffsetOutOfRange, StorageError) as exc:
                self._read_failed(exc)
                continue
            if not frames:
                break
            skip_at = self._ahead_next()
            for offset, timestamp, deliver_at, _flags, body in frames:
                if offset >= skip_at and self._take_ahead(offset):
                    skip_at = self._ahead_next()
                elif cursor.is_confirmed(offset):
                    pass
                elif deliver_at > now:
                    if not self._defer_read(offset, deliver_at, timestamp, body):
                        return done  # the delayed store refused it: read again later
                elif (deliver_at or timestamp) >= cutoff:
                    return done
                else:
                    self._expire(offset, now)
                    done += 1
                cursor.next_read = offset + 1
        return done

    def drop_oldest(self, count: int, end: int) -> int:
        """A depth bound's ``drop_oldest``: confirm the ``count`` oldest unread offsets < end
        (not the DPUBs already deferred: they are not in the depth)."""
        cursor = self.cursor
        offset = max(cursor.next_read, self.topic.log.low_watermark)
        ahead = self._ahead
        i = bisect_left(ahead, offset, self._ahead_at)
        skip = ahead[i] if i < len(ahead) else -1
        dropped = 0
        while dropped < count and offset < end:
            if offset == skip:
                i += 1
                skip = ahead[i] if i < len(ahead) else -1
            elif cursor.confirm(offset):
                dropped += 1
            offset += 1
        self._unsaved += dropped
        self.depth_dropped_count += dropped
        return dropped
