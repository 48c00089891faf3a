"""What a topic or channel was told beyond NSQ: dead letters, TTL, depth bounds, tracing.

Owns the settings as set over HTTP (``TopicSettings``, ``ChannelSettings``) and their file
``features.json`` in the data path (``PolicyFile``: JSON, written atomically: temp file,
fsync, rename), the runtime view a channel consults on its delivery paths
(``ChannelPolicy``: plain attributes, so the checks cost one attribute read when a feature
is off; ``PolicedChannel`` is the channel partition as its callbacks see it), dead-letter
topic naming and ``TopicFull``, the error a publish gets from a topic at its maximum depth
under the ``refuse`` policy. Must not import asyncio or any server, nor the channel modules.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nsqpy.errors import StorageError
from nsqpy.protocol.names import valid_topic_name
from nsqpy.storage.files import write_atomic

if TYPE_CHECKING:
    from nsqpy.broker.inflight import InFlight
    from nsqpy.broker.trace import TracedPartition, Tracer

log = logging.getLogger("nsqpy.broker")

FEATURES_FILE = "features.json"
DEPTH_POLICIES = ("refuse", "drop_oldest")
EPHEMERAL = "#ephemeral"
# Largest attempts count NSQ's message frame can carry (u16).
MAX_ATTEMPTS = 65535

# (channel, offset, in-flight item, reason, now) -> True when the message was dead-lettered.
DeadLetterFn = Callable[["PolicedChannel", int, "InFlight", str, int], bool]


class TopicFull(StorageError):
    """A publish to a topic at its maximum depth under the ``refuse`` policy."""


@dataclass
class ChannelSettings:
    """A channel's settings (None/"" = the nsqd flag's default)."""

    max_attempts: int | None = None
    dead_letter_topic: str = ""
    trace: bool = False


@dataclass
class TopicSettings:
    """A topic's settings; 0 means off."""

    ttl_ms: int = 0
    max_depth: int = 0
    depth_policy: str = "refuse"
    trace: bool = False
    channels: dict[str, ChannelSettings] = field(default_factory=dict)


@dataclass(slots=True)
class ChannelPolicy:
    """What a channel checks on its delivery, requeue and timeout paths."""

    max_attempts: int = 0  # 0 = no limit (NSQ)
    dead_letter_topic: str = ""
    dead_letter: DeadLetterFn | None = None
    ttl_ns: int = 0  # 0 = messages never expire (NSQ)
    tracer: Tracer | None = None  # None = not traced


class PolicedChannel(Protocol):
    """A channel partition as its policy's callbacks see it (``ChannelPartition``)."""

    @property
    def name(self) -> str: ...
    @property
    def topic(self) -> TracedPartition: ...  # the partition it reads
    @property
    def policy(self) -> ChannelPolicy: ...


def dead_letter_name(topic: str, suffix: str) -> str:
    """``<topic><suffix>``; an ephemeral topic's dead letters go to an ephemeral topic."""
    if topic.endswith(EPHEMERAL):
        return topic[: -len(EPHEMERAL)] + suffix + EPHEMERAL
    return topic + suffix


def is_dead_letter_topic(name: str, suffix: str) -> bool:
    return bool(suffix) and name.removesuffix(EPHEMERAL).endswith(suffix)


def valid_dead_letter_topic(name: str, source: str) -> bool:
    return valid_topic_name(name) and name != source


class PolicyFile:
    """``features.json``: every topic's and channel's settings, saved on each change."""

    def __init__(self, data_path: Path) -> None:
        self.path = data_path / FEATURES_FILE
        self.topics: dict[str, TopicSettings] = {}

    def load(self) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = json.loads(raw)
            for name, entry in (doc.get("topics") or {}).items():
                channels = {
                    cname: ChannelSettings(**centry)
                    for cname, centry in (entry.pop("channels", None) or {}).items()
                }
                self.topics[name] = TopicSettings(**entry, channels=channels)
        except (ValueError, TypeError, AttributeError) as exc:
            aside = self.path.with_name(f"{FEATURES_FILE}.corrupt")
            os.replace(self.path, aside)
            log.error("%s is unreadable (%s); renamed to %s", self.path, exc, aside.name)
            self.topics.clear()

    def save(self) -> None:
        """Write the settings of durable topics and channels (ephemeral ones live in memory)."""
        topics: dict[str, object] = {}
        for name, settings in sorted(self.topics.items()):
            if name.endswith(EPHEMERAL):
                continue
            entry = asdict(settings)
            entry["channels"] = {
                c: v for c, v in entry["channels"].items() if not c.endswith(EPHEMERAL)
            }
            topics[name] = entry
        doc = {"topics": topics}
        data = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        write_atomic(self.path, data, mode=0o600)

    def topic(self, name: str) -> TopicSettings:
        settings = self.topics.get(name)
        if settings is None:
            settings = self.topics[name] = TopicSettings()
        return settings

    def channel(self, topic: str, name: str) -> ChannelSettings:
        channels = self.topic(topic).channels
        settings = channels.get(name)
        if settings is None:
            settings = channels[name] = ChannelSettings()
        return settings

    def forget_topic(self, name: str) -> bool:
        return self.topics.pop(name, None) is not None

    def forget_channel(self, topic: str, name: str) -> bool:
        settings = self.topics.get(topic)
        return settings is not None and settings.channels.pop(name, None) is not None
