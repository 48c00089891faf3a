"""The broker's features beyond NSQ: dead letters, TTL, depth bounds and tracing, wired in.

Owns ``Features``, which the ``Broker`` creates (giving it its settings, its health state,
its topics to read and a ``Publisher`` for dead letters) and calls at a few points: when a
topic or channel is created (``attach_topic``/``attach_channel`` give the channel its
``ChannelPolicy``), before and after a publish (``before_publish`` enforces a topic's
maximum depth, ``after_publish`` records traced publishes), in housekeeping (the TTL
sweep) and at close. It applies the settings of ``features.json`` (``broker.policy``),
changes them for the HTTP API (``set_*``), publishes dead letters (with their reason and
attempts in the record's JSON headers), and adds the extra fields of ``/stats``. A save of
``features.json`` that failed (a full disk) is reported to the health state and written
again by ``retry_saves`` (the broker's timer) until it succeeds, so no change is lost at
the next restart and a deleted topic's settings are not inherited by a new one.

Partitions: a channel's policy is one object shared by the cursors of all its partitions
(``Channel``), so a setting applies to every partition at once; counts are summed for
``/stats``. A dead letter keeps the original record's trace id and partition key (the key
picks its partition in the dead-letter topic). A depth bound counts the whole topic (all
partitions); ``drop_oldest`` takes from the deepest partitions first (``spread``), and
only past what they hold drops new messages of the partition they go to.
Must not import asyncio or any server, nor the broker (``Publisher`` is what it needs of it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nsqpy.broker.channel import Channel
from nsqpy.broker.health import Health, StorageFailed
from nsqpy.broker.policy import (
    DEPTH_POLICIES,
    ChannelSettings,
    PolicedChannel,
    PolicyFile,
    TopicFull,
    TopicSettings,
    dead_letter_name,
    is_dead_letter_topic,
    valid_dead_letter_topic,
)
from nsqpy.broker.trace import TracedPartition, Tracer
from nsqpy.errors import NotLeader, StorageError
from nsqpy.protocol.message import encode_message_id
from nsqpy.storage import Entry

if TYPE_CHECKING:
    from nsqpy.broker.client import Client
    from nsqpy.broker.inflight import InFlight
    from nsqpy.broker.partition import Partition
    from nsqpy.broker.topic import Topic

log = logging.getLogger("nsqpy.broker")

SAVE_FAILED = "failed to save features.json"


def spread(excess: int, depths: Sequence[int], target: int) -> list[int]:
    """How many of ``excess`` to take from each partition: from the deepest first, leveling
    them; what is more than they all hold is taken from ``target`` (the new messages)."""
    take = [0] * len(depths)
    total = sum(depths)
    if excess >= total:
        take = list(depths)
        take[target] += excess - total
        return take

    def above(level: int) -> int:
        return sum(max(0, d - level) for d in depths)

    low, high = 0, max(depths)  # the least level whose excess above fits in ``excess``
    while low < high:
        mid = (low + high) // 2
        if above(mid) <= excess:
            high = mid
        else:
            low = mid + 1
    left = excess - above(low)
    for i, depth in enumerate(depths):
        take[i] = max(0, depth - low)
        if left and depth >= low:
            take[i] += 1
            left -= 1
    return take


class Publisher(Protocol):
    """Where dead letters are published (``Broker``)."""

    def topic(self, name: str) -> Topic: ...  # created when missing

    def append_entries(
        self, topic: Topic, entries: Sequence[Entry], partition: int = ..., *, source: str = ...
    ) -> object: ...


class Features:
    """Settings, dead letters, depth bounds and tracing of one broker.

    Given the data path (``features.json``, the trace store), the health state its saves
    report to, the broker's topics by name (read only), the ``Publisher`` of dead letters,
    and the flags' defaults. The broker calls ``topic_deleted``/``channel_deleted`` when it
    deletes one."""

    def __init__(
        self,
        data_path: Path,
        health: Health,
        topics: Mapping[str, Topic],
        publisher: Publisher,
        *,
        dead_letter_suffix: str,
        max_attempts: int,
        trace_max_records: int,
    ) -> None:
        self.health = health
        self.topics = topics
        self.publisher = publisher
        self.suffix = dead_letter_suffix
        self.default_attempts = max_attempts
        self.settings = PolicyFile(data_path)
        self.settings.load()
        self.tracer = Tracer(data_path, trace_max_records, health=health)
        self.topic_dropped: dict[str, int] = {}  # drop_oldest while a topic had no channel
        self.unsaved = False  # features.json failed to be written: retry_saves writes it

    # -- attaching settings ----------------------------------------------------------

    def _topic_settings(self, name: str) -> TopicSettings | None:
        return self.settings.topics.get(name)

    def attach_topic(self, topic: Topic) -> None:
        for channel in topic.channels.values():
            self.attach_channel(topic, channel)

    def attach_channel(self, topic: Topic, channel: Channel) -> None:
        """Give ``channel`` (all its partitions) the policy its settings, its topic's and
        the flags make."""
        ts = self._topic_settings(topic.name)
        cs = ts.channels.get(channel.name) if ts is not None else None
        policy = channel.policy
        attempts = self.default_attempts
        if is_dead_letter_topic(topic.name, self.suffix):
            attempts = 0  # the flag's default does not chain dead letters
        if cs is not None and cs.max_attempts is not None:
            attempts = cs.max_attempts
        target = (cs.dead_letter_topic if cs is not None else "") or dead_letter_name(
            topic.name, self.suffix
        )
        if attempts and not valid_dead_letter_topic(target, topic.name):
            log.warning(
                "channel %s/%s: dead-letter topic %r is not a valid topic name; "
                "messages are requeued as NSQ does",
                topic.name, channel.name, target,
            )  # fmt: skip
            attempts = 0
        policy.max_attempts = attempts
        policy.dead_letter_topic = target if attempts else ""
        policy.dead_letter = self.dead_letter if attempts else None
        policy.ttl_ns = ts.ttl_ms * 1_000_000 if ts is not None else 0
        traced = (ts is not None and ts.trace) or (cs is not None and cs.trace)
        policy.tracer = self.tracer if traced else None

    def _changed(self, topic: Topic) -> None:
        """Apply a changed setting, then save it (StorageFailed, reported to the health
        state, when ``features.json`` cannot be written: the setting holds, and
        ``retry_saves`` writes it once the disk takes it)."""
        self.attach_topic(topic)
        failure = self._save()
        if failure is not None:
            raise StorageFailed(str(failure)) from failure

    def _save(self) -> OSError | None:
        """Write ``features.json``; a failure is reported to the health state, the file
        left for ``retry_saves``, and returned."""
        health = self.health
        try:
            self.settings.save()
        except OSError as exc:
            self.unsaved = True
            health.failed(SAVE_FAILED, exc)
            return exc
        self.unsaved = False
        if health.error:
            health.ok(SAVE_FAILED)
        return None

    def _save_quietly(self) -> None:
        """Save after a deletion: a failure is retried by ``retry_saves``."""
        self._save()

    def retry_saves(self) -> None:
        """Timer: write ``features.json`` again if a save of it failed."""
        if self.unsaved:
            self._save()

    def topic_deleted(self, topic: Topic) -> None:
        self.topic_dropped.pop(topic.name, None)
        self.tracer.forget_topic(topic.name)
        if self.settings.forget_topic(topic.name):
            self._save_quietly()

    def channel_deleted(self, topic: Topic, channel: Channel) -> None:
        if not topic.deleted and self.settings.forget_channel(topic.name, channel.name):
            self._save_quietly()

    # -- settings from the HTTP API --------------------------------------------------

    def set_max_attempts(
        self, topic: Topic, channel: str, max_attempts: int | None, dead_letter_topic: str
    ) -> ChannelSettings:
        """Set a channel's attempts limit (None = the flag's) and dead-letter topic ("" =
        ``<topic><suffix>``). The caller has checked both."""
        settings = self.settings.channel(topic.name, channel)
        settings.max_attempts = max_attempts
        settings.dead_letter_topic = dead_letter_topic
        self._changed(topic)
        return settings

    def set_ttl(self, topic: Topic, ttl_ms: int) -> None:
        self.settings.topic(topic.name).ttl_ms = ttl_ms
        self._changed(topic)

    def set_max_depth(self, topic: Topic, max_depth: int, depth_policy: str) -> None:
        if depth_policy not in DEPTH_POLICIES:
            raise ValueError(f"depth policy must be one of {DEPTH_POLICIES}, got {depth_policy!r}")
        settings = self.settings.topic(topic.name)
        settings.max_depth = max_depth
        settings.depth_policy = depth_policy
        self._changed(topic)

    def set_trace(self, topic: Topic, channel: str | None, on: bool) -> None:
        if channel is None:
            self.settings.topic(topic.name).trace = on
        else:
            self.settings.channel(topic.name, channel).trace = on
        self._changed(topic)

    # -- publishing ------------------------------------------------------------------

    @staticmethod
    def _pending(topic: Topic) -> int:
        """Appended to the topic's partitions but not yet flushed."""
        return sum(p.log.high_watermark - p.log.flushed_offset for p in topic.partitions)

    def bound_depth(self, topic: Topic) -> int:
        """The depth a maximum bounds: the topic's own plus its deepest channel's, plus
        what is appended but not yet flushed (all partitions)."""
        deepest = max((c.depth for c in topic.channels.values()), default=0)
        return topic.depth + deepest + self._pending(topic)

    def before_publish(self, topic: Topic, part: Partition | None, count: int) -> None:
        """Enforce the topic's maximum depth for ``count`` new messages that go to ``part``
        (TopicFull or drop). With ``part`` None only the ``refuse`` check runs: a publish
        split over partitions is checked whole before any part of it is appended."""
        settings = self._topic_settings(topic.name)
        if settings is None or not settings.max_depth:
            return
        depth = self.bound_depth(topic)
        if depth + count <= settings.max_depth:
            return
        if settings.depth_policy == "refuse":
            raise TopicFull(
                f"topic {topic.name} is full: depth {depth} + {count} > max depth "
                f"{settings.max_depth}"
            )
        if part is not None:
            self._drop_oldest(topic, part, count, settings.max_depth)

    def _drop_oldest(self, topic: Topic, part: Partition, count: int, max_depth: int) -> None:
        pending = self._pending(topic)
        target = topic.partitions.index(part)  # (a cluster node holds some partitions)
        if not topic.channels:
            excess = topic.depth + pending + count - max_depth
            parts = topic.partitions
            for p, n in zip(parts, spread(excess, [p.depth for p in parts], target), strict=True):
                if n:
                    p.buffer_start = max(p.buffer_start, p.log.low_watermark) + n
            self.topic_dropped[topic.name] = self.topic_dropped.get(topic.name, 0) + excess
            return
        held = topic.depth
        for channel in topic.channels.values():
            excess = held + channel.depth + pending + count - max_depth
            if excess <= 0:
                continue
            takes = spread(excess, [c.depth for c in channel.parts], target)
            for i, (cpart, n) in enumerate(zip(channel.parts, takes, strict=True)):
                # the new messages (of the target partition) are dropped too past the bound
                end = cpart.topic.log.high_watermark + (count if i == target else 0)
                if n:
                    cpart.policy_paths.drop_oldest(n, end)

    def after_publish(
        self,
        topic: Topic,
        part: Partition,
        first: int,
        count: int,
        source: Client | str | None,
        trace_ids: Sequence[int] | int,
        now: int,
    ) -> None:
        """``count`` messages from ``first`` were appended to ``part`` (trace IDs: one for
        all, or one each): a traced topic records them."""
        settings = self._topic_settings(topic.name)
        if settings is not None and settings.trace:
            self.tracer.published(part, first, count, source, trace_ids, now)

    # -- dead letters ----------------------------------------------------------------

    @staticmethod
    def _original(part: TracedPartition, offset: int) -> tuple[dict[str, object], int, bytes]:
        """The message's own JSON headers, trace ID and partition key, from its record."""
        trace_id, key, raw = part.extras(offset)
        headers: dict[str, object] = {}
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                headers = parsed
        return headers, trace_id, key

    def dead_letter(
        self, channel: PolicedChannel, offset: int, item: InFlight, reason: str, now: int
    ) -> bool:
        """Publish a message that used its last attempt to the channel's dead-letter topic."""
        topic = channel.topic  # the partition the message is in
        name = channel.policy.dead_letter_topic
        headers, trace_id, key = self._original(topic, offset)
        headers.update(
            dead_letter_reason=reason,
            dead_letter_attempts=str(item.attempts),
            dead_letter_topic=topic.name,
            dead_letter_channel=channel.name,
            dead_letter_id=encode_message_id(topic.partition, offset).decode(),
            dead_letter_timestamp=str(item.timestamp),
        )
        entry = Entry(
            item.body,
            timestamp=now,
            trace_id=trace_id,
            partition_key=key,
            headers=json.dumps(headers).encode(),
        )
        source = f"dead letter of {topic.name}/{channel.name}"
        try:
            target = self.publisher.topic(name)
            if target.deleted:
                return False
            self.publisher.append_entries(target, [entry], source=source)
        except (TopicFull, StorageError, OSError, NotLeader) as exc:
            log.error(
                "channel %s/%s: message %d could not go to dead-letter topic %s (%s); requeued",
                topic.name, channel.name, offset, name, exc,
            )  # fmt: skip
            return False
        return True

    # -- timers, stats, close --------------------------------------------------------

    def housekeeping(self, now: int) -> None:
        """The TTL sweep of every channel of a topic with a TTL."""
        for name, settings in self.settings.topics.items():
            topic = self.topics.get(name)
            if topic is None or not settings.ttl_ms:
                continue
            for channel in topic.channels.values():
                channel.expire_head(now)

    def add_stats(self, topic_docs: list[dict[str, object]]) -> None:
        """Add the extra fields to the /stats documents of the topics and channels that use
        a feature (a setting or a non-zero count), after NSQ's: the others stay NSQ's."""
        for doc in topic_docs:
            topic = self.topics.get(str(doc["topic_name"]))
            if topic is None:
                continue
            extra = self.topic_stats(topic)
            if any(v for k, v in extra.items() if k != "depth_policy"):
                doc.update(extra)
            for cdoc in doc["channels"]:  # type: ignore[attr-defined]
                channel = topic.channels.get(cdoc["channel_name"])
                if channel is None:
                    continue
                extra = self.channel_stats(channel)
                if any(extra.values()):
                    cdoc.update(extra)
                    for pdoc, part in zip(
                        cdoc.get("partitions") or (), channel.parts, strict=False
                    ):
                        paths = part.policy_paths
                        pdoc.update(
                            dead_letter_count=paths.dead_letter_count,
                            expired_count=paths.expired_count,
                            depth_dropped_count=paths.depth_dropped_count,
                        )

    def channel_stats(self, channel: Channel) -> dict[str, object]:
        policy = channel.policy
        return {
            "max_attempts": policy.max_attempts,
            "dead_letter_topic": policy.dead_letter_topic,
            "dead_letter_count": channel.dead_letter_count,
            "expired_count": channel.expired_count,
            "depth_dropped_count": channel.depth_dropped_count,
            "trace": policy.tracer is not None,
        }

    def topic_stats(self, topic: Topic) -> dict[str, object]:
        settings = self._topic_settings(topic.name) or TopicSettings()
        return {
            "ttl_ms": settings.ttl_ms,
            "max_depth": settings.max_depth,
            "depth_policy": settings.depth_policy,
            "expired_count": sum(c.expired_count for c in topic.channels.values()),
            "depth_dropped_count": self.topic_dropped.get(topic.name, 0),
            "trace": settings.trace,
        }

    def close(self) -> None:
        self.tracer.close()
