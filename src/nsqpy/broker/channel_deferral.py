"""A channel's deferred messages and storage failures: DPUBs on arrival, due ones, the cursor file.

Owns ``DeferralPaths``, the part of ``Channel`` that talks to its deferred set and cursor
file. A DPUB'd message goes to the deferred set as soon as it reaches the channel
(``_defer_arrived``, from the partition's notes, ``broker.dpubs``), consumers or not, so it
counts in ``deferred_count`` and never in ``depth``, as in NSQ. It stays out of the cursor
until the log read reaches it: its offset is kept in ``_ahead`` (sorted, all at or above
``next_read``), which ``depth`` subtracts; the read skips it (it is delivered from the
deferred set only, also when that copy was finished before the read came) and confirms it
then, in order, so a lagging channel's cursor keeps no range per DPUB. After a restart the
partition hands what the delayed store holds to the read to skip (``Partition._deferred_ahead``).
A write the delayed store or the cursor file refuses (a full disk) is reported to the
daemon's health (``broker.health``) and changes nothing: a REQ, FIN or TOUCH answers its
failure and the message stays in flight (``failed_once``: nothing retries it); a DPUB it
could not defer stays in the backlog and is tried again at every pump and scan, a due one it
could not lease at every scan, a cursor at every periodic save, each reported under its own
key until it goes through. Must not import asyncio or any server.
"""

from __future__ import annotations

import logging
from array import array
from typing import TYPE_CHECKING

from nsqpy.broker.channel_policy import FROM_DEFERRED, PolicyPaths
from nsqpy.broker.deferred import Due, NewEntry
from nsqpy.broker.health import cursor_key
from nsqpy.errors import StorageError
from nsqpy.protocol.state import SUBSCRIBED
from nsqpy.storage import CursorFile, CursorSnapshot, OffsetOutOfRange

if TYPE_CHECKING:
    from nsqpy.broker.client import Client

log = logging.getLogger("nsqpy.broker")

_NONE = 1 << 62  # no offset ahead: above every offset a log hands out
_COMPACT = 4096  # passed offsets kept at the head of ``_ahead`` before they are moved


class DeferralPaths(PolicyPaths):
    """Mixed into ``Channel``, which provides the attributes and methods declared below."""

    name: str
    cursor_file: CursorFile | None
    consumers: list[Client]
    paused: bool

    def _next_client(self, ready: list[Client]) -> Client:
        raise NotImplementedError

    def _deliver(
        self, client: Client, offset: int, attempts: int, timestamp: int, body: bytes,
        source: int, now: int,
    ) -> None:  # fmt: skip
        raise NotImplementedError

    def _init_deferral(self) -> None:
        self._stalled = False  # the delayed store refused a delayed message read: again
        self._ahead = array("q")  # DPUBs deferred on arrival, not yet reached by the read
        self._ahead_at = 0  # _ahead[:_ahead_at] are passed
        self._undeferred: list[NewEntry] = []  # DPUBs that arrived but the store refused
        self._deferral_failing = False
        self._pull_failing = False

    # -- DPUBs on arrival ------------------------------------------------------------

    def _defer_arrived(self, start: int, end: int) -> None:
        """Defer the DPUB'd messages among [start, end) (just arrived) and those the store
        refused before, in one write; they are ahead of the read until it reaches them."""
        entries = self._undeferred
        if start < end and self.topic.dpubs:
            entries = entries + self._arrived_entries(start, end)
        if not entries:
            return
        next_read = self.cursor.next_read
        entries = [e for e in entries if e[0] >= next_read]  # not read (and deferred) since
        if entries:
            try:
                self.deferred.add_new(entries)
            except StorageError as exc:
                self._undeferred = entries
                self._deferral_failed(exc)
                return
            self._ahead.extend(e[0] for e in entries)
            if self._stalled and self._ahead_next() == next_read:
                self._stalled = False  # the read stopped at one of them: now it skips it
        self._undeferred = []
        self._deferral_ok()

    def _arrived_entries(self, start: int, end: int) -> list[NewEntry]:
        keeps_bodies = self.deferred.keeps_bodies
        cursor = self.cursor
        entries: list[NewEntry] = []
        for offset, deliver_at in self.topic.dpubs.between(max(start, cursor.next_read), end):
            if cursor.ranges and cursor.is_confirmed(offset):
                continue  # dropped (a full ephemeral channel)
            timestamp, body = 0, b""
            if keeps_bodies:
                try:
                    frames = self.topic.log.read_frames(offset, 1)
                except (OffsetOutOfRange, StorageError):
                    continue
                if not frames or frames[0][0] != offset:
                    continue
                timestamp, body = frames[0][1], frames[0][4]
            entries.append((offset, deliver_at, timestamp, body))
        return entries

    def _ahead_next(self) -> int:
        """The first offset ahead of the read that is already deferred (``_NONE``: none)."""
        return self._ahead[self._ahead_at] if self._ahead_at < len(self._ahead) else _NONE

    def _ahead_count(self) -> int:
        return len(self._ahead) - self._ahead_at

    def _take_ahead(self, offset: int) -> bool:
        """The read reached ``offset``: confirm the deferred offsets it passed; True when
        ``offset`` is one of them (delivered from the deferred set only: skip it)."""
        ahead = self._ahead
        i, n = self._ahead_at, len(ahead)
        hit = False
        while i < n and ahead[i] <= offset:
            hit = ahead[i] == offset
            self._confirm(ahead[i])
            i += 1
        if i == n:
            del ahead[:]
            i = 0
        elif i > _COMPACT and 2 * i > n:
            del ahead[:i]
            i = 0
        self._ahead_at = i
        return hit

    def hold_ahead(self, offsets: list[int]) -> None:
        """At load: ``offsets`` (sorted, at or above the read) are in the deferred set but
        not confirmed in the cursor (it was saved before they were deferred): the read
        skips them, as it skips DPUBs deferred on arrival, and confirms them in order."""
        merged = sorted({*self._ahead[self._ahead_at :], *offsets})
        self._ahead = array("q", merged)
        self._ahead_at = 0

    def _clear_ahead(self) -> None:
        """The cursor was reset: nothing is ahead of the read, nothing waits to be deferred."""
        del self._ahead[:]
        self._ahead_at = 0
        self._undeferred = []
        self._stalled = False
        self._deferral_ok()

    # -- deferring what the read meets -----------------------------------------------

    def _defer(
        self, offset: int, deliver_at: int, attempts: int, timestamp: int, body: bytes
    ) -> None:
        """Move a message out of the cursor's window into the deferred set (StorageError
        when the delayed store cannot take it: then nothing changed)."""
        self.deferred.put(offset, deliver_at, attempts, timestamp, body)
        self._confirm(offset)

    def _defer_read(self, offset: int, deliver_at: int, timestamp: int, body: bytes) -> bool:
        """Defer a delayed message met while reading; False when the store refused it:
        reading stops there, and ``scan`` has the channel read it again until it goes."""
        try:
            self._defer(offset, deliver_at, 0, timestamp, body)
        except StorageError as exc:
            self.cursor.next_read = offset
            self._stalled = True
            self._deferral_failed(exc)
            return False
        if self._deferral_failing:
            self._deferral_ok()
        return True

    def _retry_stalled(self, now: int) -> None:
        """Without consumers to read it again: defer the delayed message the read stopped at."""
        offset = self.cursor.next_read
        read_frames = self.topic.log.read_frames if self.queue is None else self.queue.read_frames
        try:
            frames = read_frames(offset, 1)
        except (OffsetOutOfRange, StorageError):
            frames = []
        if not frames or frames[0][0] != offset or frames[0][2] <= now:
            self._stalled = False  # gone, or due now: the read delivers it as any other
            self._deferral_ok()
            return
        _, timestamp, deliver_at, _, body = frames[0]
        if self._defer_read(offset, deliver_at, timestamp, body):
            self.cursor.next_read = max(self.cursor.next_read, offset + 1)
            self._stalled = False
            self._deferral_ok()

    def _read_failed(self, exc: Exception) -> None:
        cursor = self.cursor
        if isinstance(exc, OffsetOutOfRange):
            log.warning(
                "channel %s/%s: offsets %d..%d were removed; skipping to %d",
                self.topic.name, self.name, cursor.next_read, exc.low - 1, exc.low,
            )  # fmt: skip
            cursor.next_read = exc.low
            if cursor.confirmed < exc.low:
                cursor.reset(exc.low)
        else:
            log.error("channel %s/%s: offset %d is unreadable, skipped: %s",
                      self.topic.name, self.name, cursor.next_read, exc)  # fmt: skip
            self._confirm(cursor.next_read)
            cursor.next_read += 1
        if self._ahead_count():
            self._take_ahead(cursor.next_read - 1)

    # -- health ----------------------------------------------------------------------

    def _key(self, kind: str) -> str:
        return f"{kind} of channel {self.topic.name}/{self.name} partition {self.topic.number}"

    def _storage_failed(self, what: str, exc: Exception) -> None:
        """A failure of the delayed store that nothing retries (its client was told)."""
        self.topic.health.failed_once(f"{what} of channel {self.topic.name}/{self.name}", exc)

    def _deferral_failed(self, exc: Exception) -> None:
        self._deferral_failing = True
        what = f"failed to defer a message of channel {self.topic.name}/{self.name}"
        self.topic.health.failed(what, exc, key=self._key("deferring the messages"))

    def _deferral_ok(self) -> None:
        if self._deferral_failing and not self._stalled and not self._undeferred:
            self._deferral_failing = False
            self.topic.health.ok(self._key("deferring the messages"))

    def forget_failures(self) -> None:
        """The channel is deleted: what it had failed to write is no longer pending."""
        health = self.topic.health
        if health.error:
            health.forget(self._key("deferring the messages"))
            health.forget(self._key("delivering the deferred messages"))
            if self.cursor_file is not None:
                health.forget(cursor_key(self.cursor_file.path))

    # -- due deferred messages -------------------------------------------------------

    def _pull_due(self, now: int) -> int:
        if self.paused:
            ready = []
        else:
            ready = [c for c in self.consumers if c.capacity > 0 and c.state == SUBSCRIBED]
        room = sum(c.capacity for c in ready)
        sent = 0
        try:
            for due in self.deferred.due(now, room) if room > 0 else ():
                sent += self._pull_one(due, ready, now)
        except StorageError as exc:  # what was not pulled stays due: a later scan pulls it
            self._pull_failing = True
            what = f"failed to deliver a deferred message of channel {self.topic.name}/{self.name}"
            self.topic.health.failed(what, exc, key=self._key("delivering the deferred messages"))
            return sent
        if self._pull_failing:  # pulled, or nobody to pull for: nothing waits on the store
            self._pull_failing = False
            self.topic.health.ok(self._key("delivering the deferred messages"))
        return sent

    def _pull_one(self, due: Due, ready: list[Client], now: int) -> int:
        """Deliver one due deferred message (its lease stored first); 1 when it went out."""
        ttl = self.policy.ttl_ns
        if ttl and due.attempts == 0 and due.deliver_at < now - ttl:
            self.deferred.remove(due.offset)  # a DPUB'd message nobody took in time
            self._expire(due.offset, now, confirm=False)  # (it left the cursor's window)
            return 0
        body, timestamp = due.body, due.timestamp
        if body is None:
            try:
                frames = self.topic.log.read_frames(due.offset, 1)
            except (OffsetOutOfRange, StorageError):
                frames = []
            if not frames or frames[0][0] != due.offset:
                self.deferred.remove(due.offset)
                return 0
            timestamp, body = frames[0][1], frames[0][4]
        if not ready:
            self.deferred.put(due.offset, now, due.attempts, timestamp, body)
            return 0
        client = self._next_client(ready)
        deadline = now + client.msg_timeout_ns  # the in-flight deadline ``_deliver`` gives it
        self.deferred.put(due.offset, deadline, due.attempts + 1, timestamp, body)
        self._deliver(client, due.offset, due.attempts + 1, timestamp, body, FROM_DEFERRED, now)
        self._leased += 1
        if client.capacity <= 0:
            ready.remove(client)
        return 1

    @property
    def deferred_count(self) -> int:
        return max(0, self.deferred.count() - self._leased)

    # -- cursor persistence ----------------------------------------------------------

    def cursor_snapshot(self) -> CursorSnapshot | None:
        """The cursor's bytes when its periodic save is due (the server writes them off-loop)."""
        if self.cursor_file is None:
            return None
        n, self._unsaved = self._unsaved, 0
        if not self.cursor_file.note(n):
            return None
        return self.cursor_file.snapshot(self.cursor)

    def maybe_save_cursor(self, force: bool = False) -> None:
        """Save the cursor now if due (or ``force``); a failed save is reported to the
        daemon's health and left due, so the periodic save writes it again."""
        cursor_file = self.cursor_file
        if cursor_file is None:
            return
        n, self._unsaved = self._unsaved, 0
        if not cursor_file.note(n) and not force:
            return
        key = cursor_key(cursor_file.path)
        try:
            cursor_file.save(self.cursor)
        except OSError as exc:
            cursor_file.note(1)
            self.topic.health.failed(key, exc)
            return
        if self.topic.health.error:
            self.topic.health.ok(key)
