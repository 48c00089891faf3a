"""The broker: topics and channels of one nsqd, metadata on disk, group commit, timers.

The servers call it from the event-loop thread only. ``publish`` appends to a topic's
pending buffer and marks the topic dirty; the server calls ``flush`` once at the end of
the loop turn (one write per topic log: group commit), then ``pump`` to let channels
read what was flushed. ``scan`` is called periodically for in-flight timeouts, due
deferred messages, cursor persistence and retention. The metadata file ``nsqd.dat``
keeps NSQ's JSON shape (topics, channels, paused) plus ``buffer_start``.

Must not import asyncio, sockets or any server; time comes from the injected clock.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from nsqpy import NSQ_VERSION
from nsqpy.broker.channel import Channel
from nsqpy.broker.client import Client
from nsqpy.broker.topic import Topic
from nsqpy.errors import SubFailed
from nsqpy.options import NsqdOptions
from nsqpy.protocol.names import is_ephemeral, valid_channel_name, valid_topic_name
from nsqpy.storage import SyncPolicy

log = logging.getLogger("nsqpy.broker")

METADATA_FILE = "nsqd.dat"


class Broker:
    """All topics of one nsqd and the operations the TCP and HTTP servers need."""

    def __init__(self, opts: NsqdOptions, *, clock: Callable[[], int] = time.time_ns) -> None:
        self.opts = opts
        self.clock = clock
        self.data_path = Path(opts.data_path or ".").resolve()
        self.data_path.mkdir(parents=True, exist_ok=True)
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, Client] = {}
        self.health_error = ""
        self.start_time = int(time.time())
        self._dirty: dict[str, Topic] = {}
        self._loading = False
        # Hooks for the server layer (lookupd registration, channel pre-creation).
        self.on_topic_created: list[Callable[[Topic], None]] = []
        self.on_topic_deleted: list[Callable[[Topic], None]] = []
        self.on_channel_created: list[Callable[[Topic, Channel], None]] = []
        self.on_channel_deleted: list[Callable[[Topic, Channel], None]] = []
        self.sync_policy = SyncPolicy(
            every_messages=opts.sync_every,
            every_ms=opts.sync_timeout_ms,
            always=opts.sync_always,
        )

    # -- health ----------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        return not self.health_error

    @property
    def health(self) -> str:
        return "OK" if self.healthy else f"NOK - {self.health_error}"

    # -- topics and channels ---------------------------------------------------------

    def _topic_dir(self, name: str) -> Path:
        return self.data_path / "topics" / f"topic-{name}"

    def get_topic(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def topic(self, name: str, *, buffer_start: int | None = None) -> Topic:
        """The topic ``name``, created when missing (the name must already be valid)."""
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        topic = Topic(
            name,
            None if is_ephemeral(name) else self._topic_dir(name),
            sync=self.sync_policy,
            segment_bytes=self.opts.max_bytes_per_file,
            mem_queue_size=self.opts.mem_queue_size,
            retention_ms=self.opts.retention_ms,
            retention_bytes=self.opts.retention_bytes,
            buffer_start=buffer_start,
        )
        self.topics[name] = topic
        log.info("TOPIC(%s): created", name)
        if not self._loading:
            for hook in self.on_topic_created:
                hook(topic)
            self.save_metadata()
        return topic

    def channel(self, topic: Topic, name: str, *, start: int | None = None) -> Channel:
        """The channel ``name`` of ``topic``, created when missing (starting at ``start`` if given)."""
        channel = topic.channels.get(name)
        if channel is not None:
            return channel
        channel = topic.create_channel(name, start=start)
        log.info("TOPIC(%s): new channel(%s)", topic.name, name)
        if not self._loading:
            for hook in self.on_channel_created:
                hook(topic, channel)
            self.save_metadata()
        return channel

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        self._dirty.pop(name, None)
        channels = list(topic.channels.values())
        topic.destroy()
        for channel in channels:
            for hook in self.on_channel_deleted:
                hook(topic, channel)
        for hook in self.on_topic_deleted:
            hook(topic)
        self.save_metadata()
        log.info("TOPIC(%s): deleted", name)
        return True

    def delete_channel(self, topic: Topic, name: str) -> bool:
        channel = topic.delete_channel(name)
        if channel is None:
            return False
        for hook in self.on_channel_deleted:
            hook(topic, channel)
        if topic.ephemeral and not topic.channels:
            self.delete_topic(topic.name)
        self.save_metadata()
        return True

    # -- clients ---------------------------------------------------------------------

    def client_connected(self, client: Client) -> None:
        self.clients[client.id] = client

    def subscribe(self, client: Client, topic_name: str, channel_name: str) -> Channel:
        topic = self.topic(topic_name)
        if topic.deleted:
            raise SubFailed("SUB failed to create topic/channel: topic exiting")
        channel = self.channel(topic, channel_name)
        limit = self.opts.max_channel_consumers
        if limit and len(channel.consumers) >= limit:
            raise SubFailed(
                f"channel consumers for {topic_name}:{channel_name} exceeds limit of {limit}"
            )
        channel.add_consumer(client)
        return channel

    def client_gone(self, client: Client) -> None:
        self.clients.pop(client.id, None)
        channel = client.channel
        if not isinstance(channel, Channel):
            return
        channel.remove_consumer(client, self.clock())
        client.channel = None
        if channel.ephemeral and not channel.consumers and not channel.deleted:
            self.delete_channel(channel.topic, channel.name)
        else:
            channel.pump(self.clock())

    # -- publish, group commit, delivery ---------------------------------------------

    def publish(self, topic: Topic, bodies: list[bytes], deliver_at: int = 0) -> int:
        """Append to the topic's pending buffer; returns the last offset. Flushed by ``flush``."""
        last = topic.publish(bodies, self.clock(), deliver_at)
        self._dirty[topic.name] = topic
        return last

    def has_dirty(self) -> bool:
        return bool(self._dirty)

    def flush(self) -> list[Topic]:
        """Write every dirty topic's pending records (one write each); returns those topics.

        A write failure marks the daemon unhealthy and re-raises; the next successful
        write restores health.
        """
        dirty = list(self._dirty.values())
        self._dirty.clear()
        for topic in dirty:
            try:
                topic.log.flush()
            except OSError as exc:
                self.health_error = f"failed to write to topic {topic.name}: {exc}"
                log.error("TOPIC(%s): %s", topic.name, self.health_error)
                raise
        if dirty and self.health_error:
            self.health_error = ""
        return dirty

    def pump(self, topics: list[Topic]) -> None:
        now = self.clock()
        for topic in topics:
            for channel in topic.channels.values():
                channel.pump(now)

    def scan(self) -> None:
        """Timers: in-flight timeouts, due deferred messages, cursor saves."""
        now = self.clock()
        for topic in list(self.topics.values()):
            for channel in list(topic.channels.values()):
                if channel.scan(now):
                    channel.pump(now)
                channel.maybe_save_cursor()

    def housekeeping(self) -> None:
        """Slow timers: retention of fully confirmed segments."""
        now = self.clock()
        for topic in list(self.topics.values()):
            try:
                topic.retain(now)
            except OSError as exc:
                log.error("TOPIC(%s): retention failed: %s", topic.name, exc)

    # -- metadata --------------------------------------------------------------------

    def metadata(self) -> dict[str, object]:
        topics = []
        for topic in self.topics.values():
            if topic.ephemeral:
                continue
            channels = [
                {"name": c.name, "paused": c.paused}
                for c in topic.channels.values()
                if not c.ephemeral
            ]
            topics.append(
                {
                    "name": topic.name,
                    "paused": topic.paused,
                    "channels": channels,
                    "buffer_start": topic.buffer_start,
                }
            )
        return {"topics": topics, "version": NSQ_VERSION}

    def save_metadata(self) -> None:
        if self._loading:
            return
        path = self.data_path / METADATA_FILE
        tmp = path.with_name(f"{METADATA_FILE}.{os.getpid()}.tmp")
        data = json.dumps(self.metadata(), separators=(",", ":")).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def load_metadata(self) -> None:
        path = self.data_path / METADATA_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = json.loads(raw)
            topics = doc.get("topics") or []
        except (ValueError, AttributeError) as exc:
            raise RuntimeError(f"failed to parse metadata {path}: {exc}") from exc
        self._loading = True
        try:
            for entry in topics:
                self._load_topic(entry)
        finally:
            self._loading = False
        self.save_metadata()

    def _load_topic(self, entry: dict[str, object]) -> None:
        name = entry.get("name")
        if not isinstance(name, str) or not valid_topic_name(name) or is_ephemeral(name):
            log.warning("skipping creation of invalid topic %r", name)
            return
        start = entry.get("buffer_start")
        topic = self.topic(name, buffer_start=start if isinstance(start, int) else None)
        topic.paused = bool(entry.get("paused"))
        for centry in entry.get("channels") or []:  # type: ignore[attr-defined]
            cname = centry.get("name") if isinstance(centry, dict) else None
            if not isinstance(cname, str) or not valid_channel_name(cname) or is_ephemeral(cname):
                log.warning("skipping creation of invalid channel %r", cname)
                continue
            channel = self.channel(topic, cname)
            channel.paused = bool(centry.get("paused"))

    def all_topics_created(self) -> list[Topic]:
        return list(self.topics.values())

    # -- shutdown --------------------------------------------------------------------

    def close(self) -> None:
        """Flush everything, persist cursors and metadata, close every log."""
        try:
            self.flush()
        except OSError:
            pass
        self.save_metadata()
        for topic in self.topics.values():
            try:
                topic.close()
            except OSError as exc:
                log.error("TOPIC(%s): close failed: %s", topic.name, exc)
