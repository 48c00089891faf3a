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

Output, the order of replies and flow control are ``nsqd.tcp_output``'s
``BufferedConnection``, which this connection is: frames gathered per loop turn go out in
one write; past the high-water mark, or while held (AUTH query, stream upgrade), commands
stop running and the socket is not read (``nsqd.flow``, which also owns the read and write
deadlines the server's ticker checks in ``heartbeat`` and the input a client may send
before AUTH).

A connection knows its nsqd only through the ``ConnectionContext`` the server builds once
it runs (broker, options, limits, clock, loop, TLS and auth settings, the set of live
connections and of those whose replies wait for an acknowledgement, the group commit's
two entry points ``touch`` and ``expect_ack``, and the ``BackgroundTasks`` that hold what
a connection starts without awaiting it); the server reads back only public members
(``release_replies``, ``flush``, ``heartbeat``, ``has_output``). Imports the broker,
``nsqpy.protocol`` and the nsqd modules below it (``auth``, ``upgrade``, ``flow``,
``looks``, ``tcp_output``, ``tcp_extend``, ``ack``); never the server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, cast

from nsqpy.broker.broker import Broker, Placement
from nsqpy.broker.channel import Channel
from nsqpy.broker.client import Client
from nsqpy.broker.extensions import DetailSink, ExtendSink
from nsqpy.broker.partition import Partition
from nsqpy.broker.replay import BadPosition, Position, parse_position, start_at
from nsqpy.broker.topic import MAX_PARTITIONS, Topic
from nsqpy.daemon import BackgroundTasks
from nsqpy.errors import (
    AuthDisabled,
    AuthFirst,
    BadTopic,
    CreateTopicFailed,
    DpubFailed,
    FinFailed,
    InvalidError,
    MpubFailed,
    NotLeader,
    NotLeaderForSub,
    NotWritable,
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
    WRITE_HIGH_WATER,
    pre_auth_budget,
)
from nsqpy.nsqd.gate import ELSEWHERE, FORWARD_AGENT, HERE, TopicGate
from nsqpy.nsqd.looks import LookSchedule
from nsqpy.nsqd.tcp_extend import Extended, extended_entries, traced_reply
from nsqpy.nsqd.tcp_output import BufferedConnection
from nsqpy.nsqd.tls import TlsSettings
from nsqpy.nsqd.upgrade import begin_upgrade
from nsqpy.options import NsqdOptions
from nsqpy.protocol.commands import CommandParser
from nsqpy.protocol.extend import MpubExt, MpubTrace, PubExt, PubTrace, encode_extended
from nsqpy.protocol.frames import (
    CLOSE_WAIT_FRAME,
    OK_FRAME,
    encode_response,
)
from nsqpy.protocol.identify import identify_response, negotiate, parse_identify
from nsqpy.protocol.limits import Limits
from nsqpy.protocol.message import OFFSET_BITS, try_decode_message_id
from nsqpy.protocol.names import is_ephemeral, valid_topic_name
from nsqpy.protocol.state import (
    CLOSING,
    SUBSCRIBED,
    check_verb,
)
from nsqpy.protocol.verbs import (
    Auth,
    Cls,
    Dpub,
    Fin,
    Identify,
    InternalCreateTopic,
    Mpub,
    Nop,
    Pub,
    Rdy,
    Req,
    Sub,
    Touch,
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
    awaiting: set[V2Connection]  # those whose replies wait for an acknowledgement (or did)
    looks: LookSchedule[V2Connection]  # when the ticker calls their ``heartbeat``
    buffered: set[V2Connection]  # those whose messages waited in a buffer (or did)
    # The group commit: write this connection's output at the end of the loop turn ...
    touch: Callable[[V2Connection], None]
    # ... and an acknowledgement for a publish that appended up to an offset of a partition.
    expect_ack: Callable[[Partition, int, type[ProtocolError]], Ack]
    cluster: TopicGate | None = None  # with --etcd-endpoints
    commit_now: Callable[[], None] | None = None
    # A publish that is a whole read, appended and committed at once (``publish_now``)
    publish_now: Callable[[V2Connection, Topic, list[bytes], type[ProtocolError]], bool] | None = (
        None
    )
    # What connections start and do not await (a forward, a topic's creation, a stream
    # upgrade waiting for acknowledgements): held, failures logged, cancelled at stop.
    tasks: BackgroundTasks = field(default_factory=lambda: BackgroundTasks(log, "nsqd TCP"))


class V2Connection(BufferedConnection):
    """One client connection speaking protocol V2 (its output: ``BufferedConnection``)."""

    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self._tls_required = ctx.tls.tcp_required
        self.parser = CommandParser(ctx.limits, gate=self._gate)
        self.last_recv = ctx.clock()  # the server's clock: fake in tests
        self._heartbeat_ms = ctx.opts.client_timeout_ms // 2
        super().__init__(
            Client(sink=self),
            clock=ctx.clock,
            loop=ctx.loop,
            touch=partial(ctx.touch, self),
            waiting=partial(ctx.awaiting.add, self),
            look=partial(ctx.looks.file, self),
            buffered=partial(ctx.buffered.add, self),
            buf_timeout_ns=ctx.opts.output_buffer_timeout_ms * 1_000_000,
            heartbeat_ns=ctx.opts.client_timeout_ms * 500_000,
            now=self.last_recv,
        )
        # FIN, REQ and RDY free room in a channel's windows: it is pumped once after the
        # commands that arrived together, not once per command (DESIGN "Speed in Python").
        self._pump_due: Channel | None = None
        # A FIN or REQ on an ordered channel since the last pump: of which partition (-1:
        # of several), None when none
        self._cursor_moved: int | None = None
        self.auth = ConnectionAuth(self, ctx.auth) if ctx.auth is not None else None
        self._lane = ctx.publish_now if ctx.auth is None else None
        self._pre_auth_left = pre_auth_budget(ctx.limits) if self.auth is not None else -1
        if self.auth is not None:  # the read deadline until AUTH (``heartbeat``)
            self._pre_auth_ns = ctx.opts.client_timeout_ms * 500_000

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
        self.ctx.looks.file(self, 0)
        self.broker.client_connected(self.client)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._timer is not None:
            self._timer.cancel()
        self.ctx.connections.discard(self)
        self.ctx.awaiting.discard(self)
        self.ctx.looks.forget(self)
        self.ctx.buffered.discard(self)
        self.broker.client_gone(self.client)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        if self._fatal:
            return
        self.last_recv = self.ctx.clock()
        if self._pre_auth_left >= 0 and self._spend_pre_auth(len(data)):
            return
        if self._lane is not None and self._publish_lane(data):
            return
        self.parser.feed(data)
        self._process()
        if self.ctx.commit_now is not None:
            self.ctx.commit_now()

    def _publish_lane(self, data: bytes) -> bool:
        """A publisher's round trip in a few steps: when ``data`` is exactly one ``PUB`` or
        ``MPUB`` to an existing topic and the connection has nothing else going (no input
        buffered, no reply or output waiting, not held, not throttled, TLS as required),
        the server appends and commits it (``publish_now``: the same append,
        acknowledgement and commit the ordinary path makes, without parsing and
        dispatching). False, with nothing done, for anything else: the ordinary path
        runs (and answers whatever is wrong). Not used with AUTH; in a cluster, only for a
        topic this node leads a partition of (the commit then waits for the ISR as any
        publish's does)."""
        if (
            type(data) is not bytes
            or self._held
            or self._throttled
            or self._replies
            or self._out
            or (self._tls_required and not self.client.tls)
        ):
            return False
        taken = self.parser.take_publish(data)
        if taken is None:
            return False
        is_mpub, name, bodies = taken
        topic = self.broker.get_topic(name)
        gate = self.ctx.cluster
        if topic is None or (
            gate is not None and not is_ephemeral(name) and gate.where(name) != HERE
        ):
            return False
        try:
            if not self._lane(self, topic, bodies, MpubFailed if is_mpub else PubFailed):  # type: ignore[misc]
                return False
        except NotWritable as err:  # (what ``_publish`` answers for the partition in turn)
            self.send_error(err)
            self._read_from(self.last_recv)
            self.ctx.touch(self)
            return True
        counts = self.client.pub_counts
        counts[name] = counts.get(name, 0) + len(bodies)
        self._read_from(self.last_recv)
        return True

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
        client = self.client
        try:
            while not self._fatal and not self._held and not self._throttled:
                if client.state == SUBSCRIBED and self._fin_burst():  # (FINs need a SUB)
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
            self._read_from(self.ctx.clock())
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
        values = self.parser.take_fin_values(FIN_BATCH)
        if not values:
            return False
        for err in channel.finish_values(client, values, self.broker.clock()):
            self.send_error(err)
        self._pump_due = channel
        if channel.ordered:
            first = values[0] >> OFFSET_BITS
            self._moved(first if all(v >> OFFSET_BITS == first for v in values) else -1)
        return True

    def _moved(self, partition: int) -> None:
        """The cursor of an ordered channel's ``partition`` moved: its followers are sent
        it at the next pump (only that partition's links are woken)."""
        before = self._cursor_moved
        self._cursor_moved = partition if before is None or before == partition else -1

    def _pump_pending(self) -> None:
        channel, self._pump_due = self._pump_due, None
        moved, self._cursor_moved = self._cursor_moved, None
        if channel is not None and not channel.deleted:
            channel.pump(self.broker.clock())
            if moved is not None and self.ctx.cluster is not None:
                self.ctx.cluster.cursor_moved(channel.topic.name, moved)

    # -- output ----------------------------------------------------------------------

    def pause_writing(self) -> None:
        """The transport's buffer passed its high-water mark: stop taking messages, running
        commands and reading (``nsqd.flow``)."""
        self.client.write_paused = True
        self._stalled_since = self.ctx.clock()
        self._throttle()

    def resume_writing(self) -> None:
        self.client.write_paused = False
        self._stalled_since = 0
        self.relook()
        channel = self.client.channel
        if isinstance(channel, Channel):
            channel.pump(self.broker.clock())
        self.ctx.touch(self)
        self._maybe_unthrottle()

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
                case InternalCreateTopic():
                    self.internal_create_topic(command)
        except ProtocolError as err:
            self.send_error(err)

    def identify(self, cmd: Identify) -> None:
        req = parse_identify(cmd.body, self.ctx.limits)
        gate = self.ctx.cluster
        peer_tls = gate.peer_tls if gate is not None and req.user_agent == FORWARD_AGENT else None
        limits = (
            self.ctx.limits if peer_tls is None else replace(self.ctx.limits, tls_available=True)
        )
        neg = negotiate(req, limits)
        if peer_tls is not None and neg.tls_v1:  # trusted once its certificate is, else closed
            limits = replace(limits, auth_required=False)
        c = self.client
        if req.client_id:
            c.client_id = req.client_id
        if req.hostname:
            c.hostname = req.hostname
        c.user_agent = req.user_agent
        c.sample_rate = neg.sample_rate
        c.desired_tag = req.desired_tag
        c.msg_timeout_ns = neg.msg_timeout_ms * 1_000_000
        self.heartbeat_ns = (
            neg.heartbeat_interval_ms * 1_000_000 if neg.heartbeat_interval_ms > 0 else -1
        )
        self.relook()
        self._buf_size = neg.output_buffer_size
        self._buf_timeout_ns = neg.output_buffer_timeout_ms * 1_000_000
        self._heartbeat_ms = neg.heartbeat_interval_ms
        if neg.extend_support and not isinstance(c.sink, ExtendSink):
            c.sink = c.extended = ExtendSink(self, c)
            self.parser.binary_ids = True  # (its FIN, REQ and TOUCH echo youzan's binary IDs)
        if not req.feature_negotiation:
            self._reply(None, OK_FRAME)
            return
        self._reply(None, encode_response(identify_response(neg, limits)))
        if neg.tls_v1 or neg.snappy or neg.deflate:
            begin_upgrade(
                self, neg, peer_tls if peer_tls is not None and neg.tls_v1 else self.ctx.tls
            )

    def trust_cluster_peer(self) -> None:
        """The client proved, with a certificate of the cluster's CA, that it is a node of
        the cluster forwarding its clients' publishes: those clients' rights were checked
        where they connected, so no AUTH is asked here."""
        self.client.cluster_peer = True
        self.auth = None
        self._pre_auth_left = -1
        self._pre_auth_ns = 0
        self.relook()

    def sub(self, cmd: Sub) -> None:
        if not self._topic_here(cmd.topic, cmd, NotLeaderForSub, cmd.partition):
            return
        start = _start_position(cmd.start) if cmd.start else None
        if start is not None and cmd.partition >= 0:
            topic = self.broker.get_topic(cmd.topic)
            held = topic.partition(cmd.partition) if topic is not None else None
            if held is not None and not held.leading:  # (its cursor moves on its leader)
                raise NotLeaderForSub(f"SUB_ADVANCED {cmd.topic} {cmd.partition} on a follower")
        try:
            channel = self.broker.subscribe(
                self.client, cmd.topic, cmd.channel, partition=cmd.partition, ordered=cmd.ordered
            )
            if start is not None:
                start_at(channel, cmd.partition, start)
        except StorageError as exc:  # the topic or channel could not be created (health NOK)
            raise SubFailed(f"SUB failed {exc}") from exc
        except BadPosition as exc:
            raise InvalidError(str(exc)) from None
        self.client.state = SUBSCRIBED
        if cmd.ordered or cmd.advanced:  # (youzan's detail in front of each body)
            c = self.client
            if isinstance(c.sink, ExtendSink):
                c.sink.sink = DetailSink(c.sink.sink, extended=True)
            else:
                c.sink = DetailSink(c.sink, extended=False)
        self._reply(None, OK_FRAME)
        if channel.ordered and self.ctx.cluster is not None:  # (it waits for its followers)
            self.ctx.cluster.cursor_moved(cmd.topic, cmd.partition)

    def internal_create_topic(self, cmd: InternalCreateTopic) -> None:
        """youzan's INTERNAL_CREATE_TOPIC: partition ``cmd.partition`` of the topic exists
        after it (the topic created with, or grown to, that many partitions and one; its
        ``ext`` flag changes nothing here: every topic takes both forms). In a cluster,
        through the coordinator, as an implicit creation: with the cluster's defaults,
        grown when it has fewer partitions; refused with ``--disable-auto-create`` (youzan's
        nsqd refuses it in a cluster always)."""
        count = cmd.partition + 1
        gate = self.ctx.cluster
        if gate is not None and not is_ephemeral(cmd.topic):
            if count > MAX_PARTITIONS:
                raise CreateTopicFailed(f"CREATE_TOPIC {cmd.topic} failed: {count} partitions")
            self.hold()
            self.spawn(self._when_ready(gate.create_partitions(cmd.topic, count),
                                        partial(self._reply, None, OK_FRAME)))  # fmt: skip
            return
        topic = self.broker.get_topic(cmd.topic)
        try:
            if count > MAX_PARTITIONS or (count > 1 and is_ephemeral(cmd.topic)):
                raise ValueError(f"{count} partitions")
            if topic is None:
                self.broker.topic(cmd.topic, partitions=count)
            elif topic.partition_count < count:
                self.broker.expand_topic(cmd.topic, count)
        except (StorageError, ValueError) as exc:
            raise CreateTopicFailed(f"CREATE_TOPIC {cmd.topic} failed: {exc}") from None
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
        if channel.ordered:
            self._moved(partition)

    def req(self, cmd: Req) -> None:
        partition, offset = self._id_of(cmd.msg_id, ReqFailed, "REQ")
        channel = self._channel()
        now = self.broker.clock()
        channel.requeue(self.client, partition, offset, cmd.msg_id, cmd.timeout_ms, now)
        self._pump_due = channel
        if channel.ordered:
            self._moved(partition)

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

    def _topic_here(
        self, topic: str, command: object, elsewhere: type[ProtocolError], partition: int = -1
    ) -> bool:
        """True when ``topic`` may be used here now (always, outside a cluster). A topic
        the cluster lacks: False, and ``command`` runs again once it is created (the
        connection runs nothing else meanwhile; a command naming a ``partition``, youzan's
        form, creates nothing: it runs once this node's view has the topic and that partition
        as etcd has them, else TopicNotExist); one held only by other nodes: ``elsewhere``."""
        gate = self.ctx.cluster
        if gate is None or is_ephemeral(topic):
            return True
        where = gate.where(topic, partition)
        if where == HERE:
            return True
        if where == ELSEWHERE:
            raise elsewhere()
        self.hold()
        self.spawn(self._when_created(gate, topic, command, partition))
        return False

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` for this connection as a task the server holds (``ctx.tasks``)."""
        self.ctx.tasks.spawn(coro)

    async def _when_created(
        self, gate: TopicGate, topic: str, command: object, partition: int = -1
    ) -> None:
        ready = gate.prepare(topic, create=partition < 0, partition=partition)
        await self._when_ready(ready, partial(self.dispatch, command))

    async def _when_ready(self, ready: Awaitable[None], then: Callable[[], None]) -> None:
        """The connection holds (runs nothing else) until ``ready``; then ``then`` runs
        and the commands that waited. An error of ``ready`` is sent instead (the connection
        resumes unless it is fatal)."""
        try:
            await ready
        except ProtocolError as err:
            if self.transport is not None:
                self.send_error(err)
                self.ctx.touch(self)
                if not err.fatal:
                    self.resume()
            return
        if self.transport is None:
            return
        then()
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
        try:
            # (in a cluster the gate first takes up, or waits for, a partition etcd has and
            # this node's view does not yet; a topic held elsewhere only is checked by its
            # leader)
            if not self._topic_here(topic_name, command, NotLeader, partition):
                return []
            if partition >= 0 and (
                self.ctx.cluster is None or self.broker.get_topic(topic_name) is not None
            ):
                self.broker.check_partition(topic_name, partition)
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
        except NotLeader:
            gate = self.ctx.cluster
            if gate is None or self.client.user_agent == FORWARD_AGENT:
                raise  # (a forwarded publish is never forwarded again)
            if entries is None:
                self._forward(gate, topic_name, partition, bodies, deliver_at, failed)
            elif not self._forward_extended(gate, command, entries, partition, failed):
                raise  # (keys that hash to several partitions: not one leader to ask)
            return []
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

    def _forward(
        self,
        gate: TopicGate,
        topic: str,
        partition: int,
        bodies: list[bytes],
        deliver_at: int,
        failed: type[ProtocolError],
    ) -> None:
        """A publish this node does not lead goes to the leader (``nsqd.forward``); its
        reply waits, in order with the others, for the leader's answer."""
        defer_ms = max(1, (deliver_at - self.broker.clock()) // 1_000_000) if deliver_at else 0

        async def call() -> bytes:
            await gate.forward(topic, partition, bodies, defer_ms, b"")
            return b"OK"

        self._forward_with(topic, sum(len(body) for body in bodies), len(bodies), failed, call)

    def _forward_extended(
        self,
        gate: TopicGate,
        cmd: object,
        entries: Sequence[Entry],
        partition: int,
        failed: type[ProtocolError],
    ) -> bool:
        """PUB_EXT, MPUB_EXT, PUB_TRACE, MPUB_TRACE this node does not lead, to the leader
        of the one partition they go to (named, the one their common ``##partition_key``
        hashes to, or any when none has a key); the client gets the leader's reply, a traced
        one included. False when their keys go to several partitions (not forwarded)."""
        keys = {entry.partition_key for entry in entries}
        if partition < 0 and len(keys) > 1:
            return False
        assert isinstance(cmd, PubExt | MpubExt | PubTrace | MpubTrace)
        topic, key = cmd.topic, next(iter(keys)) if partition < 0 else b""

        async def call() -> bytes:
            encode = partial(encode_extended, cmd)
            return await gate.forward_command(topic, partition, len(entries), encode, key)

        held = sum(len(entry.body) + len(entry.headers) for entry in entries)
        self._forward_with(topic, held, len(entries), failed, call)
        return True

    def _forward_with(
        self,
        topic: str,
        held: int,
        count: int,
        failed: type[ProtocolError],
        call: Callable[[], Awaitable[bytes]],
    ) -> None:
        ack = Ack(-1, failed)
        self._reply(ack, OK_FRAME)
        counts = self.client.pub_counts
        counts[topic] = counts.get(topic, 0) + count
        # The bodies wait in memory for the leader: they count as replies the client has
        # not read (``nsqd.flow``), so a client pipelining publishes to a node that does
        # not lead is throttled as one that does not read its answers.
        self._held_bytes += held
        if self._reply_bytes + self._held_bytes > WRITE_HIGH_WATER and not self._throttled:
            self._throttle()

        async def forward() -> None:
            # Every outcome answers: the replies queued behind this one wait for it. What a
            # forward cancelled at stop answers, unless it ends otherwise first:
            error: ProtocolError | None = NotLeader("nsqd is exiting: publish not forwarded")
            try:
                answer = await call()
                error = None
                if answer != b"OK":  # (a traced publish's reply: the client's as it is)
                    self._replace_reply(ack, encode_response(answer))
            except ProtocolError as err:  # the leader's answer, or no leader in time
                error = err
            except Exception as exc:  # a fault of the forward itself: the client may retry
                log.error(
                    "[%s] forward of a publish to %s failed: %r",
                    self.client.remote_address, topic, exc, exc_info=exc,
                )  # fmt: skip
                error = NotLeader(f"publish to {topic} not forwarded: {exc!r}")
            finally:
                ack.resolve(error)
                self._held_bytes -= held
                if self.transport is not None:
                    self.ctx.touch(self)
                    self._maybe_unthrottle()

        self.spawn(forward())

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


def _start_position(raw: bytes) -> Position:
    """SUB_ADVANCED's position, checked before anything is subscribed: fatal E_INVALID."""
    try:
        return parse_position(raw)
    except BadPosition as exc:
        raise InvalidError(str(exc)) from None
