"""nsqd's TCP protocol V2 server: one ``asyncio.Protocol`` per client connection.

Bytes go to the sans-IO ``CommandParser``; each parsed command is one method here
(``identify``, ``sub``, ``pub`` …) that calls the broker. Replies keep the order of the
commands: a PUB's ``OK`` waits for the group commit that writes its message (and, under
the ``always`` fsync policy, for the fsync), and replies after it wait behind it.
Fatal errors send their frame and close the connection. Youzan's extensions are handled
here too: partitioned PUB/MPUB/SUB, SUB_ORDERED, PUB_EXT/MPUB_EXT (headers checked, stored
in the record's extension) and PUB_TRACE/MPUB_TRACE (trace id stored; the reply carries
ID, trace id, offset and size); a client that IDENTIFYs with ``extend_support`` gets
extended message frames (its sink is an ``ExtendSink`` in front of this connection).

Output follows nsqd's buffered writer: frames gathered during a loop turn go out with one
``writelines``. A response, error or heartbeat is flushed at the end of its turn, with any
messages before it. Message frames alone wait, as NSQ's messagePump lets them, until
``output_buffer_size`` bytes are buffered (written at once, mid-turn), the client stops
being ready (in flight >= RDY, channel paused or ordered, not subscribed), or
``output_buffer_timeout`` has passed since the first of them, by the server's clock
(checked by the server's ticker) or in real time (a loop timer); a size or timeout of -1
in IDENTIFY turns buffering off.
Writes have backpressure: when the transport's buffer passes its high-water mark
(``pause_writing``) the client's RDY window counts as full, so its channel skips it until
the buffer drains (``resume_writing``); then, and while the replies queued for it are over
the mark, its commands stop running and its socket is not read (``nsqd.flow``, which also
owns the read and write deadlines the server's ticker checks in ``heartbeat`` and the input
a client may send before AUTH).

A connection knows its nsqd only through the ``ConnectionContext`` the server builds once
it runs (broker, options, limits, clock, loop, TLS and auth settings, the set of live
connections, and the group commit's two entry points ``touch`` and ``expect_ack``); the
server reads back only public members (``release_replies``, ``flush``, ``heartbeat``,
``awaiting_acks``, ``has_output``). Imports the broker, ``nsqpy.protocol`` and the nsqd
modules below it (``auth``, ``upgrade``, ``flow``, ``tcp_extend``, ``ack``); never the server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from nsqpy.broker.broker import Broker, Placement
from nsqpy.broker.channel import Channel
from nsqpy.broker.client import Client
from nsqpy.broker.extensions import ExtendSink
from nsqpy.broker.partition import Partition
from nsqpy.errors import (
    AuthDisabled,
    AuthFirst,
    BadTopic,
    DpubFailed,
    FinFailed,
    MpubFailed,
    NotLeader,
    NotLeaderForSub,
    ProtocolError,
    PubFailed,
    ReqFailed,
    StorageError,
    SubFailed,
    TouchFailed,
)
from nsqpy.nsqd.ack import Ack
from nsqpy.nsqd.auth import AuthClient, ConnectionAuth
from nsqpy.nsqd.flow import (
    FIN_BATCH,
    REPLY_OVERHEAD,
    WRITE_HIGH_WATER,
    expired,
    pre_auth_budget,
)
from nsqpy.nsqd.gate import ELSEWHERE, HERE, TopicGate
from nsqpy.nsqd.tcp_extend import Extended, extended_entries, traced_reply
from nsqpy.nsqd.tls import TlsSettings
from nsqpy.nsqd.upgrade import begin_upgrade
from nsqpy.options import NsqdOptions
from nsqpy.protocol.commands import (
    Auth,
    Cls,
    CommandParser,
    Dpub,
    Fin,
    Identify,
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
    Pub,
    PubExt,
    PubTrace,
    Rdy,
    Req,
    Sub,
    Touch,
)
from nsqpy.protocol.frames import (
    CLOSE_WAIT_FRAME,
    HEARTBEAT_FRAME,
    OK_FRAME,
    encode_error,
    encode_response,
)
from nsqpy.protocol.identify import identify_response, negotiate, parse_identify
from nsqpy.protocol.limits import DEFAULT_OUTPUT_BUFFER_SIZE, Limits
from nsqpy.protocol.message import try_decode_message_id
from nsqpy.protocol.names import is_ephemeral, valid_topic_name
from nsqpy.protocol.state import (
    CLOSING,
    SUBSCRIBED,
    check_verb,
)
from nsqpy.storage import Entry


def failed_verb(error: type[ProtocolError]) -> str:
    """The verb NSQ names in a publish failure: E_MPUB_FAILED -> "MPUB"."""
    return error.code[2:].removesuffix("_FAILED")


log = logging.getLogger("nsqpy.nsqd")


@dataclass(frozen=True, slots=True)
class ConnectionContext:
    """What a connection uses of its nsqd, built by the server once its loop runs."""

    broker: Broker
    opts: NsqdOptions
    limits: Limits
    clock: Callable[[], int]  # ns; the server's clock (fake in tests)
    loop: asyncio.AbstractEventLoop
    tls: TlsSettings
    auth: AuthClient | None  # None unless --auth-http-address is set
    connections: set[V2Connection]  # every live connection (the server's ticker visits them)
    # The group commit: write this connection's output at the end of the loop turn ...
    touch: Callable[[V2Connection], None]
    # ... and an acknowledgement for a publish that appended up to an offset of a partition.
    expect_ack: Callable[[Partition, int, type[ProtocolError]], Ack]
    cluster: TopicGate | None = None  # with --etcd-endpoints


class V2Connection(asyncio.Protocol):
    """One client connection speaking protocol V2."""

    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self._tls_required = ctx.tls.tcp_required
        self.parser = CommandParser(ctx.limits, gate=self._gate)
        self.transport: asyncio.Transport | None = None
        self.client = Client(sink=self)
        self._out: list[bytes] = []  # frames to write, in order
        self._out_bytes = 0  # bytes of message frames among them
        self._buffered_since = 0  # server clock when the first of them was buffered
        self._force = False  # a frame that is not a message is waiting: flush this turn
        self._timer: asyncio.TimerHandle | None = None
        self._buf_size = DEFAULT_OUTPUT_BUFFER_SIZE
        self._buf_timeout_ns = ctx.opts.output_buffer_timeout_ms * 1_000_000
        # Replies waiting for a publish acknowledgement: (ack or None, frame bytes, close after).
        self._replies: deque[tuple[Ack | None, bytes, bool]] = deque()
        self.heartbeat_ns = ctx.opts.client_timeout_ms * 500_000
        self.last_recv = ctx.clock()  # the server's clock: fake in tests
        self.last_heartbeat = self.last_recv
        self._heartbeat_ms = ctx.opts.client_timeout_ms // 2
        self.closing = False
        self._fatal = False
        self._held = False
        self._reading_paused = False  # by ``hold``
        # Flow control (``nsqd.flow``): bytes of replies queued (waiting for their ack or
        # gathered in _out) and of those waiting; past WRITE_HIGH_WATER, or while the
        # transport's buffer is, commands stop running and the socket is not read.
        self._reply_bytes = 0
        self._waiting_bytes = 0
        self._throttled = False
        self._unthrottle_due = False
        self._read_since = self.last_recv  # began waiting for its next command (deadline)
        self._stalled_since = 0  # when the transport's buffer passed its high-water mark
        # FIN, REQ and RDY free room in a channel's windows: it is pumped once after the
        # commands that arrived together, not once per command (DESIGN "Speed in Python").
        self._pump_due: Channel | None = None
        self.auth = ConnectionAuth(self, ctx.auth) if ctx.auth is not None else None
        self._pre_auth_left = pre_auth_budget(ctx.limits) if self.auth is not None else -1

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        peer = transport.get_extra_info("peername")
        host, port = (peer[0], peer[1]) if isinstance(peer, tuple) else ("", 0)
        self.client.remote_address = f"{host}:{port}"
        self.client.client_id = host
        self.client.hostname = host
        self.client.connect_ts = int(time.time())
        self.client.msg_timeout_ns = self.ctx.opts.msg_timeout_ms * 1_000_000
        self.ctx.connections.add(self)
        self.broker.client_connected(self.client)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._timer is not None:
            self._timer.cancel()
        self.ctx.connections.discard(self)
        self.broker.client_gone(self.client)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        if self._fatal:
            return
        self.last_recv = self.ctx.clock()
        if self._pre_auth_left >= 0 and self._spend_pre_auth(len(data)):
            return
        self.parser.feed(data)
        self._process()

    def _spend_pre_auth(self, size: int) -> bool:
        """Count input against the pre-AUTH budget (``nsqd.flow``); True when it is spent
        (the connection is then refused with E_AUTH_FIRST)."""
        if self.client.authed:
            self._pre_auth_left = -1
            return False
        self._pre_auth_left -= size
        if self._pre_auth_left >= 0:
            return False
        budget = pre_auth_budget(self.ctx.limits)
        log.info("[%s] closing: over %d bytes sent before AUTH", self.client.remote_address, budget)
        self.send_error(AuthFirst(f"AUTH required before more than {budget} bytes"))
        self.ctx.touch(self)
        return True

    def _process(self) -> None:
        """Run every complete command buffered, unless held (AUTH query, stream upgrade) or
        throttled (its replies are not being read: see ``nsqd.flow``)."""
        ran = False
        try:
            while not self._fatal and not self._held and not self._throttled:
                if self._fin_burst():
                    ran = True
                    continue
                command = self.parser.next()
                if command is None:
                    break
                ran = True
                self.dispatch(command)
        except ProtocolError as err:
            if getattr(err, "silent", False):  # a line too long: no frame, as nsqd
                log.info("[%s] failed to read command - %s", self.client.remote_address, err)
                self._pump_due = None
                self._abort()
                return
            self.send_error(err)
        if ran:  # the next command's read begins now (nsqd sets its deadline here)
            self._read_since = self.ctx.clock()
        self._pump_pending()
        self.ctx.touch(self)

    def _fin_burst(self) -> bool:
        """Run a burst of plain FINs at the head of the input as one batch (what a busy
        consumer sends); False when the next command is anything else. The checks are those
        ``_gate`` and ``fin`` make; whatever they would refuse takes the ordinary path."""
        client = self.client
        channel = client.channel
        if (
            self.auth is not None
            or not isinstance(channel, Channel)
            or client.state != SUBSCRIBED
            or (self._tls_required and not client.tls)
        ):
            return False
        ids = self.parser.take_fins(FIN_BATCH)
        if not ids:
            return False
        for err in channel.finish_ids(client, ids, self.broker.clock()):
            self.send_error(err)
        self._pump_due = channel
        return True

    def _pump_pending(self) -> None:
        channel, self._pump_due = self._pump_due, None
        if channel is not None and not channel.deleted:
            channel.pump(self.broker.clock())

    def hold(self, *, pause_reading: bool = True) -> None:
        """Run no more commands until ``resume`` (an AUTH query or a stream upgrade runs);
        the socket is read meanwhile only if ``pause_reading`` is False."""
        self._held = True
        self._reading_paused = pause_reading
        self._update_reading()

    def resume(self) -> None:
        """Run the commands that arrived meanwhile and read again."""
        if not self._held:
            return
        self._held = False
        if self.transport is None:  # gone meanwhile: run nothing more for a dead client
            return
        self._reading_paused = False
        self._read_since = self.ctx.clock()
        self._update_reading()
        self._process()
        self.ctx.touch(self)

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

    def _maybe_unthrottle(self) -> None:
        """Its replies drained: run and read again, on the next turn (this may be called
        while a channel is delivering)."""
        if (
            self._throttled
            and not self._unthrottle_due
            and not self.client.write_paused
            and self._reply_bytes <= WRITE_HIGH_WATER
        ):
            self._unthrottle_due = True
            self.ctx.loop.call_soon(self._unthrottle)

    def _unthrottle(self) -> None:
        self._unthrottle_due = False
        if self.transport is None or self.client.write_paused:
            return
        if self._reply_bytes > WRITE_HIGH_WATER:
            return
        self._throttled = False
        self._read_since = self.ctx.clock()
        self._update_reading()
        self._process()  # the commands that were buffered meanwhile

    # -- output ----------------------------------------------------------------------

    def send_message(self, frame: bytes) -> None:
        """Sink for the broker: a message frame for this client (buffered, see the module doc)."""
        self._out.append(frame)
        self._out_bytes += len(frame)
        if not self._buffered_since:
            self._buffered_since = self.ctx.clock()
        if self._out_bytes >= self._buf_size:
            self._write_out()  # the buffer is full: it goes now, as bufio writes through
        else:
            self.ctx.touch(self)

    def pause_writing(self) -> None:
        """The transport's buffer passed its high-water mark: stop taking messages, running
        commands and reading (``nsqd.flow``)."""
        self.client.write_paused = True
        self._stalled_since = self.ctx.clock()
        self._throttle()

    def resume_writing(self) -> None:
        self.client.write_paused = False
        self._stalled_since = 0
        channel = self.client.channel
        if isinstance(channel, Channel):
            channel.pump(self.broker.clock())
        self.ctx.touch(self)
        self._maybe_unthrottle()

    def close_by_server(self) -> None:
        """The channel or topic was deleted: close the connection."""
        self._reply(None, b"", close=True)
        self.ctx.touch(self)

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
        self._replies.append((ack, frame, close))

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
                frame, close = encode_error(ack.error), True
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
    def awaiting_acks(self) -> bool:
        """Replies wait for a publish acknowledgement (the server looks again after a
        commit or an fsync)."""
        return bool(self._replies)

    @property
    def has_output(self) -> bool:
        """Frames are gathered, not yet written."""
        return bool(self._out)

    def pending_acks(self) -> list[Ack]:
        """The acknowledgements queued replies still wait for (a stream upgrade waits too)."""
        return [ack for ack, _, _ in self._replies if ack is not None and not ack.done]

    def respond(self, frame: bytes) -> None:
        """Answer ``frame``, in order behind the replies already queued."""
        self._reply(None, frame)

    def flush(self, force: bool = False) -> None:
        """End of a loop turn: write what is gathered unless only messages wait in a buffer
        that may still wait (see the module doc); ``force`` writes in any case."""
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
        return self.ctx.clock() - self._buffered_since >= self._buf_timeout_ns

    def _arm_timer(self) -> None:
        """Flush when the output buffer timeout has passed in real time (the server's ticker
        checks its own clock too: with a fake clock, tests move time themselves)."""
        if self._timer is None:
            self._timer = self.ctx.loop.call_later(self._buf_timeout_ns / 1e9, self._buffer_timer)

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

    def heartbeat(self, now_ns: int) -> None:
        """Called by the server's ticker: send heartbeats; close a connection past its read
        or write deadline (``nsqd.flow``)."""
        if self.closing:
            return
        pre_auth = self.auth is not None and not self.client.authed
        why = expired(
            now_ns,
            self.heartbeat_ns,
            pre_auth_ns=self.ctx.opts.client_timeout_ms * 500_000 if pre_auth else 0,
            read_since=self._read_since,
            stalled_since=self._stalled_since,
            reading=not (self._held or self._throttled),
        )
        if why:
            log.info("[%s] closing: %s", self.client.remote_address, why)
            self._abort()
            return
        if self.heartbeat_ns <= 0:
            return
        if now_ns - self.last_heartbeat >= self.heartbeat_ns:
            self.last_heartbeat = now_ns
            self._reply(None, HEARTBEAT_FRAME)
            self.ctx.touch(self)

    # -- commands --------------------------------------------------------------------

    def _gate(self, verb: bytes) -> bool:
        """nsqd's checks before a command's parameters: TLS policy, state, SUB's heartbeats."""
        return check_verb(
            self.client.state,
            verb,
            tls_required_and_not_tls=self._tls_required and not self.client.tls,
            heartbeat_interval_ms=self._heartbeat_ms,
        )

    def dispatch(self, command: object) -> None:
        """Run one parsed command (``ConnectionAuth`` re-runs one it held back)."""
        try:
            if self.auth is not None and self.auth.intercept(command):
                return
            match command:
                case Pub():
                    self.pub(command)
                case Fin():
                    self.fin(command)
                case Rdy():
                    self.rdy(command)
                case Mpub():
                    self.mpub(command)
                case Req():
                    self.req(command)
                case Touch():
                    self.touch(command)
                case Nop():
                    pass
                case Dpub():
                    self.dpub(command)
                case Sub():
                    self.sub(command)
                case Identify():
                    self.identify(command)
                case Cls():
                    self.cls()
                case Auth():
                    raise AuthDisabled("AUTH disabled")
                case PubExt() | MpubExt() | PubTrace() | MpubTrace():
                    self.pub_extended(command)
        except ProtocolError as err:
            self.send_error(err)

    def identify(self, cmd: Identify) -> None:
        req = parse_identify(cmd.body, self.ctx.limits)
        neg = negotiate(req, self.ctx.limits)
        c = self.client
        if req.client_id:
            c.client_id = req.client_id
        if req.hostname:
            c.hostname = req.hostname
        c.user_agent = req.user_agent
        c.sample_rate = neg.sample_rate
        c.msg_timeout_ns = neg.msg_timeout_ms * 1_000_000
        self.heartbeat_ns = (
            neg.heartbeat_interval_ms * 1_000_000 if neg.heartbeat_interval_ms > 0 else -1
        )
        self._buf_size = neg.output_buffer_size
        self._buf_timeout_ns = neg.output_buffer_timeout_ms * 1_000_000
        self._heartbeat_ms = neg.heartbeat_interval_ms
        if neg.extend_support and not isinstance(c.sink, ExtendSink):
            c.sink = ExtendSink(self, c)
        if not req.feature_negotiation:
            self._reply(None, OK_FRAME)
            return
        self._reply(None, encode_response(identify_response(neg, self.ctx.limits)))
        if neg.tls_v1 or neg.snappy or neg.deflate:
            begin_upgrade(self, neg, self.ctx.tls)

    def sub(self, cmd: Sub) -> None:
        if not self._topic_here(cmd.topic, cmd, NotLeaderForSub):
            return
        try:
            self.broker.subscribe(
                self.client, cmd.topic, cmd.channel, partition=cmd.partition, ordered=cmd.ordered
            )
        except StorageError as exc:  # the topic or channel could not be created (health NOK)
            raise SubFailed(f"SUB failed {exc}") from exc
        self.client.state = SUBSCRIBED
        self._reply(None, OK_FRAME)

    def rdy(self, cmd: Rdy) -> None:
        if self.client.state == CLOSING:
            return
        self.client.ready_count = cmd.count
        channel = self.client.channel
        if isinstance(channel, Channel):
            self._pump_due = channel

    @staticmethod
    def _id_of(msg_id: bytes, error: type[ProtocolError], verb: str) -> tuple[int, int]:
        """(partition, offset) of a message ID; an ID we never issued is the verb's
        non-fatal error."""
        decoded = try_decode_message_id(msg_id)
        if decoded is None:
            raise error(f"{verb} {msg_id.decode(errors='replace')} failed ID not in flight")
        return decoded

    def _channel(self) -> Channel:
        channel = self.client.channel
        assert isinstance(channel, Channel)
        return channel

    def fin(self, cmd: Fin) -> None:
        partition, offset = self._id_of(cmd.msg_id, FinFailed, "FIN")
        channel = self._channel()
        now = self.broker.clock()
        channel.finish(self.client, partition, offset, cmd.msg_id, now)
        self._pump_due = channel

    def req(self, cmd: Req) -> None:
        partition, offset = self._id_of(cmd.msg_id, ReqFailed, "REQ")
        channel = self._channel()
        now = self.broker.clock()
        channel.requeue(self.client, partition, offset, cmd.msg_id, cmd.timeout_ms, now)
        self._pump_due = channel

    def touch(self, cmd: Touch) -> None:
        partition, offset = self._id_of(cmd.msg_id, TouchFailed, "TOUCH")
        self._channel().touch(
            self.client,
            partition,
            offset,
            cmd.msg_id,
            self.broker.clock(),
            self.ctx.opts.max_msg_timeout_ms * 1_000_000,
        )

    def cls(self) -> None:
        self.client.ready_count = 0
        self.client.state = CLOSING
        self._reply(None, CLOSE_WAIT_FRAME)

    def _topic_here(self, topic: str, command: object, elsewhere: type[ProtocolError]) -> bool:
        """True when ``topic`` may be used here now (always, outside a cluster). A topic
        the cluster lacks: False, and ``command`` runs again once it is created (the
        connection runs nothing else meanwhile); one held only by other nodes: ``elsewhere``.
        """
        gate = self.ctx.cluster
        if gate is None or is_ephemeral(topic):
            return True
        where = gate.where(topic)
        if where == HERE:
            return True
        if where == ELSEWHERE:
            raise elsewhere()
        self.hold()
        self.ctx.loop.create_task(self._when_created(gate, topic, command))
        return False

    async def _when_created(self, gate: TopicGate, topic: str, command: object) -> None:
        try:
            await gate.prepare(topic)
        except ProtocolError as err:
            if self.transport is not None:
                self.send_error(err)
                self.ctx.touch(self)
                if not err.fatal:
                    self.resume()
            return
        if self.transport is None:
            return
        self.dispatch(command)
        self._pump_pending()
        self.ctx.touch(self)
        self.resume()

    def _publish(
        self,
        command: object,
        topic_name: str,
        bodies: list[bytes],
        deliver_at: int,
        failed: type[ProtocolError],
        partition: int = -1,
        entries: list[Entry] | None = None,
    ) -> list[Placement]:
        """Append and answer once written: ``bodies`` to ``partition`` (-1: the next in
        turn), or ``entries`` (see ``Broker.append_entries``)."""
        if not valid_topic_name(topic_name):
            raise BadTopic(f'PUB topic name "{topic_name}" is not valid')
        if partition >= 0:
            self.broker.check_partition(topic_name, partition)
        if not self._topic_here(topic_name, command, NotLeader):
            return []
        try:
            topic = self.broker.topic(topic_name)  # StorageError: it could not be created
            if topic.deleted:
                raise failed(f"{failed_verb(failed)} failed exiting")
            if entries is None:
                placed = [
                    self.broker.append(
                        topic, bodies, deliver_at, partition=partition, source=self.client
                    )
                ]
            else:
                placed = self.broker.append_entries(topic, entries, partition, source=self.client)
        except (OSError, StorageError) as exc:
            raise failed(f"{failed_verb(failed)} failed {exc}") from exc
        counts = self.client.pub_counts
        counts[topic_name] = counts.get(topic_name, 0) + (
            len(bodies) if entries is None else len(entries)
        )
        last = placed[-1]
        if len(placed) > 1:  # an MPUB split over partitions: OK once every part is written
            for place in placed[:-1]:
                self._reply(self.ctx.expect_ack(place.partition, place.last, failed), b"")
        self._reply(self.ctx.expect_ack(last.partition, last.last, failed), OK_FRAME)
        return placed

    def pub(self, cmd: Pub) -> None:
        self._publish(cmd, cmd.topic, [cmd.body], 0, PubFailed, cmd.partition)

    def mpub(self, cmd: Mpub) -> None:
        self._publish(cmd, cmd.topic, cmd.bodies, 0, MpubFailed, cmd.partition)

    def dpub(self, cmd: Dpub) -> None:
        deliver_at = self.broker.clock() + cmd.defer_ms * 1_000_000 if cmd.defer_ms else 0
        self._publish(cmd, cmd.topic, [cmd.body], deliver_at, DpubFailed)

    def pub_extended(self, cmd: Extended) -> None:
        """PUB_EXT, MPUB_EXT, PUB_TRACE, MPUB_TRACE (youzan): records with extensions."""
        entries, traced = extended_entries(cmd, self.broker.clock())
        failed = PubFailed if isinstance(cmd, PubExt | PubTrace) else MpubFailed
        placed = self._publish(cmd, cmd.topic, [], 0, failed, cmd.partition, entries)
        if traced and placed:  # the traced reply in place of the OK queued last
            ack, frame, close = self._replies.pop()
            reply = traced_reply(placed, entries)
            grown = len(reply) - len(frame)
            self._waiting_bytes += grown
            self._reply_bytes += grown
            self._replies.append((ack, reply, close))
