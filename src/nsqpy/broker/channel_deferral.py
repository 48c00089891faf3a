"""A channel partition's deferred set and cursor file: what it defers, leases and saves.

Owns ``ChannelDeferral``, which a ``ChannelPartition`` (``broker.channel_partition``) creates
and keeps as ``deferral``, given the partition it reads (``PartitionView``, also the
Protocol the channel modules share), the channel's name, cursor, cursor file, deferred set
and memory queue (a channel of an ephemeral topic reads that, not the log), and the
channel's own methods: ``confirm``, ``pick_client`` (the consumer a message goes to, by
youzan's dispatch tags when ``tagged``) and ``deliver``. A DPUB'd message goes
to the deferred set as soon as it reaches the channel (``defer_arrived``, from the
partition's notes, ``broker.dpubs``), consumers or not, so it counts in ``deferred_count``
and never in ``depth``, as in NSQ. It stays out of the cursor until the log read reaches
it: its offset is kept ahead of the read (``ahead``: sorted, all at or above
``next_read``), which ``depth`` subtracts; the read skips it (it is delivered from the
deferred set only, also when that copy was finished before the read came) and confirms it
then, in order (``take_ahead``), so a lagging channel's cursor keeps no range per DPUB.
After a restart the partition hands what the delayed store holds to the read to skip
(``hold_ahead``). A delayed message the read meets is deferred there (``defer_read``); the
read also skips confirmed ranges (``skip_confirmed``) and what the log lost or cannot read
(``read_failed``). Due messages are leased (their lease stored first) and delivered through
the channel (``pull_due``); ``leased`` counts those in flight.

A write the delayed store or the cursor file refuses (a full disk) is reported to the
daemon's health (``broker.health``) and changes nothing: a REQ, FIN or TOUCH answers its
failure and the message stays in flight (``storage_failed``: nothing retries it); a DPUB it
could not defer stays in the backlog and is tried again at every pump and scan
(``undeferred``), a delayed message the read met at every pump, or scan without consumers
(``stalled``), a due one it could not lease at every scan, a cursor at every periodic save
(``save_cursor``), each reported under its own key until it goes through. Must not import
asyncio or any server, nor the channel modules above it.
"""

from __future__ import annotations

import logging
from array import array
from bisect import bisect_right
from collections.abc import Callable
from typing import Protocol

from nsqpy.broker.client import Client
from nsqpy.broker.deferred import Deferred, Due, NewEntry
from nsqpy.broker.dpubs import PublishedDeferred
from nsqpy.broker.health import Health, cursor_key
from nsqpy.broker.inflight import FROM_DEFERRED
from nsqpy.broker.memqueue import MemoryQueue
from nsqpy.errors import StorageError
from nsqpy.storage import (
    CursorFile,
    CursorSnapshot,
    CursorState,
    MemoryLog,
    OffsetOutOfRange,
    PartitionLog,
)

log = logging.getLogger("nsqpy.broker")

# (client, offset, attempts, timestamp, body, source, now): the channel's delivery
# client, offset, attempts, timestamp, body, source, now, the record's extension as stored
Deliver = Callable[[Client, int, int, int, bytes, int, int, bytes], None]


class Expire(Protocol):
    """The policy's TTL expiry (``PolicyPaths.expire``)."""

    def __call__(self, offset: int, now: int, *, confirm: bool = ...) -> None: ...


NONE = 1 << 62  # no offset ahead: above every offset a log hands out
_COMPACT = 4096  # passed offsets kept at the head of ``ahead`` before they are moved


class PartitionView(Protocol):
    """The topic partition the channel modules read (``broker.partition.Partition``)."""

    @property
    def name(self) -> str: ...  # the topic's
    @property
    def number(self) -> int: ...
    @property
    def partition(self) -> int: ...  # (the number, as message IDs hold it)
    @property
    def ephemeral(self) -> bool: ...
    @property
    def mem_queue_size(self) -> int: ...
    @property
    def readable_end(self) -> int: ...
    @property
    def leading(self) -> bool: ...  # (a follower's parts deliver nothing)
    @property
    def cursor_bound(self) -> Callable[[str], int] | None: ...  # (ordered delivery waits)
    @property
    def log(self) -> PartitionLog | MemoryLog: ...
    @property
    def dpubs(self) -> PublishedDeferred: ...
    @property
    def health(self) -> Health: ...
    def extras(self, offset: int) -> tuple[int, bytes, bytes]: ...
    def extension(self, offset: int) -> tuple[int, bytes]: ...


class ChannelDeferral:
    """A channel partition's deferred set and cursor file: what it defers and leases, what
    its read skips, and what the stores refused."""

    def __init__(
        self,
        source: PartitionView,
        channel: str,
        cursor: CursorState,
        cursor_file: CursorFile | None,
        deferred: Deferred,
        queue: MemoryQueue | None,
        *,
        confirm: Callable[[int], bool],
        pick_client: Callable[[list[Client], bytes], Client | None],
        tagged: Callable[[], bool],
        deliver: Deliver,
    ) -> None:
        self.source = source
        self.channel = channel
        self.cursor = cursor
        self.cursor_file = cursor_file
        self.deferred = deferred
        self.queue = queue
        # the channel's: confirm (in the cursor, counted for its save), the consumer a
        # message (by its extension) goes to (None: none ready fits its dispatch tag),
        # whether any consumer wants a tag, and delivery (in flight from now)
        self.confirm = confirm
        self.pick_client = pick_client
        self.tagged = tagged
        self.deliver = deliver
        self.leased = 0  # deferred entries currently in flight
        self.stalled = False  # the delayed store refused a delayed message read: again
        self.ahead = array("q")  # DPUBs deferred on arrival, not yet reached by the read
        self.ahead_at = 0  # ahead[:ahead_at] are passed
        self.undeferred: list[NewEntry] = []  # DPUBs that arrived but the store refused
        self._deferral_failing = False
        self._pull_failing = False

    # -- DPUBs on arrival ------------------------------------------------------------

    def defer_arrived(self, start: int, end: int) -> None:
        """Defer the DPUB'd messages among [start, end) (just arrived) and those the store
        refused before, in one write; they are ahead of the read until it reaches them."""
        entries = self.undeferred
        if start < end and self.source.dpubs:
            entries = entries + self._arrived_entries(start, end)
        if not entries:
            return
        next_read = self.cursor.next_read
        entries = [e for e in entries if e[0] >= next_read]  # not read (and deferred) since
        if entries:
            try:
                self.deferred.add_new(entries)
            except StorageError as exc:
                self.undeferred = entries
                self._deferral_failed(exc)
                return
            self.ahead.extend(e[0] for e in entries)
            if self.stalled and self.next_ahead() == next_read:
                self.stalled = False  # the read stopped at one of them: now it skips it
        self.undeferred = []
        self._deferral_ok()

    def _arrived_entries(self, start: int, end: int) -> list[NewEntry]:
        keeps_bodies = self.deferred.keeps_bodies
        cursor = self.cursor
        log = self.source.log
        entries: list[NewEntry] = []
        for offset, deliver_at in self.source.dpubs.between(max(start, cursor.next_read), end):
            if cursor.ranges and cursor.is_confirmed(offset):
                continue  # dropped (a full ephemeral channel)
            timestamp, body = 0, b""
            if keeps_bodies:
                try:
                    frames = log.read_frames(offset, 1)
                except (OffsetOutOfRange, StorageError):
                    continue
                if not frames or frames[0][0] != offset:
                    continue
                timestamp, body = frames[0][1], frames[0][4]
            entries.append((offset, deliver_at, timestamp, body))
        return entries

    def next_ahead(self) -> int:
        """The first offset ahead of the read that is already deferred (``NONE``: none)."""
        return self.ahead[self.ahead_at] if self.ahead_at < len(self.ahead) else NONE

    def ahead_count(self) -> int:
        return len(self.ahead) - self.ahead_at

    def take_ahead(self, offset: int) -> bool:
        """The read reached ``offset``: confirm the deferred offsets it passed; True when
        ``offset`` is one of them (delivered from the deferred set only: skip it)."""
        ahead = self.ahead
        i, n = self.ahead_at, len(ahead)
        hit = False
        while i < n and ahead[i] <= offset:
            hit = ahead[i] == offset
            self.confirm(ahead[i])
            i += 1
        if i == n:
            del ahead[:]
            i = 0
        elif i > _COMPACT and 2 * i > n:
            del ahead[:i]
            i = 0
        self.ahead_at = i
        return hit

    def hold_ahead(self, offsets: list[int]) -> None:
        """At load: ``offsets`` (sorted, at or above the read) are in the deferred set but
        not confirmed in the cursor (it was saved before they were deferred): the read
        skips them, as it skips DPUBs deferred on arrival, and confirms them in order."""
        merged = sorted({*self.ahead[self.ahead_at :], *offsets})
        self.ahead = array("q", merged)
        self.ahead_at = 0

    def clear(self) -> None:
        """The cursor was reset, the in-flight table emptied: nothing is ahead of the read,
        nothing waits to be deferred, nothing is leased."""
        self.leased = 0
        del self.ahead[:]
        self.ahead_at = 0
        self.undeferred = []
        self.stalled = False
        self._deferral_ok()

    # -- deferring what the read meets -----------------------------------------------

    def defer(
        self, offset: int, deliver_at: int, attempts: int, timestamp: int, body: bytes
    ) -> None:
        """Move a message out of the cursor's window into the deferred set (StorageError
        when the delayed store cannot take it: then nothing changed)."""
        self.deferred.put(offset, deliver_at, attempts, timestamp, body)
        self.confirm(offset)

    def defer_read(self, offset: int, deliver_at: int, timestamp: int, body: bytes) -> bool:
        """Defer a delayed message met while reading; False when the store refused it:
        reading stops there, and the channel's ``scan`` has it read again until it goes."""
        try:
            self.defer(offset, deliver_at, 0, timestamp, body)
        except StorageError as exc:
            self.cursor.next_read = offset
            self.stalled = True
            self._deferral_failed(exc)
            return False
        if self._deferral_failing:
            self._deferral_ok()
        return True

    def retry_stalled(self, now: int) -> None:
        """Without consumers to read it again: defer the delayed message the read stopped at."""
        offset = self.cursor.next_read
        reader = self.source.log if self.queue is None else self.queue
        try:
            frames = reader.read_frames(offset, 1)
        except (OffsetOutOfRange, StorageError):
            frames = []
        if not frames or frames[0][0] != offset or frames[0][2] <= now:
            self.stalled = False  # gone, or due now: the read delivers it as any other
            self._deferral_ok()
            return
        _, timestamp, deliver_at, _, body, _ = frames[0]
        if self.defer_read(offset, deliver_at, timestamp, body):
            self.cursor.next_read = max(self.cursor.next_read, offset + 1)
            self.stalled = False
            self._deferral_ok()

    # -- what the read skips ----------------------------------------------------------

    def skip_confirmed(self) -> None:
        """Move next_read past a confirmed range it stands on (dropped or skipped offsets)."""
        cursor = self.cursor
        ranges = cursor.ranges
        i = bisect_right(ranges, (cursor.next_read, 1 << 64))
        if i and ranges[i - 1][1] > cursor.next_read:
            cursor.next_read = ranges[i - 1][1]

    def read_failed(self, exc: Exception) -> None:
        """The log refused the read at ``next_read``: skip what was removed, or the offset."""
        cursor = self.cursor
        if isinstance(exc, OffsetOutOfRange):
            log.warning(
                "channel %s/%s: offsets %d..%d were removed; skipping to %d",
                self.source.name, self.channel, cursor.next_read, exc.low - 1, exc.low,
            )  # fmt: skip
            cursor.next_read = exc.low
            if cursor.confirmed < exc.low:
                cursor.reset(exc.low)
        else:
            log.error("channel %s/%s: offset %d is unreadable, skipped: %s",
                      self.source.name, self.channel, cursor.next_read, exc)  # fmt: skip
            self.confirm(cursor.next_read)
            cursor.next_read += 1
        if self.ahead_count():
            self.take_ahead(cursor.next_read - 1)

    # -- due deferred messages -------------------------------------------------------

    def pull_due(self, ready: list[Client], now: int, ttl_ns: int, expire: Expire) -> int:
        """Deliver the due messages ``ready`` (consumers with room) can take; returns how
        many went out. Past ``ttl_ns`` (0: none), a DPUB'd one nobody took is ``expire``d."""
        room = sum(c.capacity for c in ready)
        sent = 0
        try:
            for due in self.deferred.due(now, room) if room > 0 else ():
                sent += self._pull_one(due, ready, now, ttl_ns, expire)
        except StorageError as exc:  # what was not pulled stays due: a later scan pulls it
            self._pull_failing = True
            what = (
                f"failed to deliver a deferred message of channel {self.source.name}/{self.channel}"
            )
            self.source.health.failed(what, exc, key=self._key("delivering the deferred messages"))
            return sent
        if self._pull_failing:  # pulled, or nobody to pull for: nothing waits on the store
            self._pull_failing = False
            self.source.health.ok(self._key("delivering the deferred messages"))
        return sent

    def _pull_one(self, due: Due, ready: list[Client], now: int, ttl: int, expire: Expire) -> int:
        """Deliver one due deferred message (its lease stored first); 1 when it went out."""
        if ttl and due.attempts == 0 and due.deliver_at < now - ttl:
            self.deferred.remove(due.offset)  # a DPUB'd message nobody took in time
            expire(due.offset, now, confirm=False)  # (it left the cursor's window)
            return 0
        body, timestamp, ext = due.body, due.timestamp, b""
        if body is None or self.tagged():  # (the extension, with its tag, is in the log)
            try:
                frames = self.source.log.read_frames(due.offset, 1)
            except (OffsetOutOfRange, StorageError):
                frames = []
            if frames and frames[0][0] == due.offset:
                timestamp, body, ext = frames[0][1], frames[0][4], frames[0][5]
            elif body is None:
                self.deferred.remove(due.offset)
                return 0
        client = self.pick_client(ready, ext) if ready else None
        if client is None:  # due again at once, for the next consumer that fits
            self.deferred.put(due.offset, now, due.attempts, timestamp, body)
            return 0
        deadline = now + client.msg_timeout_ns  # the in-flight deadline ``deliver`` gives it
        self.deferred.put(due.offset, deadline, due.attempts + 1, timestamp, body)
        self.deliver(client, due.offset, due.attempts + 1, timestamp, body, FROM_DEFERRED, now, ext)
        self.leased += 1
        if client.capacity <= 0:
            ready.remove(client)
        return 1

    def count(self) -> int:
        """Deferred messages not in flight (NSQ's ``deferred_count``)."""
        return max(0, self.deferred.count() - self.leased)

    # -- health ----------------------------------------------------------------------

    def _key(self, kind: str) -> str:
        source = self.source
        return f"{kind} of channel {source.name}/{self.channel} partition {source.number}"

    def storage_failed(self, what: str, exc: Exception) -> None:
        """A failure of the delayed store that nothing retries (its client was told)."""
        self.source.health.failed_once(f"{what} of channel {self.source.name}/{self.channel}", exc)

    def _deferral_failed(self, exc: Exception) -> None:
        self._deferral_failing = True
        what = f"failed to defer a message of channel {self.source.name}/{self.channel}"
        self.source.health.failed(what, exc, key=self._key("deferring the messages"))

    def _deferral_ok(self) -> None:
        if self._deferral_failing and not self.stalled and not self.undeferred:
            self._deferral_failing = False
            self.source.health.ok(self._key("deferring the messages"))

    def forget_failures(self) -> None:
        """The channel is deleted: what it had failed to write is no longer pending."""
        health = self.source.health
        if health.error:
            health.forget(self._key("deferring the messages"))
            health.forget(self._key("delivering the deferred messages"))
            if self.cursor_file is not None:
                health.forget(cursor_key(self.cursor_file.path))

    # -- cursor persistence ----------------------------------------------------------

    def cursor_snapshot(self, unsaved: int) -> CursorSnapshot | None:
        """The cursor's bytes when its periodic save is due after ``unsaved`` more
        confirmations (the server writes them off the event loop)."""
        if self.cursor_file is None or not self.cursor_file.note(unsaved):
            return None
        return self.cursor_file.snapshot(self.cursor)

    def save_cursor(self, unsaved: int, force: bool = False) -> None:
        """Save the cursor now if due after ``unsaved`` more confirmations (or ``force``); a
        failed save is reported to the daemon's health and left due, so the periodic save
        writes it again."""
        cursor_file = self.cursor_file
        if cursor_file is None or (not cursor_file.note(unsaved) and not force):
            return
        key = cursor_key(cursor_file.path)
        health = self.source.health
        try:
            cursor_file.save(self.cursor)
        except OSError as exc:
            cursor_file.note(1)
            health.failed(key, exc)
            return
        if health.error:
            health.ok(key)
