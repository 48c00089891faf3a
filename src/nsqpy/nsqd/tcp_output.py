"""A V2 connection's output and flow control: ``BufferedConnection``, what ``nsqd.tcp``'s
``V2Connection`` is built on.

Output follows nsqd's buffered writer: frames gathered during a loop turn go out with one
``writelines``. A response, error or heartbeat is flushed at the end of its turn, with any
messages before it. Message frames alone wait, as NSQ's messagePump lets them, until
``output_buffer_size`` bytes are buffered (written at once, mid-turn), the client stops
being ready (in flight >= RDY, channel paused or ordered, not subscribed), or
``output_buffer_timeout`` has passed since the first of them, by the server's clock
(checked by the server's ticker) or in real time (a loop timer); a size or timeout of -1
in IDENTIFY turns buffering off. Replies keep the order of the commands: one waiting for
its publish's acknowledgement (``Ack``) holds back those after it (``release_replies``).
While the replies queued are over ``nsqd.flow``'s high-water mark, or the transport's buffer
is (``V2Connection.pause_writing``), the connection is throttled: it runs no command and
its socket is not read; ``hold``/``resume`` do the same for an AUTH query or a stream
upgrade. ``heartbeat`` (the server's ticker) sends heartbeats and closes a connection past
its read or write deadline. The input side (``_process``: run the commands buffered) is
the subclass's.

Imports the broker's ``Channel`` and ``Client``, ``nsqpy.protocol`` and ``nsqd.ack``/``flow``;
never ``nsqd.tcp`` or the server (the group commit is the ``touch`` it is given).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from nsqpy.broker.channel import Channel
from nsqpy.broker.client import Client
from nsqpy.errors import ProtocolError
from nsqpy.nsqd.ack import Ack
from nsqpy.nsqd.flow import (
    MAX_LOOK_NS,
    REPLY_OVERHEAD,
    WRITE_HIGH_WATER,
    expired,
    next_look,
)
from nsqpy.protocol.frames import HEARTBEAT_FRAME, encode_error
from nsqpy.protocol.limits import DEFAULT_OUTPUT_BUFFER_SIZE
from nsqpy.protocol.state import SUBSCRIBED

log = logging.getLogger("nsqpy.nsqd")


class BufferedConnection(asyncio.Protocol):
    """A client connection's buffered output, ordered replies and flow control."""

    def __init__(
        self,
        client: Client,
        *,
        clock: Callable[[], int],
        loop: asyncio.AbstractEventLoop,
        touch: Callable[[], None],
        waiting: Callable[[], None],
        look: Callable[[int], None],
        buffered: Callable[[], None],
        buf_timeout_ns: int,
        heartbeat_ns: int,
        now: int,
    ) -> None:
        self.client = client
        self._clock = clock  # ns; the server's clock (fake in tests)
        self._loop = loop
        self._touch = touch  # the group commit: write this output at the end of the loop turn
        self._waiting = waiting  # a reply now waits for an acknowledgement (the server keeps
        # such connections apart: a commit looks at them, not at every connection)
        self._look = look  # the server's ticker calls ``heartbeat`` at (or after) this time
        self._buffered = buffered  # messages wait in the buffer for its timeout (the
        # server's ticker flushes those on its own clock too)
        self.transport: asyncio.Transport | None = None
        self._out: list[bytes] = []  # frames to write, in order
        self._out_bytes = 0  # bytes of message frames among them
        self._buffered_since = 0  # server clock when the first of them was buffered
        self._force = False  # a frame that is not a message is waiting: flush this turn
        self._message_touched = False  # a message touched the server since its last flush
        self._timer: asyncio.TimerHandle | None = None
        self._buf_size = DEFAULT_OUTPUT_BUFFER_SIZE
        self._buf_timeout_ns = buf_timeout_ns
        # Replies waiting for a publish acknowledgement: (ack or None, frame bytes, close after).
        self._replies: deque[tuple[Ack | None, bytes, bool]] = deque()
        self.closing = False
        self._fatal = False
        self._held = False
        self._reading_paused = False  # by ``hold``
        # Flow control (``nsqd.flow``): bytes of replies queued (waiting for their ack or
        # gathered in _out) and of those waiting; past WRITE_HIGH_WATER, or while the
        # transport's buffer is, commands stop running and the socket is not read.
        self._reply_bytes = 0
        self._held_bytes = 0  # request bodies the connection waits on (forwarded publishes)
        self._waiting_bytes = 0
        self._throttled = False
        self._unthrottle_due = False
        self._read_since = now  # began waiting for its next command (deadline)
        self._stalled_since = 0  # when the transport's buffer passed its high-water mark
        self._pre_auth_ns = 0  # the read deadline before AUTH, when AUTH is required
        self.heartbeat_ns = heartbeat_ns  # -1: none (IDENTIFY)
        self.last_heartbeat = now
        self._closing_since = 0  # when the transport was told to close after its output
        self._looked = 0  # the server clock of the last look (``heartbeat``)
        # Before this (server clock) ``heartbeat`` has nothing to do: neither a heartbeat
        # nor a deadline is due (``flow.next_look``). The server's ticker calls it then
        # (``_look``), and at its next tick after any change of what they depend on
        # (``relook``; 0 here until then): thousands of idle clients cost a tick nothing.
        self.look_at = 0

    def _process(self) -> None:
        """Run every complete command buffered (the subclass's input side)."""
        raise NotImplementedError

    # -- holding and throttling ------------------------------------------------------

    def hold(self, *, pause_reading: bool = True) -> None:
        """Run no more commands until ``resume`` (an AUTH query or a stream upgrade runs);
        the socket is read meanwhile only if ``pause_reading`` is False."""
        self._held = True
        self._reading_paused = pause_reading
        self._update_reading()
        self.relook()

    def resume(self) -> None:
        """Run the commands that arrived meanwhile and read again."""
        if not self._held:
            return
        self._held = False
        self.relook()
        if self.transport is None:  # gone meanwhile: run nothing more for a dead client
            return
        self._reading_paused = False
        self._read_since = self._clock()
        self._update_reading()
        self._process()
        self._touch()

    def _update_reading(self) -> None:
        """Read the socket unless held with reading paused or throttled."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        want = not (self._reading_paused or self._throttled)
        if want != transport.is_reading():
            if want:
                transport.resume_reading()
            else:
                transport.pause_reading()

    def _throttle(self) -> None:
        """The client is not reading its replies: stop running its commands and reading."""
        self._throttled = True
        self._update_reading()
        self.relook()

    def _maybe_unthrottle(self) -> None:
        """Its replies drained: run and read again, on the next turn (this may be called
        while a channel is delivering)."""
        if (
            self._throttled
            and not self._unthrottle_due
            and not self.client.write_paused
            and self._reply_bytes + self._held_bytes <= WRITE_HIGH_WATER
        ):
            self._unthrottle_due = True
            self._loop.call_soon(self._unthrottle)

    def _unthrottle(self) -> None:
        self._unthrottle_due = False
        if self.transport is None or self.client.write_paused:
            return
        if self._reply_bytes + self._held_bytes > WRITE_HIGH_WATER:
            return
        self._throttled = False
        self._read_since = self._clock()
        self.relook()
        self._update_reading()
        self._process()  # the commands that were buffered meanwhile

    # -- output ----------------------------------------------------------------------

    def send_message(self, frame: bytes) -> None:
        """Sink for the broker: a message frame for this client (buffered, see the module doc)."""
        self._out.append(frame)
        self._out_bytes += len(frame)
        if not self._buffered_since:
            self._buffered_since = self._clock()
        if self._out_bytes >= self._buf_size:
            self._write_out()  # the buffer is full: it goes now, as bufio writes through
        elif not self._message_touched:  # (once per loop turn: the server flushes it then)
            self._message_touched = True
            self._touch()

    def close_by_server(self) -> None:
        """The channel or topic was deleted: close the connection."""
        self._reply(None, b"", close=True)
        self._touch()

    def _reply(self, ack: Ack | None, frame: bytes, close: bool = False) -> None:
        cost = len(frame) + REPLY_OVERHEAD
        self._reply_bytes += cost
        if self._reply_bytes > WRITE_HIGH_WATER and not self._throttled:
            self._throttle()  # the client is not reading its replies (``nsqd.flow``)
        if ack is None and not self._replies:
            if frame:
                self._out.append(frame)
                self._force = True
            if close:
                self._close_after_flush()
            return
        self._waiting_bytes += cost
        if not self._replies:
            self._waiting()
        self._replies.append((ack, frame, close))

    def _replace_reply(self, ack: Ack, frame: bytes) -> None:
        """The reply queued behind ``ack`` is ``frame`` after all (a forwarded traced
        publish: the leader's reply); nothing when it is gone (the connection closed)."""
        for n, (queued, old, close) in enumerate(self._replies):
            if queued is ack:
                grown = len(frame) - len(old)
                self._waiting_bytes += grown
                self._reply_bytes += grown
                self._replies[n] = (ack, frame, close)
                return

    def release_replies(self) -> bool:
        """Move replies whose acknowledgement arrived to the output, in order; True while
        some still wait for theirs."""
        replies = self._replies
        while replies:
            ack, frame, close = replies[0]
            if ack is not None and not ack.done:
                return True
            replies.popleft()
            self._waiting_bytes -= len(frame) + REPLY_OVERHEAD
            if ack is not None and ack.error is not None:
                self._reply_bytes -= len(frame)
                frame, close = encode_error(ack.error), ack.error.fatal
                self._reply_bytes += len(frame)
            if frame:
                self._out.append(frame)
                self._force = True
            if close:
                self._close_after_flush()
                replies.clear()
                self._reply_bytes -= self._waiting_bytes
                self._waiting_bytes = 0
                return False
        return False

    @property
    def has_output(self) -> bool:
        """Frames are gathered, not yet written."""
        return bool(self._out)

    def pending_acks(self) -> list[Ack]:
        """The acknowledgements queued replies still wait for (a stream upgrade waits too)."""
        return [ack for ack, _, _ in self._replies if ack is not None and not ack.done]

    def respond_after(self, ack: Ack, frame: bytes) -> None:
        """Answer ``frame`` once ``ack`` is resolved, in order behind the replies queued."""
        self._reply(ack, frame)

    def respond(self, frame: bytes) -> None:
        """Answer ``frame``, in order behind the replies already queued."""
        self._reply(None, frame)

    def flush(self, force: bool = False) -> None:
        """End of a loop turn: write what is gathered unless only messages wait in a buffer
        that may still wait (see the module doc); ``force`` writes in any case."""
        self._message_touched = False
        if self._out and not (force or self._force or self._flush_due()):
            self._arm_timer()
            return
        self._write_out()

    def _flush_due(self) -> bool:
        if self.closing or self._buf_timeout_ns <= 0 or self._buf_size <= 1:
            return True
        client = self.client
        channel = client.channel
        if client.capacity <= 0 or client.state != SUBSCRIBED:
            return True  # not ready for more: nsqd flushes
        if isinstance(channel, Channel) and (channel.paused or channel.ordered):
            return True  # an ordered channel sends the next only after a FIN: no batch to wait for
        return self._clock() - self._buffered_since >= self._buf_timeout_ns

    def _arm_timer(self) -> None:
        """Flush when the output buffer timeout has passed in real time (the server's ticker
        checks its own clock too: with a fake clock, tests move time themselves)."""
        if self._timer is None:
            self._timer = self._loop.call_later(self._buf_timeout_ns / 1e9, self._buffer_timer)
            self._buffered()

    def _buffer_timer(self) -> None:
        self._timer = None
        if self._out:
            self._write_out()

    def _write_out(self) -> None:
        """Write everything gathered, in one call."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._out and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(self._out)
        self._out.clear()
        self._out_bytes = 0
        self._reply_bytes = self._waiting_bytes
        self._buffered_since = 0
        self._force = False
        if self.closing and self.transport is not None and not self._replies:
            self.transport.close()
            if not self._closing_since:  # (its last output: ``_closing_deadline``)
                self._closing_since = self._clock()
                self.relook()
        elif self._throttled:
            self._maybe_unthrottle()

    def _close_after_flush(self) -> None:
        self.closing = True
        self._fatal = True

    def _abort(self) -> None:
        self._fatal = True
        if self.transport is not None:
            self.transport.abort()

    def send_error(self, err: ProtocolError) -> None:
        """Answer an error frame; a fatal error closes the connection after it."""
        if err.fatal:
            log.info("[%s] fatal error: %s", self.client.remote_address, err)
        self._reply(None, encode_error(err), close=err.fatal)

    # -- deadlines -------------------------------------------------------------------

    def _read_from(self, now_ns: int) -> None:
        """A command ran: the connection waits for its next one from ``now_ns`` on. The
        clock at or before the last look (it went back) calls for a look: the read
        deadline may now come before the look that was filed."""
        self._read_since = now_ns
        if now_ns <= self._looked:
            self.relook()

    def relook(self) -> None:
        """What the deadlines and heartbeats depend on changed (a stall, a pause of the
        reading, an IDENTIFY, an AUTH): ``heartbeat`` looks again at the next tick."""
        if self.look_at:
            self.look_at = 0
            self._look(0)

    def heartbeat(self, now_ns: int) -> None:
        """Called by the server's ticker: send heartbeats; close a connection past its read
        or write deadline (``nsqd.flow``). Nothing until the time ``flow.next_look`` gave
        when it last looked (or a ``relook``). A connection closing after its last output:
        ``_closing_deadline``."""
        if self.closing:
            self._closing_deadline(now_ns)
            return
        went_back = now_ns < self._looked  # (the clock stepped back since the last look)
        if not went_back and now_ns < self.look_at and self.look_at - now_ns <= MAX_LOOK_NS:
            self._look(self.look_at)  # (not yet; further than ever: the clock went back)
            return
        self._looked = now_ns
        if went_back:
            # What was stamped on the old time counts from now, and a heartbeat goes at
            # once: how long ago the last one went is unknown (waiting for the clock to be
            # back where it was, or even one more interval, could time the client out).
            self.last_heartbeat = now_ns - max(self.heartbeat_ns, 0)
            self._read_since = min(self._read_since, now_ns)
            self._stalled_since = min(self._stalled_since, now_ns)
        pre_auth_ns = 0 if self.client.authed else self._pre_auth_ns
        reading = not (self._held or self._throttled)
        why = expired(
            now_ns,
            self.heartbeat_ns,
            pre_auth_ns=pre_auth_ns,
            read_since=self._read_since,
            stalled_since=self._stalled_since,
            reading=reading,
        )
        if why:
            log.info("[%s] closing: %s", self.client.remote_address, why)
            self._abort()
            return
        if self.heartbeat_ns > 0 and now_ns - self.last_heartbeat >= self.heartbeat_ns:
            self.last_heartbeat = now_ns
            self._reply(None, HEARTBEAT_FRAME)
            self._touch()
        self.look_at = next_look(
            now_ns,
            self.heartbeat_ns,
            pre_auth_ns=pre_auth_ns,
            read_since=self._read_since,
            stalled_since=self._stalled_since,
            reading=reading,
            last_heartbeat=self.last_heartbeat,
        )
        self._look(self.look_at)

    def _closing_deadline(self, now_ns: int) -> None:
        """A connection closing after its last output is sent nothing more; it is gone once
        that output is written, and let go one heartbeat interval after the transport was
        told to close if it is not (nsqd's write deadline on its last frame): a client that
        stops reading keeps no socket. None with heartbeats disabled, as in nsqd, nor while
        replies still wait for their acknowledgement (the close then waits too)."""
        pre_auth_ns = 0 if self.client.authed else self._pre_auth_ns
        interval = self.heartbeat_ns if self.heartbeat_ns > 0 else pre_auth_ns
        if self.transport is None or interval <= 0 or not self._closing_since:
            return
        self._closing_since = min(self._closing_since, now_ns)  # (the clock went back)
        if now_ns - self._closing_since > interval:
            log.info("[%s] closing: output not read for %dms", self.client.remote_address,
                     interval // 1_000_000)  # fmt: skip
            self._abort()
            return
        self.look_at = self._closing_since + interval + 1
        self._look(self.look_at)
