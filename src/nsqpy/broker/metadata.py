"""The broker's metadata file ``nsqd.dat``: what topics and channels exist, and how.

Owns the JSON document (NSQ's shape: ``topics`` with ``name``, ``paused`` and
``channels``, plus ``version``; nsqpy adds a topic's ``buffer_start`` and, while paused,
``paused_at``; a topic with several partitions ``partition_num`` and each partition's
``buffer_start``/``paused_at`` in ``partitions``; an ordered topic or channel
``ordered``), its atomic write (temp file, fsync, rename) and the recreation of one
topic's entry at start-up through the broker (invalid names and partition counts are
skipped with a log line). Ephemeral topics and channels are never written. Must not
import asyncio or any server.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from nsqpy import NSQ_VERSION
from nsqpy.broker.partitioned import ChannelGroup
from nsqpy.broker.topic import MAX_PARTITIONS, Partition, Topic
from nsqpy.protocol.names import is_ephemeral, valid_channel_name, valid_topic_name

if TYPE_CHECKING:
    from nsqpy.broker.broker import Broker

log = logging.getLogger("nsqpy.broker")

METADATA_FILE = "nsqd.dat"


def document(topics: Iterable[Topic]) -> dict[str, object]:
    """The metadata of ``topics`` (ephemeral ones left out)."""
    entries = []
    for topic in topics:
        if topic.ephemeral:
            continue
        channels = [_channel_entry(c) for c in topic.channels.values() if not c.ephemeral]
        first = topic.partitions[0]
        entry: dict[str, object] = {
            "name": topic.name,
            "paused": topic.paused,
            "channels": channels,
            "buffer_start": first.buffer_start,
        }
        if topic.paused:
            entry["paused_at"] = first.paused_at
        if topic.partition_count > 1:
            entry["partition_num"] = topic.partition_count
            entry["partitions"] = [_partition_entry(p) for p in topic.partitions]
        if topic.ordered:
            entry["ordered"] = True
        entries.append(entry)
    return {"topics": entries, "version": NSQ_VERSION}


def write(data_path: Path, doc: dict[str, object]) -> None:
    """Replace ``nsqd.dat`` atomically with ``doc``."""
    path = data_path / METADATA_FILE
    tmp = path.with_name(f"{METADATA_FILE}.{os.getpid()}.tmp")
    data = json.dumps(doc, separators=(",", ":")).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read(data_path: Path) -> list[object] | None:
    """The topic entries of ``nsqd.dat`` (None: no file); RuntimeError when unreadable."""
    path = data_path / METADATA_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
        topics = doc.get("topics") or []
    except (ValueError, AttributeError) as exc:
        raise RuntimeError(f"failed to parse metadata {path}: {exc}") from exc
    return list(topics)


def load_topic(broker: Broker, entry: object) -> None:
    """Recreate one topic of the metadata, with its partitions, pause and channels."""
    name = entry.get("name") if isinstance(entry, dict) else None
    if not isinstance(name, str) or not valid_topic_name(name) or is_ephemeral(name):
        log.warning("skipping creation of invalid topic %r", name)
        return
    assert isinstance(entry, dict)
    count = entry.get("partition_num", 1)
    if type(count) is not int or not 1 <= count <= MAX_PARTITIONS:
        log.error("skipping topic %r: invalid partition_num %r", name, count)
        return
    parts = _partition_entries(entry, count)
    topic = broker.topic(
        name,
        partitions=count,
        buffer_starts=[_int(p.get("buffer_start")) for p in parts],
        ordered=entry.get("ordered") is True,
    )
    if entry.get("paused"):
        topic.pause()
        for part, pentry in zip(topic.partitions, parts, strict=True):
            paused_at = _int(pentry.get("paused_at"))
            if paused_at is not None:
                part.paused_at = paused_at
    for centry in entry.get("channels") or []:  # type: ignore[attr-defined]
        cname = centry.get("name") if isinstance(centry, dict) else None
        if not isinstance(cname, str) or not valid_channel_name(cname) or is_ephemeral(cname):
            log.warning("skipping creation of invalid channel %r", cname)
            continue
        channel = broker.channel(topic, cname, listed=True)
        channel.paused = bool(centry.get("paused"))
        if centry.get("ordered") is True:
            channel.set_ordered(True)


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _channel_entry(channel: ChannelGroup) -> dict[str, object]:
    entry: dict[str, object] = {"name": channel.name, "paused": channel.paused}
    if channel.ordered:
        entry["ordered"] = True
    return entry


def _partition_entry(part: Partition) -> dict[str, object]:
    entry: dict[str, object] = {"buffer_start": part.buffer_start}
    if part.paused:
        entry["paused_at"] = part.paused_at
    return entry


def _partition_entries(entry: dict[str, object], count: int) -> list[dict[str, object]]:
    """Each partition's saved state; a single-partition topic keeps NSQ's flat fields."""
    if count == 1:
        return [{"buffer_start": entry.get("buffer_start"), "paused_at": entry.get("paused_at")}]
    found = entry.get("partitions")
    saved = [p for p in found if isinstance(p, dict)] if isinstance(found, list) else []
    return (saved + [{} for _ in range(count)])[:count]
