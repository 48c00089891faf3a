"""The broker: topics and channels of one nsqd, metadata on disk, group commit, timers.

The servers call it from the event-loop thread only. ``append`` (``publish``) adds to the
pending buffer of one partition of a topic and marks that partition dirty; the server calls
``flush`` once at the end of the loop turn (one write per partition log: group commit),
then ``pump`` to let channels read what was flushed. ``scan`` is called periodically for
in-flight timeouts and due deferred messages, ``due_cursor_saves`` for the cursors the
server writes off the loop, ``housekeeping`` for retention and the TTL sweep,
``retry_saves`` for what a storage failure left unsaved. Every publish (TCP, HTTP,
extended, traced, dead letters) goes through ``append``, which applies the topic's depth
bound before and records traced publishes after, and notes a delayed one for the channels
to defer as they reach it (``nsqpy.broker.dpubs``). It owns two helpers, each given what
it needs: ``persistence`` (``nsqpy.broker.saving``: the data path's lock, ``nsqd.dat``, the
retried saves; the broker is its ``metadata.Restorer``: ``restore_topic``/
``restore_channel`` create without announcing or recording) and ``features``
(``nsqpy.broker.features``: dead letters, TTL, depth bounds, tracing; the broker is its
``Publisher`` of dead letters). Storage failures on every path report into
``health_state`` (``nsqpy.broker.health``, what /ping answers): a topic or channel whose
files cannot be written is not created (``StorageFailed``).

Cluster mode (``cluster_mode``, set by the cluster layer before ``load_metadata``): the
node holds some partitions of a topic (``hold_partition``/``release_partition``) and leads
some of those (``set_role``); writes to the others raise ``NotLeader``, followers deliver
nothing. ``hold_partition`` creating a topic announces it (``on_topic_created``: lookupd
registration, channels pre-created from lookupd) as ``topic`` does, and releasing the last
partition held deletes the topic here as ``delete_topic`` does (``on_topic_deleted``).
After a restart in cluster mode every partition held is a follower until the cluster layer
says otherwise; without cluster mode every partition is led, as on a single node.

Must not import asyncio, sockets or any server; time comes from the injected clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Container, Sequence
from pathlib import Path
from typing import NamedTuple

from nsqpy.broker.channel import Channel
from nsqpy.broker.client import Client
from nsqpy.broker.e2e import LatencyWindow
from nsqpy.broker.features import Features
from nsqpy.broker.health import Health, StorageFailed
from nsqpy.broker.partition import FOLLOWER, LEADER, LogSettings, Partition
from nsqpy.broker.saving import (  # (importable from here as before)
    LOCK_FILE,
    METADATA_FILE,
    DataPathInUse,
    Persistence,
    lock_data_path,
)
from nsqpy.broker.topic import Topic
from nsqpy.errors import InvalidError, NotWritable, StorageError, SubFailed, TopicNotExist
from nsqpy.options import NsqdOptions
from nsqpy.protocol.names import is_ephemeral
from nsqpy.storage import CursorFile, CursorSnapshot, Entry, SyncPolicy

log = logging.getLogger("nsqpy.broker")


class Placement(NamedTuple):
    """Where a publish went: the partition and its first and last offsets."""

    partition: Partition
    first: int
    last: int


class PartitionCountMismatch(ValueError):
    """A topic exists with another partition count (it cannot change once created)."""


__all__ = ["LOCK_FILE", "METADATA_FILE", "Broker", "DataPathInUse", "Placement", "lock_data_path"]


class Broker:
    """All topics of one nsqd and the operations the TCP and HTTP servers need."""

    def __init__(self, opts: NsqdOptions, *, clock: Callable[[], int] = time.time_ns) -> None:
        self.opts = opts
        self.clock = clock
        self.data_path = Path(opts.data_path or ".").resolve()
        self.data_path.mkdir(parents=True, exist_ok=True)
        self.topics: dict[str, Topic] = {}
        self.health_state = Health()  # NSQ's SetHealth: the last storage failure
        # first: the data path's lock (DataPathInUse), then nsqd.dat and the retried saves
        self.persistence = Persistence(self.data_path, self.topics, self.health_state)
        self.clients: dict[int, Client] = {}
        self.start_time_ns = time.time_ns()
        self.start_time = self.start_time_ns // 1_000_000_000
        self._dirty: dict[Partition, Topic] = {}
        # Topics that have channels: the timers (scan, cursor saves) look only at these, so
        # a node with many thousands of topics without channels does no work per tick for
        # them (kept up to date by channel()/delete_channel()/delete_topic(), rebuilt by
        # housekeeping).
        self._with_channels: dict[str, Topic] = {}
        # Ephemeral topics start above every offset an ephemeral topic deleted before had
        # (durable topics keep that in their partitions' reservation files instead).
        self._ephemeral_floor = 0
        # Hooks for the server layer (lookupd registration, channel pre-creation).
        self.on_topic_created: list[Callable[[Topic], None]] = []
        self.on_topic_expanded: list[Callable[[Topic], None]] = []  # (its partition count grew)
        self.on_topic_deleted: list[Callable[[Topic], None]] = []
        self.on_channel_created: list[Callable[[Topic, Channel], None]] = []
        self.on_channel_deleted: list[Callable[[Topic, Channel], None]] = []
        # Cluster mode (set by the cluster layer): partitions held, roles, /stats fields.
        self.cluster_mode = False
        self.partition_info: Callable[[str, int], dict[str, object]] | None = None
        self.on_partition_released: list[Callable[[Topic, Partition], None]] = []
        # a partition led here is followed now (its waiting publishers get NotLeader)
        self.on_stepped_down: list[Callable[[Topic, Partition], None]] = []
        # a partition followed here is led now (what it took as a follower is its log's)
        self.on_stepped_up: list[Callable[[Topic, Partition], None]] = []
        self.sync_policy = SyncPolicy(
            every_messages=opts.sync_every,
            every_ms=opts.sync_timeout_ms,
            always=opts.sync_always,
        )
        self.log_settings = LogSettings(
            sync=self.sync_policy,
            segment_bytes=opts.max_bytes_per_file,
            mem_queue_size=opts.mem_queue_size,
            retention_ms=opts.retention_ms,
            retention_bytes=opts.retention_bytes,
            clock=clock,
            health=self.health_state,
        )
        self.features = Features(  # dead letters, TTL, depth bounds, tracing
            self.data_path,
            self.health_state,
            self.topics,
            self,  # (publishes the dead letters)
            dead_letter_suffix=opts.dead_letter_suffix,
            max_attempts=opts.max_attempts,
            trace_max_records=opts.trace_max_records,
        )
        self.on_topic_deleted.append(self.features.topic_deleted)
        self.on_channel_deleted.append(self.features.channel_deleted)

    # -- topics and channels ---------------------------------------------------------

    def _topic_dir(self, name: str) -> Path:
        return self.data_path / "topics" / f"topic-{name}"

    def get_topic(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def topic(
        self,
        name: str,
        *,
        buffer_start: int | None = None,
        partitions: int = 1,
        buffer_starts: Sequence[int | None] = (),
        ordered: bool = False,
    ) -> Topic:
        """The topic ``name``, created when missing (the name must already be valid) with
        ``partitions`` partitions (1 to MAX_PARTITIONS). StorageError (reported to the
        health state) when its files or the metadata naming it cannot be written: it is not
        created, so nothing is acknowledged that a restart would not find."""
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        topic = self._new_topic(name, partitions, buffer_starts or (buffer_start,), ordered)
        if not topic.ephemeral:
            self.persistence.metadata_changed()  # (its files on disk make it found at start)
        for hook in self.on_topic_created:
            hook(topic)
        return topic

    def restore_topic(
        self,
        name: str,
        partitions: int,
        buffer_starts: Sequence[int | None],
        ordered: bool,
        held: Sequence[int] | None = None,
    ) -> Topic:
        """A topic the metadata names, as it was (``metadata.Restorer``): not announced. In
        cluster mode its partitions follow until the cluster layer says otherwise."""
        topic = self.topics.get(name)
        if topic is None:
            topic = self._new_topic(
                name, partitions, buffer_starts, ordered, held, leading=not self.cluster_mode
            )
        return topic

    def _new_topic(
        self,
        name: str,
        partitions: int,
        buffer_starts: Sequence[int | None],
        ordered: bool,
        held: Sequence[int] | None = None,
        *,
        leading: bool = True,
    ) -> Topic:
        try:
            topic = Topic(
                name,
                None if is_ephemeral(name) else self._topic_dir(name),
                self.log_settings,
                partitions=partitions,
                buffer_starts=buffer_starts,
                ordered=ordered,
                ephemeral_start=self._ephemeral_floor,
                held=held,
                leading=leading,
            )
        except (OSError, StorageError) as exc:
            raise self.storage_failed(f"failed to create topic {name}", exc) from exc
        self.topics[name] = topic
        if not topic.held_all:
            held_text = ",".join(str(p.number) for p in topic.partitions)
            log.info("TOPIC(%s): created with %d partitions (%s here)", name, partitions, held_text)
        elif partitions > 1:
            log.info("TOPIC(%s): created with %d partitions", name, partitions)
        else:
            log.info("TOPIC(%s): created", name)
        return topic

    def create_topic(
        self, name: str, partitions: int | None = None, ordered: bool | None = None
    ) -> Topic:
        """/topic/create: the topic, created with ``partitions`` when missing. An existing
        topic keeps its count (PartitionCountMismatch if another is asked for); ``ordered``
        given sets the topic's flag for the channels created from now on. An ephemeral
        topic has one partition (EphemeralPartitions for more)."""
        topic = self.topics.get(name)
        if topic is None:
            return self.topic(name, partitions=partitions or 1, ordered=bool(ordered))
        if partitions is not None and partitions != topic.partition_count:
            raise PartitionCountMismatch(
                f"topic {name} has {topic.partition_count} partitions, not {partitions}"
            )
        if ordered is not None and ordered != topic.ordered:
            topic.ordered = ordered
            self.save_metadata()
        return topic

    def expand_topic(self, name: str, count: int, *, hold: bool = True) -> Topic:
        """Grow topic ``name`` to ``count`` partitions (``Topic.expand``; ``hold``: open the
        new ones here, as a single node does; a cluster member holds what etcd gives it).
        KeyError when missing, ValueError for fewer partitions; StorageError (reported)
        when a new partition's files cannot be written (the count stays grown: the
        partitions missing here are opened at the next start)."""
        topic = self.topics[name]
        old = topic.partition_count
        if count == old:
            return topic
        try:
            topic.expand(count, hold=hold)
        except (OSError, StorageError) as exc:
            raise self.storage_failed(f"failed to expand topic {name}", exc) from exc
        finally:
            if topic.partition_count != old:
                self.save_metadata()
                for hook in self.on_topic_expanded:
                    hook(topic)
        log.info("TOPIC(%s): expanded from %d to %d partitions", name, old, count)
        return topic

    def check_partition(self, topic_name: str, partition: int) -> None:
        """TopicNotExist (youzan's E_TOPIC_NOT_EXIST) unless ``partition`` (-1: none) exists
        in the topic: a partition is named only by youzan's forms, and youzan's nsqd creates
        nothing for them (a topic is created by a PUB or SUB naming none, as NSQ's). Checked
        before anything is created or stored."""
        if partition < 0:
            return
        topic = self.topics.get(topic_name)
        if topic is None:
            raise TopicNotExist(f"topic {topic_name} does not exist")
        count = topic.partition_count
        if partition >= count:
            raise TopicNotExist(f"topic {topic_name} has no partition {partition} (of {count})")

    def channel(
        self, topic: Topic, name: str, *, start: int | None = None, listed: bool = False
    ) -> Channel:
        """The channel ``name`` of ``topic``, created when missing (starting at ``start`` if
        given; ``listed``: restored from the metadata, see ``Partition.create_channel``).
        StorageError (reported to the health state) when its cursor or the metadata naming
        it cannot be written: it is not created."""
        channel = topic.channels.get(name)
        if channel is not None:
            return channel
        channel = self._new_channel(topic, name, start, listed)
        if not (topic.ephemeral or channel.ephemeral):
            self.persistence.metadata_changed()  # (its cursor file makes it found at start)
        for hook in self.on_channel_created:
            hook(topic, channel)
        return channel

    def restore_channel(self, topic: Topic, name: str) -> Channel:
        """A channel the metadata names (``metadata.Restorer``): loaded, not announced."""
        channel = topic.channels.get(name)
        return channel if channel is not None else self._new_channel(topic, name, None, True)

    def _new_channel(self, topic: Topic, name: str, start: int | None, listed: bool) -> Channel:
        try:
            channel = topic.create_channel(name, start=start, listed=listed)
        except (OSError, StorageError) as exc:
            topic.forget_channel(name)
            raise self.storage_failed(f"failed to create channel {topic.name}/{name}", exc) from exc
        self._with_channels[topic.name] = topic
        self.features.attach_channel(topic, channel)
        now = self.clock()
        channel.arrive()  # what it starts with counts as put into it at once (DPUBs deferred)
        for part in topic.partitions:
            part.settle_deferred()
        if self.opts.e2e_processing_latency_percentiles:
            channel.e2e = LatencyWindow(
                self.opts.e2e_processing_latency_window_time_ms * 1_000_000,
                self.opts.e2e_processing_latency_percentiles,
                now,
            )
        log.info("TOPIC(%s): new channel(%s)", topic.name, name)
        return channel

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        self._with_channels.pop(name, None)
        for part in topic.partitions:
            self._dirty.pop(part, None)
        channels = list(topic.channels.values())
        if topic.ephemeral:
            self._ephemeral_floor = max(
                self._ephemeral_floor, *(p.log.high_watermark for p in topic.partitions)
            )
        topic.destroy()
        for channel in channels:
            for channel_hook in self.on_channel_deleted:
                channel_hook(topic, channel)
        for topic_hook in self.on_topic_deleted:
            topic_hook(topic)
        self.save_metadata()
        log.info("TOPIC(%s): deleted", name)
        return True

    def delete_channel(self, topic: Topic, name: str) -> bool:
        channel = topic.delete_channel(name)
        if channel is None:
            return False
        self.persistence.purge_later(topic)
        if not topic.channels:
            self._with_channels.pop(topic.name, None)
        for hook in self.on_channel_deleted:
            hook(topic, channel)
        if topic.ephemeral and not topic.channels:
            self.delete_topic(topic.name)
        self.save_metadata()
        return True

    # -- cluster mode: the partitions held here and their roles -----------------------

    def hold_partition(
        self,
        topic_name: str,
        partition_count: int,
        number: int,
        *,
        role: str,
        leader_epoch: int,
        ordered: bool = False,
    ) -> Partition:
        """Hold partition ``number`` of ``topic_name`` (which has ``partition_count``) as
        ``role`` in ``leader_epoch``. A missing topic is created (``ordered`` applies then
        only) and announced as ``topic`` does; the partition's log is opened or created,
        with a part for each channel; one held already only changes role. A topic with
        fewer partitions grows (``expand_topic``). ValueError for an ephemeral topic, a bad
        role or number; PartitionCountMismatch for a count below the topic's;
        StorageError (reported) when its files cannot be written."""
        if is_ephemeral(topic_name) or role not in (LEADER, FOLLOWER):
            raise ValueError(f"cannot hold {topic_name} partition {number} as {role!r}")
        topic = self.topics.get(topic_name)
        if topic is None:
            topic = self._new_topic(
                topic_name, partition_count, (), ordered, [number], leading=False
            )
            self.persistence.metadata_changed()
            for hook in self.on_topic_created:
                hook(topic)
        elif partition_count > topic.partition_count:  # (grown: /topic/partition/expand)
            self.expand_topic(topic_name, partition_count, hold=False)
        if partition_count != topic.partition_count:
            raise PartitionCountMismatch(
                f"topic {topic_name} has {topic.partition_count} partitions, not {partition_count}"
            )
        elif topic.partition(number) is None:
            try:
                topic.add_partition(number, leading=False)
            except (OSError, StorageError) as exc:
                what = f"failed to create partition {number} of topic {topic_name}"
                raise self.storage_failed(what, exc) from exc
            self.persistence.metadata_changed()
            log.info("TOPIC(%s): partition %d held", topic_name, number)
        return self.set_role(topic_name, number, role, leader_epoch)

    def set_role(self, topic_name: str, number: int, role: str, leader_epoch: int) -> Partition:
        """Lead or follow partition ``number`` of ``topic_name`` in ``leader_epoch``: a new
        leader begins the epoch in its log and its channels deliver at once. KeyError when
        the partition is not held here, ValueError for a bad role, StorageError for an
        epoch below the log's."""
        topic = self.topics.get(topic_name)
        part = topic.partition(number) if topic is not None else None
        if topic is None or part is None:
            raise KeyError(f"partition {number} of topic {topic_name} is not held here")
        was = (part.role, part.leader_epoch)
        topic.set_role(number, role, leader_epoch)
        if was != (role, leader_epoch):
            log.info(
                "TOPIC(%s): partition %d: %s in epoch %d", topic_name, number, role, leader_epoch
            )
        if part.leading and was[0] != LEADER:
            now = self.clock()
            for channel in topic.channels.values():
                channel.pump(now)
            for hook in self.on_stepped_up:
                hook(topic, part)
        elif was[0] == LEADER and not part.leading:
            self._stepped_down(topic, number)
            for hook in self.on_stepped_down:
                hook(topic, part)
        return part

    def _stepped_down(self, topic: Topic, number: int) -> None:
        """A partition led here is followed now: what its channels had in flight is the
        new leader's to deliver again (a late FIN here is "not in flight"), and consumers
        of a topic this node leads no partition of any more are closed, so that they
        reconnect (through lookupd, to the leaders)."""
        leads_some = any(p.leading for p in topic.partitions)
        for channel in topic.channels.values():
            channel_part = channel.part(number)
            if channel_part is not None:
                channel_part.clear_window()
            if not leads_some and channel.consumers:
                log.info(
                    "TOPIC(%s): channel(%s): closing %d consumers (no partition led here)",
                    topic.name, channel.name, len(channel.consumers),
                )  # fmt: skip
                channel.close_consumers()

    def release_partition(self, topic_name: str, number: int) -> bool:
        """Hold partition ``number`` of ``topic_name`` no more (False when not held): what
        its channels' parts had in flight leaves them, consumers subscribed to it alone are
        closed, and its files go but the offset reservation, so when held again it goes on
        above every offset it gave. The last one held: the topic is deleted here
        (``delete_topic``)."""
        topic = self.topics.get(topic_name)
        part = topic.partition(number) if topic is not None else None
        if topic is None or part is None:
            return False
        if len(topic.partitions) == 1:
            return self.delete_topic(topic_name)
        self._dirty.pop(part, None)  # (its pending records are written as its files go)
        topic.remove_partition(number)
        for hook in self.on_partition_released:
            hook(topic, part)
        self.save_metadata()
        log.info("TOPIC(%s): partition %d released", topic_name, number)
        return True

    # -- clients ---------------------------------------------------------------------

    def client_connected(self, client: Client) -> None:
        self.clients[client.id] = client

    def subscribe(
        self,
        client: Client,
        topic_name: str,
        channel_name: str,
        *,
        partition: int = -1,
        ordered: bool = False,
    ) -> Channel:
        """SUB (``partition`` >= 0: that partition only, TopicNotExist when not held here;
        ``ordered``: SUB_ORDERED)."""
        self.check_partition(topic_name, partition)
        held = self.topics.get(topic_name)
        if partition >= 0 and held is not None and held.partition(partition) is None:
            raise TopicNotExist(f"topic {topic_name} partition {partition} is not held here")
        if ordered and client.sample_rate:
            raise InvalidError("order consume is not allowed while sample rate is not 0")
        topic = self.topic(topic_name)
        if topic.deleted:
            raise SubFailed("SUB failed to create topic/channel: topic exiting")
        channel = self.channel(topic, channel_name)
        limit = self.opts.max_channel_consumers
        if limit and len(channel.consumers) >= limit:
            raise SubFailed(
                f"channel consumers for {topic_name}:{channel_name} exceeds limit of {limit}"
            )
        if ordered and not channel.ordered:
            channel.set_ordered(True)
            self.save_metadata()
        channel.add_consumer(client, partition)
        return channel

    def client_gone(self, client: Client) -> None:
        self.clients.pop(client.id, None)
        channel = client.channel
        if not isinstance(channel, Channel):
            return
        channel.remove_consumer(client, self.clock())
        client.channel = None
        topic = self.topics.get(channel.topic.name)
        if channel.ephemeral and not channel.consumers and not channel.deleted and topic:
            self.delete_channel(topic, channel.name)
        else:
            channel.pump(self.clock())

    # -- publish, group commit, delivery ---------------------------------------------

    def append(
        self,
        topic: Topic,
        bodies: Sequence[bytes] = (),
        deliver_at: int = 0,
        *,
        entries: Sequence[Entry] = (),
        partition: int = -1,
        key: bytes = b"",
        source: Client | str | None = None,
        trace_id: int = 0,
    ) -> Placement:
        """Append ``bodies`` (plain) or ``entries`` (with extensions) to one partition's
        pending buffer: ``partition`` if >= 0, else by ``key``, else the next in turn (see
        ``Topic.partition_for``; IndexError for a partition the topic lacks). Flushed by
        ``flush``; the placement says where they went.

        ``trace_id`` is stored with each of ``bodies`` (entries carry their own);
        ``source`` (the publishing client, or a label) is for tracing. A topic at its
        maximum depth raises ``TopicFull`` (a StorageError) under the ``refuse`` policy.
        """
        part = topic.partition_for(partition, key)
        if not part.writable:
            raise NotWritable()  # (youzan's frame: the code alone; the cause is logged)
        count = len(entries) if entries else len(bodies)
        features = self.features
        settled = topic.name in features.settings.topics  # (a depth bound, tracing: settings)
        if settled:
            features.before_publish(topic, part, count)
        now = self.clock()
        if not entries and trace_id and not topic.ephemeral:
            entries = [Entry(b, now, deliver_at, trace_id=trace_id) for b in bodies]
        first = part.log.high_watermark  # the offset the first one gets
        last = part.publish_entries(entries) if entries else part.publish(bodies, now, deliver_at)
        self._dirty[part] = topic
        if deliver_at and last >= first:  # DPUB: each channel defers it as it arrives
            part.dpubs.note(first, last, deliver_at)
        stored = last - first + 1  # fewer than count when a full ephemeral topic drops some
        if settled:
            traces: Sequence[int] | int = [e.trace_id for e in entries] if entries else trace_id
            features.after_publish(topic, part, first, stored, source, traces, now)
        return Placement(part, first, last)

    def append_plain(self, topic: Topic, part: Partition, bodies: Sequence[bytes]) -> int:
        """``append`` for the publish lane (``NsqdServer.publish_now``): plain bodies, no
        delay, to ``part``, which the caller checked is writable, of a topic without
        settings (nothing to bound or trace); the last offset."""
        last = part.publish(bodies, self.clock(), 0)
        self._dirty[part] = topic
        return last

    def append_entries(
        self,
        topic: Topic,
        entries: Sequence[Entry],
        partition: int = -1,
        *,
        source: Client | str | None = None,
    ) -> list[Placement]:
        """Append records with extensions: all to ``partition`` if >= 0, else each to the
        partition its ``partition_key`` hashes to, those without a key to the next in turn.
        One batch per partition, each keeping the messages' order. All or nothing: a
        partition not led here (NotLeader), one not writable (NotWritable) or a topic at its
        maximum depth under ``refuse`` (TopicFull) refuses them all before any is
        appended."""
        if partition >= 0 or topic.partition_count == 1:
            return [self.append(topic, entries=entries, partition=partition, source=source)]
        self.features.before_publish(topic, None, len(entries))
        turn: Partition | None = None
        groups: dict[int, list[Entry]] = {}
        for entry in entries:
            if entry.partition_key:
                target = topic.partition_for(-1, entry.partition_key)
            else:
                turn = turn or topic.partition_for()
                target = turn
            if not target.writable:
                raise NotWritable()
            groups.setdefault(target.number, []).append(entry)
        return [
            self.append(topic, entries=g, partition=n, source=source) for n, g in groups.items()
        ]

    def publish(
        self,
        topic: Topic,
        bodies: list[bytes],
        deliver_at: int = 0,
        *,
        source: Client | str | None = None,
        trace_id: int = 0,
    ) -> int:
        """Append plain bodies (partition chosen in turn); returns the last offset (in its
        partition). See ``append`` for ``source``, ``trace_id`` and ``TopicFull``."""
        return self.append(topic, bodies, deliver_at, source=source, trace_id=trace_id).last

    def has_dirty(self) -> bool:
        return bool(self._dirty)

    def flush(self) -> tuple[list[Partition], dict[Partition, OSError]]:
        """Write every dirty partition's pending records (one write each).

        Returns the partitions written and the write error of those that failed (their
        pending records are dropped: nothing of them was acknowledged). A failure marks the
        daemon unhealthy; the next successful write restores health, as in NSQ.
        """
        dirty = list(self._dirty)
        self._dirty.clear()
        flushed: list[Partition] = []
        failed: dict[Partition, OSError] = {}
        health = self.health_state
        for part in dirty:
            try:
                part.log.flush()
            except OSError as exc:
                failed[part] = exc
                part.unwritten()  # nothing of it was acknowledged: nothing to retry
                health.failed_once(f"failed to write messages of topic {part.name}", exc)
                continue
            flushed.append(part)
            if health.error and not part.ephemeral:
                health.ok()  # a write works: what failed once is resolved
        return flushed, failed

    def pump(self, flushed: Sequence[Partition | Topic]) -> None:
        """Let the channels of the topics of ``flushed`` (partitions or topics) deliver."""
        now = self.clock()
        seen: set[str] = set()
        for item in flushed:
            topic = item if isinstance(item, Topic) else self.topics.get(item.name)
            if topic is None or topic.name in seen:
                continue
            seen.add(topic.name)
            for channel in topic.channels.values():
                if len(channel.parts) > 1:
                    channel.arrive()
                channel.pump(now)
            for part in topic.partitions:
                if part.dpubs:
                    part.settle_deferred()
            if topic.ephemeral:
                topic.forget_taken()

    def pump_ordered(self, part: Partition) -> int:
        """(cluster) ``part``'s followers took its channels' cursors: the ordered channels
        deliver that partition's next message (the rest of the topic is not looked at)."""
        topic = self.topics.get(part.name)
        if topic is None:
            return 0
        now = self.clock()
        return sum(c.pump_ordered(part.number, now) for c in topic.channels.values())

    def scan(self) -> None:
        """Timers: in-flight timeouts and due deferred messages."""
        now = self.clock()
        for topic in list(self._with_channels.values()):
            for channel in list(topic.channels.values()):
                if channel.scan(now):
                    channel.pump(now)

    def due_cursor_saves(
        self, busy: Container[CursorFile]
    ) -> list[tuple[CursorFile, CursorSnapshot]]:
        """Snapshots of the cursors (every partition's) due for their periodic save, for the
        server to write off the event loop (``CursorFile.write``); cursors in ``busy`` (a
        write in flight) wait."""
        due = []
        for topic in self._with_channels.values():
            for channel in topic.channels.values():
                for part in channel.parts:
                    cursor_file = part.cursor_file
                    if cursor_file is None or cursor_file in busy:
                        continue
                    snap = part.cursor_snapshot()
                    if snap is not None:
                        due.append((cursor_file, snap))
        return due

    def housekeeping(self) -> None:
        """Slow timers: retention of fully confirmed segments, the TTL sweep."""
        now = self.clock()
        self._with_channels = {n: t for n, t in self.topics.items() if t.channels}  # (resync)
        for topic in list(self.topics.values()):
            try:
                topic.retain(now)
            except OSError as exc:
                log.error("TOPIC(%s): retention failed: %s", topic.name, exc)
        self.features.housekeeping(now)

    # -- health, metadata, retried saves (nsqpy.broker.saving) -----------------------

    @property
    def healthy(self) -> bool:
        return not self.health_state.error

    @property
    def health(self) -> str:
        """What /ping answers: OK, or NOK and the latest storage failure still unresolved."""
        return "OK" if self.healthy else f"NOK - {self.health_state.error}"

    def storage_failed(self, what: str, exc: BaseException) -> StorageFailed:
        """Report a failure that nothing retries (a topic or channel not created, so nothing
        was acknowledged) to the health state; returns the error for the caller."""
        self.health_state.failed_once(what, exc)
        return StorageFailed(str(exc))

    def load_metadata(self) -> None:
        """Recreate the topics and channels ``nsqd.dat`` names (at start)."""
        self.persistence.load_metadata(self)

    def save_metadata(self) -> None:
        """Write ``nsqd.dat`` (a failure: reported, and written again by ``retry_saves``)."""
        self.persistence.save_metadata()

    def metadata_write(self) -> Callable[[], None] | None:
        """The write ``nsqd.dat`` is owed, to run off the event loop (``Persistence``)."""
        return self.persistence.metadata_write()

    def metadata_written(self, exc: BaseException | None) -> None:
        self.persistence.metadata_written(exc)

    def retry_saves(self, metadata: bool = True) -> None:
        """Timer: write again what a storage failure left unsaved (the metadata, unless
        ``metadata`` is False: the caller runs ``metadata_write``; ``features.json``,
        deleted channels' deferred rows)."""
        if metadata:
            self.persistence.retry_metadata()
        self.features.retry_saves()
        self.persistence.retry_purges()

    # -- shutdown --------------------------------------------------------------------

    def close(self) -> None:
        """Flush everything, persist cursors and metadata, close every log."""
        self.flush()
        self.save_metadata()
        self.features.close()
        for topic in self.topics.values():
            try:
                topic.close()
            except OSError as exc:
                log.error("TOPIC(%s): close failed: %s", topic.name, exc)
        self.persistence.unlock()
