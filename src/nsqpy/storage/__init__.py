"""nsqpy.storage: the topic log, channel cursors and the delayed store. Bytes only.

Owns everything nsqpy keeps on disk for a partition: the segment log (``PartitionLog``,
``records``/``encode``/``segment``/``reader``/``raw``/``log`` modules; ``RawBatch`` is
what ``PartitionLog.read_raw`` hands out), its in-memory twin for ephemeral
topics (``MemoryLog``), channel cursors (``CursorState``, ``CursorFile``) and the SQLite
delayed store (``DelayedStore``). Imports only the standard library, ``crc32c`` and
``nsqpy.errors``: no asyncio, no sockets, nothing from other nsqpy packages.
"""

from nsqpy.storage.cursor import CursorFile, CursorSnapshot, CursorState
from nsqpy.storage.delayed import DelayedEntry, DelayedStore
from nsqpy.storage.log import PartitionLog
from nsqpy.storage.memory import MemoryLog
from nsqpy.storage.policy import SyncPolicy
from nsqpy.storage.raw import RawBatch
from nsqpy.storage.records import (
    Entry,
    Frame,
    OffsetMismatch,
    OffsetOutOfRange,
    Record,
    StaleEpoch,
)

__all__ = [
    "CursorFile",
    "CursorSnapshot",
    "CursorState",
    "DelayedEntry",
    "DelayedStore",
    "Entry",
    "Frame",
    "MemoryLog",
    "OffsetMismatch",
    "OffsetOutOfRange",
    "PartitionLog",
    "RawBatch",
    "Record",
    "StaleEpoch",
    "SyncPolicy",
]
