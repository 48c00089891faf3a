"""nsqd's TCP protocol V2 server: one ``asyncio.Protocol`` per client connection.

Bytes go to the sans-IO ``CommandParser``; each parsed command is one method here
(``identify``, ``sub``, ``pub`` …) that calls the broker. Replies keep the order of the
commands: a PUB's ``OK`` waits for the group commit that writes its message (and, under
the ``always`` fsync policy, for the fsync), and replies after it wait behind it.
Message frames and replies are gathered during a loop turn and written with one
``writelines`` at its end. Fatal errors send their frame and close the connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, cast

from nsqpy.broker.channel import Channel
from nsqpy.broker.client import Client
from nsqpy.errors import (
    AuthDisabled,
    BadTopic,
    DpubFailed,
    FinFailed,
    MpubFailed,
    ProtocolError,
    PubFailed,
    ReqFailed,
    TouchFailed,
)
from nsqpy.protocol.commands import (
    Auth,
    Cls,
    CommandParser,
    Dpub,
    Fin,
    Identify,
    Mpub,
    Nop,
    Pub,
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
from nsqpy.protocol.message import try_decode_message_id
from nsqpy.protocol.names import valid_topic_name
from nsqpy.protocol.state import (
    CLOSING,
    SUBSCRIBED,
    check_verb,
)

if TYPE_CHECKING:
    from nsqpy.nsqd.server import Ack, NsqdServer

log = logging.getLogger("nsqpy.nsqd")


class V2Connection(asyncio.Protocol):
    """One client connection speaking protocol V2."""

    def __init__(self, server: NsqdServer) -> None:
        self.server = server
        self.broker = server.broker
        self.parser = CommandParser(server.limits, gate=self._gate)
        self.transport: asyncio.Transport | None = None
        self.client = Client(sink=self)
        self._out: list[bytes] = []
        # Replies waiting for a publish acknowledgement: (ack or None, frame bytes, close after).
        self._replies: deque[tuple[Ack | None, bytes, bool]] = deque()
        self.heartbeat_ns = server.opts.client_timeout_ms * 500_000
        self.last_recv = time.monotonic_ns()
        self.last_heartbeat = self.last_recv
        self._heartbeat_ms = server.opts.client_timeout_ms // 2
        self.closing = False
        self._fatal = False

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        host, port = (peer[0], peer[1]) if isinstance(peer, tuple) else ("", 0)
        self.client.remote_address = f"{host}:{port}"
        self.client.client_id = host
        self.client.hostname = host
        self.client.connect_ts = int(time.time())
        self.client.msg_timeout_ns = self.server.opts.msg_timeout_ms * 1_000_000
        self.server.connections.add(self)
        self.broker.client_connected(self.client)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.connections.discard(self)
        self.broker.client_gone(self.client)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        if self._fatal:
            return
        self.last_recv = time.monotonic_ns()
        self.parser.feed(data)
        try:
            while not self._fatal:
                command = self.parser.next()
                if command is None:
                    break
                self._dispatch(command)
        except ProtocolError as err:
            if getattr(err, "silent", False):
                self._abort()
                return
            self._error(err)
        self.server.touch_connection(self)

    # -- output ----------------------------------------------------------------------

    def send_message(self, frame: bytes) -> None:
        """Sink for the broker: a message frame for this client."""
        self._out.append(frame)
        self.server.touch_connection(self)

    def close_by_server(self) -> None:
        """The channel or topic was deleted: close the connection."""
        self._reply(None, b"", close=True)
        self.server.touch_connection(self)

    def _reply(self, ack: Ack | None, frame: bytes, close: bool = False) -> None:
        if ack is None and not self._replies:
            if frame:
                self._out.append(frame)
            if close:
                self._close_after_flush()
            return
        self._replies.append((ack, frame, close))

    def release_replies(self) -> None:
        """Move replies whose acknowledgement arrived to the output, in order."""
        replies = self._replies
        while replies:
            ack, frame, close = replies[0]
            if ack is not None and not ack.done:
                return
            replies.popleft()
            if ack is not None and ack.error is not None:
                frame, close = encode_error(ack.error), True
            if frame:
                self._out.append(frame)
            if close:
                self._close_after_flush()
                replies.clear()
                return

    def flush(self) -> None:
        """Write everything gathered during this loop turn in one call."""
        if self._out and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(self._out)
        self._out.clear()
        if self.closing and self.transport is not None and not self._replies:
            self.transport.close()

    def _close_after_flush(self) -> None:
        self.closing = True
        self._fatal = True

    def _abort(self) -> None:
        self._fatal = True
        if self.transport is not None:
            self.transport.abort()

    def _error(self, err: ProtocolError) -> None:
        if err.fatal:
            log.info("[%s] fatal error: %s", self.client.remote_address, err)
        self._reply(None, encode_error(err), close=err.fatal)

    def heartbeat(self, now_ns: int) -> None:
        """Called by the server's ticker: send heartbeats, close idle connections."""
        if self.heartbeat_ns <= 0 or self.closing:
            return
        if now_ns - self.last_recv > 2 * self.heartbeat_ns:
            log.info("[%s] closing: no command for 2 heartbeats", self.client.remote_address)
            self._abort()
            return
        if now_ns - self.last_heartbeat >= self.heartbeat_ns:
            self.last_heartbeat = now_ns
            self._reply(None, HEARTBEAT_FRAME)
            self.server.touch_connection(self)

    # -- commands --------------------------------------------------------------------

    def _gate(self, verb: bytes) -> bool:
        """nsqd's checks before a command's parameters: TLS policy, state, SUB's heartbeats."""
        return check_verb(
            self.client.state,
            verb,
            tls_required_and_not_tls=self.server.tls_required and not self.client.tls,
            heartbeat_interval_ms=self._heartbeat_ms,
        )

    def _dispatch(self, command: object) -> None:
        try:
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
        except ProtocolError as err:
            self._error(err)

    def identify(self, cmd: Identify) -> None:
        req = parse_identify(cmd.body, self.server.limits)
        neg = negotiate(req, self.server.limits)
        c = self.client
        if req.client_id:
            c.client_id = req.client_id
        if req.hostname:
            c.hostname = req.hostname
        c.user_agent = req.user_agent
        c.sample_rate = neg.sample_rate
        c.msg_timeout_ns = neg.msg_timeout_ms * 1_000_000
        self.heartbeat_ns = neg.heartbeat_interval_ms * 1_000_000 if neg.heartbeat_interval_ms > 0 else -1
        self._heartbeat_ms = neg.heartbeat_interval_ms
        if not req.feature_negotiation:
            self._reply(None, OK_FRAME)
            return
        self._reply(None, encode_response(identify_response(neg, self.server.limits)))

    def sub(self, cmd: Sub) -> None:
        channel = self.broker.subscribe(self.client, cmd.topic, cmd.channel)
        self.client.state = SUBSCRIBED
        self._reply(None, OK_FRAME)
        del channel

    def rdy(self, cmd: Rdy) -> None:
        if self.client.state == CLOSING:
            return
        self.client.ready_count = cmd.count
        channel = self.client.channel
        if isinstance(channel, Channel):
            channel.pump(self.broker.clock())

    @staticmethod
    def _offset_of(msg_id: bytes, error: type[ProtocolError], verb: str) -> int:
        """The offset in a message ID; an ID we never issued is the verb's non-fatal error."""
        decoded = try_decode_message_id(msg_id)
        if decoded is None:
            raise error(f"{verb} {msg_id.decode(errors='replace')} failed ID not in flight")
        return decoded[1]

    def _channel(self) -> Channel:
        channel = self.client.channel
        assert isinstance(channel, Channel)
        return channel

    def fin(self, cmd: Fin) -> None:
        offset = self._offset_of(cmd.msg_id, FinFailed, "FIN")
        channel = self._channel()
        now = self.broker.clock()
        channel.finish(self.client, offset, cmd.msg_id, now)
        channel.pump(now)

    def req(self, cmd: Req) -> None:
        offset = self._offset_of(cmd.msg_id, ReqFailed, "REQ")
        channel = self._channel()
        now = self.broker.clock()
        channel.requeue(self.client, offset, cmd.msg_id, cmd.timeout_ms, now)
        channel.pump(now)

    def touch(self, cmd: Touch) -> None:
        offset = self._offset_of(cmd.msg_id, TouchFailed, "TOUCH")
        self._channel().touch(
            self.client,
            offset,
            cmd.msg_id,
            self.broker.clock(),
            self.server.opts.max_msg_timeout_ms * 1_000_000,
        )

    def cls(self) -> None:
        self.client.ready_count = 0
        self.client.state = CLOSING
        self._reply(None, CLOSE_WAIT_FRAME)

    def _publish(
        self, topic_name: str, bodies: list[bytes], deliver_at: int, failed: type[ProtocolError]
    ) -> None:
        if not valid_topic_name(topic_name):
            raise BadTopic(f'PUB topic name "{topic_name}" is not valid')
        topic = self.broker.topic(topic_name)
        if topic.deleted:
            raise failed(f"{failed.code[2:]} failed exiting")
        try:
            last = self.broker.publish(topic, bodies, deliver_at)
        except OSError as exc:
            raise failed(f"{failed.code[2:]} failed {exc}") from exc
        counts = self.client.pub_counts
        counts[topic_name] = counts.get(topic_name, 0) + len(bodies)
        ack = self.server.expect_ack(topic, last, failed)
        self._reply(ack, OK_FRAME)

    def pub(self, cmd: Pub) -> None:
        self._publish(cmd.topic, [cmd.body], 0, PubFailed)

    def mpub(self, cmd: Mpub) -> None:
        self._publish(cmd.topic, cmd.bodies, 0, MpubFailed)

    def dpub(self, cmd: Dpub) -> None:
        deliver_at = self.broker.clock() + cmd.defer_ms * 1_000_000 if cmd.defer_ms else 0
        self._publish(cmd.topic, [cmd.body], deliver_at, DpubFailed)
