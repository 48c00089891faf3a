"""The broker's metadata file ``nsqd.dat``: what topics and channels exist, and how.

Owns the JSON document (NSQ's shape: ``topics`` with ``name``, ``paused`` and
``channels``, plus ``version``; nsqpy adds a topic's ``buffer_start`` and, while paused,
``paused_at``; a topic with several partitions ``partition_num`` and each partition's
``buffer_start``/``paused_at`` in ``partitions``, which in cluster mode lists only the
partitions held here, each with its ``partition`` number; an ordered topic or channel
``ordered``), its atomic write (temp file, fsync, rename) and the recreation of one
topic's entry at start-up (``load_topic``, invalid names and partition counts skipped with a
log line) through a ``Restorer`` (the broker) that creates without announcing or recording
what it creates. Ephemeral topics and channels are never written. A damaged file is moved
aside and the topics are found on disk (``discover``). Must not import asyncio or any
server, nor the broker (``Restorer`` is what it needs of it).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from nsqpy import NSQ_VERSION
from nsqpy.broker.channel import Channel
from nsqpy.broker.partition import Partition
from nsqpy.broker.topic import MAX_PARTITIONS, Topic
from nsqpy.protocol.names import is_ephemeral, valid_channel_name, valid_topic_name
from nsqpy.storage.files import write_atomic

log = logging.getLogger("nsqpy.broker")

METADATA_FILE = "nsqd.dat"


class Restorer(Protocol):
    """Creates what the metadata names (``Broker``), as it was: without announcing it
    (lookupd hooks) or marking the metadata to be written again (it is what it says)."""

    def restore_topic(
        self,
        name: str,
        partitions: int,
        buffer_starts: Sequence[int | None],
        ordered: bool,
        held: Sequence[int] | None = ...,
    ) -> Topic: ...

    def restore_channel(self, topic: Topic, name: str) -> Channel: ...


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
            entry["partitions"] = [_partition_entry(p, topic.held_all) for p in topic.partitions]
        if topic.ordered:
            entry["ordered"] = True
        entries.append(entry)
    return {"topics": entries, "version": NSQ_VERSION}


def write(data_path: Path, doc: dict[str, object]) -> None:
    """Replace ``nsqd.dat`` atomically with ``doc``."""
    data = json.dumps(doc, separators=(",", ":")).encode()
    write_atomic(data_path / METADATA_FILE, data, mode=0o600)


def read(data_path: Path) -> list[object] | None:
    """The topic entries of ``nsqd.dat``, reconciled with the disk (None: no file and no
    topic on disk). A damaged file is moved aside (``nsqd.dat.corrupt-<ns>``, logged) and
    the entries are found on disk instead."""
    path = data_path / METADATA_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:  # (a topic's files may be there already: see ``reconcile``)
        return reconcile(data_path, []) or None
    try:
        doc = json.loads(raw)
        topics = doc.get("topics")
        if not isinstance(topics, list | None):
            raise ValueError(f'"topics" is a {type(topics).__name__}, not a list')
    except (ValueError, AttributeError, RecursionError) as exc:
        aside = path.with_name(f"{METADATA_FILE}.corrupt-{time.time_ns()}")
        os.replace(path, aside)
        found = discover(data_path)
        log.error(
            "metadata %s is damaged (%s); moved aside to %s; %d topics found on disk are "
            "loaded with their channels (pauses are not known: they start unpaused)",
            path, str(exc)[:200], aside.name, len(found),
        )  # fmt: skip
        return [*found]
    return reconcile(data_path, list(topics or []))


def reconcile(data_path: Path, entries: list[object]) -> list[object]:
    """``entries`` made to agree with the disk: ``nsqd.dat`` is written a moment after a
    topic or channel is created, and a topic's files are removed just before it leaves the
    file, so a crash in between leaves the disk ahead. A topic or channel found on disk and
    not named is added; a topic whose directory holds only offset reservations (deleted)
    is left out."""
    found = {e["name"]: e for e in discover(data_path)}
    out: list[object] = []
    for entry in entries:
        name = entry.get("name") if isinstance(entry, dict) else None
        disk = found.pop(name, None) if isinstance(name, str) else None
        if disk is None and isinstance(name, str) and _deleted(data_path, name):
            log.info("topic %s was deleted just before the last stop; not loaded", name)
            continue
        if disk is not None and isinstance(entry, dict):
            named = entry.get("channels")
            if isinstance(named, list):
                have = {c.get("name") for c in named if isinstance(c, dict)}
                for channel in disk["channels"]:
                    if channel["name"] not in have:
                        named.append(channel)
                        log.info("TOPIC(%s): channel %s found on disk", name, channel["name"])
        out.append(entry)
    for name, entry in found.items():
        log.info("topic %s found on disk (created just before the last stop)", name)
        out.append(entry)
    return out


def _deleted(data_path: Path, name: str) -> bool:
    """The topic's directory is there but holds no log: what a deletion leaves."""
    folder = data_path / "topics" / f"topic-{name}"
    return folder.is_dir() and not any(folder.glob("p*/*.log"))


def discover(data_path: Path) -> list[dict[str, Any]]:
    """Topic entries rebuilt from the data path: each topic directory with a partition log,
    its partitions (``p<N>``) and its channels (cursor files, in any partition)."""
    entries: list[dict[str, Any]] = []
    root = data_path / "topics"
    for folder in sorted(root.glob("topic-*")) if root.is_dir() else []:
        name = folder.name.removeprefix("topic-")
        numbers = sorted(
            int(p.name[1:])
            for p in folder.glob("p*")
            if p.name[1:].isdigit() and any(p.glob("*.log"))
        )
        if not numbers or not valid_topic_name(name) or is_ephemeral(name):
            continue  # (a deleted topic keeps only its offset reservations)
        channels = sorted(
            {c.name.removeprefix("channel-").removesuffix(".cursor")
             for c in folder.glob("**/cursors/channel-*.cursor")}
        )  # fmt: skip
        entry: dict[str, object] = {
            "name": name,
            "paused": False,
            "channels": [{"name": c, "paused": False} for c in channels],
        }
        if numbers[-1] > 0:
            entry["partition_num"] = numbers[-1] + 1
        if len(numbers) <= numbers[-1]:  # (a cluster node holding some of them)
            entry["held"] = numbers
        entries.append(entry)
    return entries


def load_topic(restorer: Restorer, entry: object) -> None:
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
    parts, held = _partition_entries(entry, count)
    topic = restorer.restore_topic(
        name,
        count,
        [_int(p.get("buffer_start")) for p in parts],
        entry.get("ordered") is True,
        held,
    )
    if entry.get("paused"):
        topic.pause()
        for part in topic.partitions:
            paused_at = _int(parts[part.number].get("paused_at"))
            if paused_at is not None:
                part.paused_at = paused_at
    for centry in entry.get("channels") or []:  # type: ignore[attr-defined]
        cname = centry.get("name") if isinstance(centry, dict) else None
        if not isinstance(cname, str) or not valid_channel_name(cname) or is_ephemeral(cname):
            log.warning("skipping creation of invalid channel %r", cname)
            continue
        channel = restorer.restore_channel(topic, cname)
        channel.paused = bool(centry.get("paused"))
        if centry.get("ordered") is True:
            channel.set_ordered(True)


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _channel_entry(channel: Channel) -> dict[str, object]:
    entry: dict[str, object] = {"name": channel.name, "paused": channel.paused}
    if channel.ordered:
        entry["ordered"] = True
    return entry


def _partition_entry(part: Partition, held_all: bool) -> dict[str, object]:
    entry: dict[str, object] = {"buffer_start": part.buffer_start}
    if part.paused:
        entry["paused_at"] = part.paused_at
    if not held_all:
        entry["partition"] = part.number
    return entry


def _partition_entries(
    entry: dict[str, object], count: int
) -> tuple[list[dict[str, object]], list[int] | None]:
    """Each partition's saved state by number, and the numbers held here (None: all). A
    single-partition topic keeps NSQ's flat fields; the entries of a topic held in part
    name their ``partition`` (a topic found on disk lists them in ``held``: ``discover``)."""
    if count == 1:
        flat = {"buffer_start": entry.get("buffer_start"), "paused_at": entry.get("paused_at")}
        return [flat], None
    found = entry.get("partitions")
    saved = [p for p in found if isinstance(p, dict)] if isinstance(found, list) else []
    by_number: list[dict[str, object]] = [{} for _ in range(count)]
    held: set[int] = set()
    for p in saved:
        number = _int(p.get("partition"))
        if number is not None and 0 <= number < count:
            by_number[number] = p
            held.add(number)
    if held:
        return by_number, sorted(held)
    disk = entry.get("held")
    if isinstance(disk, list):
        held = {n for n in map(_int, disk) if n is not None and 0 <= n < count}
    return (saved + by_number)[:count], sorted(held) or None
