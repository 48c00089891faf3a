"""A channel partition's paths beyond NSQ: dead letters, TTL expiry and the depth bound's drops.

Owns ``PolicyPaths``, which a ``ChannelPartition`` (``broker.channel_partition``) creates and
keeps as ``policy_paths``, with the counts of what took each path. It is given the channel
partition as its policy's callbacks see it (``PolicedChannel``: its name, its partition and
its ``ChannelPolicy``, read at each call since a channel shares one among its partitions),
its cursor, in-flight table and ``ChannelDeferral``, and its ``confirm``. After a failed
attempt (timeout, REQ, a consumer gone) a message that used its last attempt goes to the
dead-letter topic and is confirmed here (``dead_letter``); a message past its topic's TTL
before its first delivery is confirmed unread and counted (``expire``: in delivery, and by
the sweep ``expire_head`` without consumers, which reads what the channel reads: the topic
log, or on an ephemeral topic the channel's own memory queue); ``drop_oldest`` confirms the
oldest unread messages for a full topic under the ``drop_oldest`` policy. Must not import
asyncio or any server, nor the channel modules above it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from nsqpy.broker.channel_deferral import ChannelDeferral
from nsqpy.broker.inflight import FROM_DEFERRED, InFlight, stored_ext
from nsqpy.broker.policy import PolicedChannel
from nsqpy.errors import StorageError
from nsqpy.storage import CursorState, OffsetOutOfRange


class PolicyPaths:
    """Dead letters, TTL expiry and depth drops of one channel partition, and their counts."""

    def __init__(
        self,
        channel: PolicedChannel,
        cursor: CursorState,
        in_flight: dict[int, InFlight],
        deferral: ChannelDeferral,
        confirm: Callable[[int], bool],
    ) -> None:
        self.channel = channel
        self.cursor = cursor
        self.in_flight = in_flight
        self.deferral = deferral
        self.confirm = confirm  # the channel's: confirms in the cursor, counts for its save
        self.dead_letter_count = 0
        self.expired_count = 0
        self.depth_dropped_count = 0

    def expire(self, offset: int, now: int, *, confirm: bool = True) -> None:
        """Past the topic's TTL before its first delivery: confirmed (unless it left the
        cursor's window for the deferred set), never delivered."""
        if confirm:
            self.confirm(offset)
        self.expired_count += 1
        tracer = self.channel.policy.tracer
        if tracer is not None:
            tracer.channel_event(self.channel, offset, "expired", None, 0, now)

    def dead_letter(self, offset: int, item: InFlight, reason: str, now: int) -> bool:
        """A message that used its last attempt: to the dead-letter topic if the policy has
        one that takes it. True when it went there; it is then confirmed here (or its
        deferred entry removed) and gone from the in-flight table. A deferred entry the
        store refuses to remove (a full disk) stays leased: due again when its lease ends.
        """
        channel = self.channel
        policy = channel.policy
        if policy.dead_letter is None or not policy.dead_letter(channel, offset, item, reason, now):
            return False
        self.in_flight.pop(offset, None)
        if item.source == FROM_DEFERRED:
            deferral = self.deferral
            deferral.leased -= 1
            try:
                deferral.deferred.remove(offset)
            except StorageError as exc:
                deferral.storage_failed("failed to remove a dead-lettered deferred message", exc)
        else:
            self.confirm(offset)
        self.dead_letter_count += 1
        if policy.tracer is not None:
            policy.tracer.channel_event(channel, offset, "dead_lettered", item.client,
                                        item.attempts, now, reason, stored_ext(item))  # fmt: skip
        return True

    def expire_head(self, now: int, batch: int = 64) -> int:
        """The TTL sweep: confirm the expired messages at the head of the unread log.

        Consumers or not, so /stats shows them gone. Stops at the first live message;
        passes a DPUB already deferred (``next_ahead``) and defers one not yet deferred.
        """
        ttl = self.channel.policy.ttl_ns
        if not ttl:
            return 0
        deferral = self.deferral
        source = deferral.source
        cutoff, cursor, end, done = now - ttl, self.cursor, source.readable_end, 0
        # A channel of an ephemeral topic reads its own queue: the topic forgot what it took.
        reader = source.log if deferral.queue is None else deferral.queue
        while cursor.next_read < end:
            if cursor.ranges:
                deferral.skip_confirmed()
                if cursor.next_read >= end:
                    break
            try:
                frames = reader.read_frames(cursor.next_read, min(batch, end - cursor.next_read))
            except (OffsetOutOfRange, StorageError) as exc:
                deferral.read_failed(exc)
                continue
            if not frames:
                break
            skip_at = deferral.next_ahead()
            for offset, timestamp, deliver_at, _flags, body, _ext in frames:
                if offset >= skip_at and deferral.take_ahead(offset):
                    skip_at = deferral.next_ahead()
                elif cursor.is_confirmed(offset):
                    pass
                elif deliver_at > now:
                    if not deferral.defer_read(offset, deliver_at, timestamp, body):
                        return done  # the delayed store refused it: read again later
                elif (deliver_at or timestamp) >= cutoff:
                    return done
                else:
                    self.expire(offset, now)
                    done += 1
                cursor.next_read = offset + 1
        return done

    def drop_oldest(self, count: int, end: int) -> int:
        """A depth bound's ``drop_oldest``: confirm the ``count`` oldest unread offsets < end
        (not the DPUBs already deferred: they are not in the depth)."""
        cursor, deferral, confirm = self.cursor, self.deferral, self.confirm
        offset = max(cursor.next_read, deferral.source.log.low_watermark)
        ahead = deferral.ahead
        i = bisect_left(ahead, offset, deferral.ahead_at)
        skip = ahead[i] if i < len(ahead) else -1
        dropped = 0
        while dropped < count and offset < end:
            if offset == skip:
                i += 1
                skip = ahead[i] if i < len(ahead) else -1
            elif confirm(offset):
                dropped += 1
            offset += 1
        self.depth_dropped_count += dropped
        return dropped
