"""Replay: move a channel's cursor to an offset, a time, or either end of the retained log.

Owns the consume-position form of Youzan's ``/channel/setoffset`` body (``type:value``)
and what it means here (``parse_position``), the choice of the channel's parts a reset
applies to (``channel_partitions``: its ``ChannelPartition`` in each partition of the
topic, or in the one partition asked for), the resolution of a position against a partition's log
(``resolve``) and the reset itself (``set_offset``: every check first, then every cursor
is reset, so a bad request changes nothing); ``start_at`` is SUB_ADVANCED's reset. Must not import asyncio or any server.

A topic with N partitions has N logs, each with its own offsets (a message ID holds its
partition and its offset). With ``partition`` given, the position applies to that
partition's log only and the others are untouched (Youzan's form). Without it, it applies
to every partition, each resolved against its own log: ``timestamp:S`` moves each to its
first message at or after S, ``special`` each to its own oldest or newest end, and
``offset:N``/``msgcount:N`` each to its own offset N (the N-th message of each partition;
if N is outside any partition's retained range the request fails and nothing changes).

Positions (the value is a base-10 integer)::

    msgcount:N      offset N (offsets are the message count from the log's start)
    offset:N        the same, by its nsqpy name
    virtual_queue:N the same, by the name of youzan's queue offset (the offset a
                    SUB_ORDERED or SUB_ADVANCED subscriber is sent in front of each body)
    timestamp:S     the first message published at or after S (seconds since the epoch)
    special:-1      the newest end: skip everything retained (Youzan's value)
    special:-2      the oldest retained message (Kafka's "earliest" value)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nsqpy.broker.channel_partition import ChannelPartition

if TYPE_CHECKING:
    from nsqpy.broker.channel import Channel
    from nsqpy.broker.topic import Topic

NEWEST, OLDEST = -1, -2
_INT = re.compile(rb"[+-]?[0-9]{1,19}")
_KINDS = {b"msgcount": "offset", b"offset": "offset", b"virtual_queue": "offset",
          b"timestamp": "timestamp", b"special": "special"}  # fmt: skip


class BadPosition(ValueError):
    """A reset the caller got wrong; ``code`` is the V1 error code, ``status`` its HTTP status."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


@dataclass(frozen=True, slots=True)
class Position:
    kind: str  # offset, timestamp, special
    value: int


def parse_position(body: bytes) -> Position:
    """``type:value`` (surrounding whitespace allowed); BadPosition when it is not one."""
    text = body.strip()
    kind, sep, raw = text.partition(b":")
    if not sep or kind not in _KINDS or _INT.fullmatch(raw) is None:
        shown = text[:64].decode(errors="replace")
        raise BadPosition("INVALID_POSITION", f"invalid consume position {shown!r}")
    position = Position(_KINDS[kind], int(raw))
    if position.kind == "special" and position.value not in (NEWEST, OLDEST):
        raise BadPosition("INVALID_POSITION", f"special position must be -1 or -2, got {raw!r}")
    if position.kind != "special" and position.value < 0:
        raise BadPosition("INVALID_POSITION", f"{kind.decode()} must be >= 0, got {raw!r}")
    return position


def channel_partitions(topic: Topic, channel: str, partition: int | None) -> list[ChannelPartition]:
    """The channel's parts (one cursor each) a reset applies to (all when ``partition`` is
    None)."""
    found = topic.channels.get(channel)
    parts = list(found.parts) if found is not None else []
    if partition is None:
        return parts
    part = found.part(partition) if found is not None else None
    if part is None:
        raise BadPosition(
            "PARTITION_NOT_FOUND", f"topic {topic.name} has no partition {partition}", 404
        )
    return [part]


def resolve(part: ChannelPartition, position: Position) -> int:
    """The offset ``position`` names in the log of the channel part's partition."""
    log_ = part.topic.log
    low, end = log_.low_watermark, part.topic.readable_end
    if position.kind == "special":
        return end if position.value == NEWEST else low
    if position.kind == "timestamp":
        if position.value > 1 << 33:  # beyond year 2242: certainly not seconds
            raise BadPosition("INVALID_POSITION", f"timestamp {position.value} is not in seconds")
        return max(low, min(end, log_.offset_for_timestamp(position.value * 1_000_000_000)))
    if not low <= position.value <= end:
        raise BadPosition(
            "OFFSET_OUT_OF_RANGE", f"offset {position.value} is outside [{low}, {end}]"
        )
    return position.value


def set_offset(
    channel: Channel, parts: list[ChannelPartition], position: Position
) -> list[tuple[ChannelPartition, int]]:
    """Reset each of ``parts`` (of ``channel``) to ``position`` in its partition; returns
    (part, offset) pairs. Checks every one first."""
    targets = [(part, resolve(part, position)) for part in parts]
    channel.reset(targets)
    return targets


def start_at(
    channel: Channel, partition: int, position: Position
) -> list[tuple[ChannelPartition, int]]:
    """SUB_ADVANCED's position, applied by the channel's only consumer (a later one joins
    the channel where it is, as youzan's nsqd decides): its cursor over ``partition``, or
    over every partition led here when -1, moves to ``position``. BadPosition when out of
    range (nothing moved)."""
    if len(channel.consumers) > 1:
        return []
    parts = [
        part
        for part in channel.parts
        if part.topic.leading and (partition < 0 or part.number == partition)
    ]
    return set_offset(channel, parts, position)
