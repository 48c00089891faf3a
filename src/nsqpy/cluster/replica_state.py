"""One partition's replica state on one node, sans-IO: the single owner of everything the
safety of replication rests on (docs/replication.md, "Replication").

``ReplicaState`` owns the assignment (role, leader epoch, ISR, catch-up members, the
replicator), the **committed offset** (Kafka's high watermark: the smallest end every
waited-for ISR member holds; it never goes back, whatever the role, unless the log it
stood for is cut below it: ``on_epoch_end``), whether the partition takes writes (its ISR
a majority of its replicas), what the leader knows of each follower, and the follower's
side of a link (APPENDs taken into the log, the leader's committed
offset kept). Inputs are calls: the assignment (``assign``), the local log's progress
(``local_progress``), the link frames, decoded (``accept`` for a HELLO, ``leader_frame``,
``take_append``, ``on_epoch_end``), and the time, read from the injected ``clock``.
Outputs are the frames to send (``leader_output``, ``fetch_frame``, ``ack_frame``...) and
the state read off it; ``on_change`` is told whenever the committed offset, the
``answerable`` one or ``writable`` changed, so the owner publishes them to the partition
together.

It fails closed: a new state commits nothing and takes no write. A partition that becomes
leader keeps the committed offset it learned as a follower, and raises it to what every
member of its new ISR holds (everything it holds, when the ISR is itself alone: the
coordinator elects only from the ISR and lets a member join only once it holds everything
committed, so no failover can take it back). The committed offset moves whatever the
size of the ISR; ``writable`` (an ISR of more than half the replicas) says whether
publishes are taken and answered.

Nothing a peer says is taken unchecked: a HELLO from a node that holds no replica, an ACK
beyond what its link was sent (or going back, or durable past its end), a FETCH beyond
where the follower's last epoch ends in this log, frames of another epoch: each is refused
(``Refused``) and the link closed.

The link shells (``replica_leader.LeaderFeed``, ``replica_follower.FollowerFetch``) do the
I/O; the data-plane simulation drives this class directly. Imports the codec and the
storage log; never asyncio, sockets, the broker or nsqd.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from nsqpy.errors import StorageError
from nsqpy.protocol.replication import (
    E_NOT_LEADER,
    E_NOT_REPLICA,
    E_OFFSET_MISMATCH,
    E_STALE_EPOCH,
    Ack,
    Append,
    Buffer,
    ChannelCursor,
    Cursors,
    CursorsAck,
    EpochEnd,
    EpochQuery,
    Fetch,
    Heartbeat,
    Hello,
    MalformedFrame,
    cursors_with_seq,
    encode_ack,
    encode_append,
    encode_cursors,
    encode_cursors_ack,
    encode_epoch_end,
    encode_epoch_query,
    encode_fetch,
)
from nsqpy.storage.log import PartitionLog

LEADER, FOLLOWER, NO_ROLE = "leader", "follower", "none"
WINDOW = 4 << 20  # un-acked bytes in flight per follower
CHUNK = 1 << 20  # read_raw bytes per APPEND
UNACKED_CURSORS = 64  # CURSORS a link keeps waiting for their CURSORS_ACK (the newest)
MAX_REPORTS = 64  # reports kept apart for ``seen`` (the oldest are merged beyond it)

Clock = Callable[[], float]  # seconds, monotonic (the event loop's time in nsqd)


class Refused(Exception):
    """A peer's frame is refused: send ERROR ``frame`` (epoch, code, text), close the link."""

    def __init__(self, epoch: int, code: str, text: str) -> None:
        super().__init__(f"{code}: {text}")
        self.frame = (epoch, code, text)


@dataclass(eq=False, slots=True)
class FollowerLink:
    """One accepted follower link (one HELLO): what was sent on it and what came back."""

    node_id: str
    epoch: int
    max_bytes: int = CHUNK
    pos: int | None = None  # the next offset to send; None until FETCH
    inflight: deque[tuple[int, int]] = field(default_factory=deque)  # (next offset, bytes)
    inflight_bytes: int = 0
    sent_committed: int = -1
    commit_owed_since: float | None = None  # clock time the committed offset moved unsent
    sent_end: int = 0  # every offset below it was sent (or skipped): no ACK may pass it
    acked: int = 0  # the end last ACKed on this link (never goes back)
    open: bool = True
    # the channels' cursors (CURSORS) sent on this link and what came back (CURSORS_ACK)
    cursors_at: float = float("-inf")  # clock time of the last look at the cursors
    cursors_sent: tuple[ChannelCursor, ...] | None = None
    cursors_sent_at: float = float("-inf")  # clock time of the last CURSORS sent
    cursors_seq: int = 0  # the seq of the last CURSORS sent on this link
    cursors_unacked: dict[int, SentCursors] = field(default_factory=dict)
    cursors_taken: dict[str, int] | None = None  # channel -> confirmed, as last acked
    # The last full set the follower took for sure (it acknowledged that very CURSORS, so
    # it was the last of its read: a follower takes only the last of a read), by name; None
    # while a full set sent since is not acknowledged so. The channels the follower may
    # hold otherwise than in it (a CURSORS since named them, or held them otherwise, or
    # without them): each later CURSORS names them all again (``cursors_output``). When
    # the last full set went.
    cursors_base: dict[str, ChannelCursor] | None = None
    cursors_touched: set[str] = field(default_factory=set)
    cursors_full_at: float = float("-inf")


class SentCursors(NamedTuple):
    """A CURSORS sent on a link and not yet acknowledged: every channel's cursor as the
    leader had them (what the follower holds of those it named), and whether it named
    them all (a full set)."""

    state: tuple[ChannelCursor, ...]
    full: bool


@dataclass(slots=True)
class Peer:
    """What the leader knows of one follower in this leader epoch (clock seconds)."""

    node_id: str
    end: int = 0
    durable: int = 0
    last_heard: float = 0.0
    unacked_since: float | None = None  # when the oldest un-acked APPEND went out
    link: FollowerLink | None = None

    @property
    def connected(self) -> bool:
        return self.link is not None


class ReplicaState:
    """One partition's replica state on this node; see the module docstring."""

    def __init__(
        self,
        node_id: str,
        topic: str,
        partition: int,
        log: PartitionLog,
        *,
        clock: Clock,
        window: int = WINDOW,
        chunk: int = CHUNK,
        timeout: float = 5.0,
        on_change: Callable[[ReplicaState], None] | None = None,
        incarnation_of: Callable[[str], str | None] | None = None,
    ) -> None:
        self.node_id, self.topic, self.partition = node_id, topic, partition
        # A node's incarnation as etcd has it now (None: not registered); a HELLO must say
        # the same (``accept``). Without it (the simulation) no HELLO is checked so.
        self.incarnation_of = incarnation_of
        self.log = log
        self.clock = clock
        self.window, self.chunk, self.timeout = window, chunk, timeout
        self.on_change = on_change
        self.role = NO_ROLE
        self.epoch = 0  # the leader epoch led or followed
        self.isr: tuple[str, ...] = ()
        self.catchup: tuple[str, ...] = ()
        self.replicator = 1
        self.committed = 0
        self.answerable = 0  # publishes below it are answered (``_advance``)
        self.writable = False
        self.peers: dict[str, Peer] = {}
        self.since = clock()  # when this leadership (or role) began
        # Catch-up members reported caught up, waited for as ISR members (``caught_up``):
        # those of the reports being built (not yet in etcd), and of each report in etcd
        # (revision, members) that a join guarded by it may still follow unseen (``seen``).
        self.joining_next: set[str] = set()
        self.reports: list[tuple[int, frozenset[str]]] = []
        # The last CURSORS encoded (epoch, full, channels, frame with seq 0): ``cursors_output``
        self._cursors_encoded: tuple[int, bool, tuple[ChannelCursor, ...], bytes] | None = None

    @property
    def where(self) -> str:
        return f"{self.topic}/{self.partition}"

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def holders(self) -> tuple[str, ...]:
        return self.isr + tuple(n for n in self.catchup if n not in self.isr)

    @property
    def readable_offset(self) -> int:
        """What may be shown of the log here: flushed (durable under ``always``) and below
        the committed offset."""
        return min(self.log.readable_offset, self.committed)

    # -- the assignment ------------------------------------------------------------------

    def assign(
        self,
        role: str,
        epoch: int,
        isr: Iterable[str] = (),
        catchup: Iterable[str] = (),
        replicator: int = 1,
    ) -> None:
        """What etcd says now. A new role or leader epoch forgets every follower (their
        links are in the old epoch: closed at their next frame) and gives them ``timeout``
        from now before ``lagging`` names them. Writable only while leading with an ISR
        that is more than half the replicas; the committed offset is kept."""
        if role not in (LEADER, FOLLOWER, NO_ROLE):
            raise ValueError(f"role {role!r}")
        if (role, epoch) != (self.role, self.epoch):
            for peer in self.peers.values():
                if peer.link is not None:
                    peer.link.open = False
            self.peers = {}
            self.joining_next, self.reports = set(), []
            self.since = self.clock()
        self.role, self.epoch = role, epoch
        self.isr, self.catchup = tuple(isr), tuple(catchup)
        self.replicator = replicator
        self.log.keep_tail = role == LEADER and replicator > 1  # (its followers read it)
        for node in [n for n in self.peers if n not in self.holders]:
            self._forget(node)
        writable = role == LEADER and len(self.isr) * 2 > replicator
        changed = writable != self.writable
        self.writable = writable
        if self._advance() or changed:
            self._changed()

    def reported(self, revision: int) -> None:
        """The report built last (``caught_up``) is in etcd at ``revision``. The
        coordinator's join of a member it names is guarded by that revision: it can happen
        only until the next report is in etcd. (With no member named in it or in any
        report kept, there is nothing to keep: the partitions of a node mostly.)"""
        if not self.joining_next and not any(members for _, members in self.reports):
            self.reports.clear()
            return
        self.reports.append((revision, frozenset(self.joining_next)))
        self.joining_next = set()
        if len(self.reports) > MAX_REPORTS:  # (no assignment seen for long: apply failing)
            (_, older), (rev, newer) = self.reports[:2]
            self.reports[:2] = [(rev, older | newer)]  # (waited for as long, or longer)

    def seen(self, revision: int) -> None:
        """The assignment applied last (``assign``) is etcd's as of ``revision``: a join
        guarded by a report older than the newest one at or below it happened before that
        one was written, so it is in the assignment already; the members of such reports
        are no longer waited for unless the ISR names them."""
        if not self.reports:
            return
        newest = max((i for i, (rev, _) in enumerate(self.reports) if rev <= revision), default=0)
        del self.reports[:newest]

    @property
    def joining(self) -> set[str]:
        """The members reported caught up that the committed offset waits for (see
        ``reports``), whether or not the assignment applied last still names them: one
        dropped from the partition and added back before the next report could be joined
        on the old report (its guard still holds), so until then it is waited for (a member
        no longer held here, with no link, holds nothing: commits wait for that report)."""
        out = set(self.joining_next)
        for _rev, members in self.reports:
            out |= members
        return out

    def _forget(self, node: str) -> None:
        peer = self.peers.pop(node, None)
        if peer is not None and peer.link is not None:
            peer.link.open = False

    # -- the committed offset ------------------------------------------------------------

    def waited(self) -> tuple[str, ...]:
        """Whom the committed offset waits for: the ISR and the members reported caught up
        (``joining``), this node aside."""
        nodes = self.isr + tuple(sorted(self.joining - set(self.isr)))
        return tuple(n for n in nodes if n != self.node_id)

    def _own_end(self) -> int:
        log = self.log
        return log.durable_offset if log.policy.always else log.flushed_offset

    def holds(self, nodes: Iterable[str]) -> int:
        """The end every one of ``nodes`` holds by what this leader knows (its own end for
        itself; durable ends under ``always``; 0 for a follower never heard)."""
        always = self.log.policy.always
        low = self._own_end()
        for node in nodes:
            if node != self.node_id:
                peer = self.peers.get(node)
                low = min(low, 0 if peer is None else peer.durable if always else peer.end)
        return low

    def _advance(self) -> bool:
        """Raise the committed offset to what every waited-for member holds (Kafka's high
        watermark), whatever the size of the ISR: a minority ISR shows consumers what it
        holds. Publishes are answered only up to ``answerable``, the committed offset as
        it was last while writable: what only a minority of the replicas holds waits for
        a member to join (which holds everything committed). True when either moved."""
        if self.role != LEADER:
            return False
        moved = False
        new = self.holds(self.waited())
        if new > self.committed:
            self.committed, moved = new, True
        if self.writable and self.committed > self.answerable:
            self.answerable, moved = self.committed, True
        return moved

    def local_progress(self) -> bool:
        """The local log was flushed or synced: as leader, commit what that allows. True
        when the committed (or answerable) offset moved (``on_change`` was told)."""
        if self._advance():
            self._changed()
            return True
        return False

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

    # -- the leader's end of a link ------------------------------------------------------

    def accept(self, hello: Hello) -> tuple[FollowerLink, FollowerLink | None]:
        """A follower's HELLO: its link, and the link it replaces (to close). Refused when
        this node does not lead in that epoch, the node holds no replica here, or (with
        ``incarnation_of``) the HELLO is not from the node's incarnation registered in etcd:
        a link takes over a live one only for the same node as etcd knows it, so a
        stranger who knows a follower's id (``/cluster/stats`` lists them) cannot."""
        where = self.where
        if self.role != LEADER:
            raise Refused(0, E_NOT_LEADER, f"{where} is not led here")
        if hello.leader_epoch < self.epoch:
            text = f"{where}: epoch {hello.leader_epoch} is stale, the leader is in {self.epoch}"
            raise Refused(self.epoch, E_STALE_EPOCH, text)
        if hello.leader_epoch > self.epoch:
            text = f"{where}: epoch {hello.leader_epoch} is newer than ours ({self.epoch})"
            raise Refused(self.epoch, E_NOT_LEADER, text)
        node = hello.node_id
        if node == self.node_id or node not in self.holders:
            raise Refused(self.epoch, E_NOT_REPLICA, f"{where}: {node!r} holds no replica")
        if self.incarnation_of is not None:
            known = self.incarnation_of(node)
            if known is None:
                raise Refused(self.epoch, E_NOT_REPLICA, f"{where}: {node!r} is not registered")
            if known and hello.incarnation != known:  # ("": a node of an older version)
                text = f"{where}: a HELLO as {node!r} not from its incarnation in etcd"
                raise Refused(self.epoch, E_NOT_REPLICA, text)
        peer = self.peers.setdefault(node, Peer(node))
        old = peer.link
        if old is not None:
            old.open = False
        # A new link (the follower may have restarted, and lost what it had not synced):
        # its end is known again from its FETCH; only its durable end is kept meanwhile.
        peer.end = peer.durable
        # ``unacked_since`` survives the reconnect: a follower that drops its link and dials
        # again without ever acknowledging what it was sent (its disk is full, say) must
        # still become ``lagging``, not look fresh at every dial.
        peer.link = FollowerLink(node, self.epoch, self.chunk)
        peer.last_heard = self.clock()
        return peer.link, old

    def closed(self, link: FollowerLink) -> None:
        """A link ended."""
        link.open = False
        peer = self.peers.get(link.node_id)
        if peer is not None and peer.link is link:
            peer.link = None

    def _peer(self, link: FollowerLink, epoch: int | None = None) -> Peer:
        """The peer of a link still current, its frame's epoch checked."""
        peer = self.peers.get(link.node_id)
        if not link.open or peer is None or peer.link is not link:
            raise Refused(link.epoch, E_NOT_LEADER, f"{self.where}: this link is no longer used")
        if epoch is not None and epoch != link.epoch:
            if epoch < link.epoch:
                raise Refused(link.epoch, E_STALE_EPOCH, f"epoch {epoch} is below {link.epoch}")
            raise MalformedFrame(f"epoch {epoch} on a link in {link.epoch}")
        return peer

    def leader_frame(
        self, link: FollowerLink, frame: Ack | Fetch | EpochQuery | Heartbeat | CursorsAck
    ) -> list[Buffer]:
        """A follower's frame; returns what to answer at once. A CURSORS_ACK records what
        the link has taken of the channels' cursors (only a seq this link was sent)."""
        now = self.clock()
        match frame:
            case Ack(epoch, end, durable):
                peer = self._peer(link, epoch)
                peer.last_heard = now
                self._take_ack(link, peer, end, durable, now)
            case Fetch(epoch, start, max_bytes, last_epoch):
                peer = self._peer(link, epoch)
                peer.last_heard = now
                self._take_fetch(link, peer, start, max_bytes, last_epoch)
            case EpochQuery(epoch):
                self._peer(link).last_heard = now
                return [encode_epoch_end(*self.log.end_offset_for_epoch(epoch))]
            case Heartbeat():
                self._peer(link).last_heard = now
            case CursorsAck(epoch, seq):
                self._peer(link, epoch).last_heard = now
                taken = link.cursors_unacked.pop(seq, None)
                if taken is not None:  # (a seq never sent takes, and forgets, nothing)
                    for older in [s for s in link.cursors_unacked if s < seq]:
                        del link.cursors_unacked[older]
                    link.cursors_taken = {c.name: c.confirmed for c in taken.state}
                    if taken.full:  # (the follower took it: what it holds since is it or
                        # a later CURSORS' value, so a channel whose value one of those left
                        # unacknowledged has otherwise, or lacks, may differ from it)
                        base = link.cursors_base = {c.name: c for c in taken.state}
                        touched: set[str] = set()
                        for later in link.cursors_unacked.values():
                            held = {c.name: c for c in later.state}
                            touched.update(n for n in held.keys() | base.keys()
                                           if held.get(n) != base.get(n))  # fmt: skip
                        link.cursors_touched = touched
            case _:
                raise MalformedFrame(f"unexpected {type(frame).__name__} from a follower")
        return []

    def _take_ack(self, link: FollowerLink, peer: Peer, end: int, durable: int, now: float) -> None:
        if link.pos is None:
            raise Refused(link.epoch, E_OFFSET_MISMATCH, "ACK before FETCH")
        if end > link.sent_end or end < link.acked or durable > end:
            text = (
                f"ACK of end {end} durable {durable}: this link sent below {link.sent_end}"
                f" and was acknowledged {link.acked}"
            )
            raise Refused(link.epoch, E_OFFSET_MISMATCH, text)
        advanced = end > peer.end
        link.acked = end
        peer.end, peer.durable = end, durable
        while link.inflight and link.inflight[0][0] <= end:
            link.inflight_bytes -= link.inflight.popleft()[1]
        if not link.inflight:
            peer.unacked_since = None
        elif advanced:  # (an ACK of nothing new, as after each redial, is no progress)
            peer.unacked_since = now
        if self._advance():
            self._changed()

    def _take_fetch(
        self, link: FollowerLink, peer: Peer, start: int, max_bytes: int, last_epoch: int
    ) -> None:
        log = self.log
        if start > log.high_watermark:  # it would get nothing
            text = f"FETCH from {start}, beyond this leader's end {log.high_watermark}"
            raise Refused(link.epoch, E_NOT_REPLICA, text + ": catch up by epoch first")
        if start > 0:  # its log must agree with ours up to ``start``: its last epoch
            found, ends = log.end_offset_for_epoch(last_epoch)  # ends there or later here
            if found < 0 or start > ends:
                text = (
                    f"FETCH from {start} with last epoch {last_epoch}, which ends at {ends}"
                    " here: catch up by epoch first"
                )
                raise Refused(link.epoch, E_OFFSET_MISMATCH, text)
        link.pos, link.max_bytes = start, max(1, min(max_bytes, self.chunk))
        link.inflight.clear()
        link.inflight_bytes = 0
        link.sent_end = link.acked = start
        peer.end, peer.durable = start, min(peer.durable, start)

    def leader_output(self, link: FollowerLink, linger: float = 0.0) -> list[Buffer]:
        """What to send on ``link`` now: APPENDs while its window allows (each carries the
        committed offset), an empty one when only the committed offset moved and waited
        ``linger`` seconds for records to carry it (``commit_due_in``: a follower is told
        each commit without a frame of its own while publishes keep coming). Refused when
        this node no longer leads in the link's epoch (the shell sends the ERROR and ends
        the link)."""
        if not link.open or self.role != LEADER or self.epoch != link.epoch:
            text = f"{self.where} is no longer led here in {link.epoch}"
            raise Refused(link.epoch, E_NOT_LEADER, text)
        if link.pos is None:
            return []
        log, out = self.log, []
        pos = max(link.pos, log.low_watermark)
        committed = self.committed
        try:
            while link.inflight_bytes < self.window and pos < log.flushed_offset:
                raw = log.read_raw(pos, link.max_bytes)
                if not raw.count:  # no record up to the end: a gap (a reboot's jump)
                    pos = log.flushed_offset  # (an empty APPEND there: the follower jumps)
                    out += encode_append(link.epoch, pos, committed, 0, b"")
                    break
                out += encode_append(link.epoch, raw.offset, committed, raw.count, raw.data)
                if not link.inflight:
                    peer = self.peers[link.node_id]
                    peer.unacked_since = peer.unacked_since or self.clock()
                link.inflight.append((raw.next_offset, len(raw.data)))
                link.inflight_bytes += len(raw.data)
                pos = raw.next_offset
        except StorageError as err:
            raise Refused(link.epoch, E_NOT_REPLICA, f"reading the log failed: {err}") from err
        link.pos = pos
        link.sent_end = max(link.sent_end, pos)
        if out and log.keep_tail:  # (the last flush goes once every follower has read it)
            links = [p.link for p in self.peers.values() if p.link is not None and p.link.open]
            log.release_tail(min([pos, *(lk.pos for lk in links if lk.pos is not None)]))
        if not out and committed != link.sent_committed:
            if link.commit_owed_since is None:
                link.commit_owed_since = self.clock()
            if self.commit_due_in(link, linger) == 0.0:
                out += encode_append(link.epoch, pos, committed, 0, b"")
        if out:
            link.sent_committed, link.commit_owed_since = committed, None
        return out

    def commit_due_in(self, link: FollowerLink, linger: float) -> float | None:
        """Seconds until ``leader_output(link, linger)`` sends the committed offset on its
        own (0: now); None when the link was sent the committed offset as it is."""
        if link.commit_owed_since is None:
            return None
        return max(0.0, link.commit_owed_since + linger - self.clock())

    def cursors_output(
        self,
        link: FollowerLink,
        cursors: Callable[[], Sequence[ChannelCursor]],
        interval: float,
    ) -> bytes | None:
        """The CURSORS to send on ``link`` now, if any: every ``interval`` (or at once after
        ``cursors_due``), when the channels' cursors (``cursors()``) changed since the last
        sent, or when that one waited ``interval`` unacknowledged (a follower that could not
        store it acknowledges nothing: it must come again); only once the link FETCHed, and after the records they cover (the shell sends
        it after ``leader_output``), with the committed offset first when it lingered unsent
        (a follower is never told a cursor beyond the commit it knows).

        A full set (every channel; the follower deletes the ones it does not name) goes
        first on a link, once every ``interval`` after, and when a channel went; otherwise
        only the channels that differ from the last full set the follower acknowledged, or
        that a CURSORS since named (``_cursors_named``): an ordered channel's FIN costs
        its own cursor, not every channel's, and a follower that takes only the last
        CURSORS of a read still ends up with them all."""
        if link.pos is None or not link.open or self.role != LEADER:
            return None
        now = self.clock()
        if now - link.cursors_at < interval:
            return None
        link.cursors_at = now
        current = tuple(cursors())
        if current == link.cursors_sent and (
            link.cursors_seq not in link.cursors_unacked or now - link.cursors_sent_at < interval
        ):  # (unchanged, and taken or not waited for long: a follower that could not store
            return None  # the last one acknowledges none: they go again after ``interval``)
        seq = link.cursors_seq = link.cursors_seq + 1
        named = (
            None if now - link.cursors_full_at >= interval else self._cursors_named(link, current)
        )
        if named is None:  # (until one is acknowledged, the follower may hold either set)
            link.cursors_full_at, link.cursors_base = now, None
            link.cursors_touched = set()
        else:
            link.cursors_touched.update(c.name for c in named)
        channels = current if named is None else named
        made = self._cursors_encoded  # (every follower is sent the same: encoded once)
        if made is None or made[:3] != (link.epoch, named is None, channels):
            body = encode_cursors(
                link.epoch, self.topic, self.partition, channels, named is None, 0
            )
            made = self._cursors_encoded = (link.epoch, named is None, channels, body)
        frame = cursors_with_seq(made[3], seq)
        if link.sent_committed != self.committed:
            owed = encode_append(link.epoch, link.pos, self.committed, 0, b"")
            frame = b"".join([*owed, frame])
            link.sent_committed, link.commit_owed_since = self.committed, None
        link.cursors_sent, link.cursors_sent_at = current, now
        unacked = link.cursors_unacked
        unacked[seq] = SentCursors(current, named is None)
        if len(unacked) > UNACKED_CURSORS:
            del unacked[min(unacked)]
        return frame

    @staticmethod
    def _cursors_named(
        link: FollowerLink, current: tuple[ChannelCursor, ...]
    ) -> tuple[ChannelCursor, ...] | None:
        """The channels of ``current`` a partial CURSORS names on ``link``: each that differs
        from the last full set the follower acknowledged, and each some CURSORS since named
        (it may hold that one's value, not the full set's). None when only a full set will
        do: none acknowledged yet, or a channel the follower may hold went (only a full set
        deletes)."""
        base, touched = link.cursors_base, link.cursors_touched
        if base is None:
            return None
        names = {c.name for c in current}
        if not (names >= base.keys() and names >= touched):
            return None
        return tuple(c for c in current if c.name in touched or base.get(c.name) != c)

    @staticmethod
    def cursors_due(link: FollowerLink) -> None:
        """The next ``cursors_output`` on ``link`` looks at the cursors whatever the
        interval (an ordered channel moved)."""
        link.cursors_at = float("-inf")

    def replicated_confirmed(self, channel: str, followers: Iterable[str]) -> int:
        """The confirmed offset of ``channel`` that every one of ``followers`` has taken
        (CURSORS_ACK) on its current link; -1 when one has taken none of it (or is not
        connected)."""
        low: int | None = None
        for node in followers:
            peer = self.peers.get(node)
            link = peer.link if peer is not None else None
            taken = link.cursors_taken if link is not None else None
            confirmed = taken.get(channel, -1) if taken is not None else -1
            low = confirmed if low is None else min(low, confirmed)
        return -1 if low is None else low

    def lagging(self, nodes: Iterable[str]) -> list[str]:
        """Of ``nodes``, the followers silent, unconnected or with an APPEND un-acked for
        longer than ``timeout`` (the coordinator moves such ISR members to catch-up)."""
        now = self.clock()
        late = []
        for node in nodes:
            if node == self.node_id:
                continue
            peer = self.peers.get(node)
            if peer is None:
                stale = now - self.since > self.timeout
            elif peer.unacked_since is not None and now - peer.unacked_since > self.timeout:
                stale = True
            else:
                stale = now - peer.last_heard > self.timeout
            if stale:
                late.append(node)
        return late

    def caught_up(self) -> tuple[str, ...]:
        """For the report being built: the catch-up members that hold everything committed
        (durably under ``always``) and do not lag, and those waited for already that do
        not lag. From now on the committed offset waits for them too, until a report
        without them is in etcd and an assignment as of its revision or later was applied
        (``reported``, ``seen``): the coordinator may make one an ISR member meanwhile."""
        if self.role != LEADER or not self.catchup:
            return ()
        late = set(self.lagging(self.holders))
        joining = (self.joining & set(self.catchup)) - late
        always = self.log.policy.always
        committed = self.readable_offset
        for node, peer in self.peers.items():
            has = peer.durable if always else peer.end
            if node in self.catchup and node not in late and peer.connected and has >= committed:
                joining.add(node)
        self.joining_next |= joining
        return tuple(sorted(joining))

    # -- the follower's end of a link ----------------------------------------------------

    def epoch_query(self) -> tuple[int, bytes]:
        """Catching up: the epoch asked about (this log's last) and the EPOCH_QUERY."""
        asked = self.log.last_epoch
        return asked, encode_epoch_query(asked)

    def on_epoch_end(self, asked: int, frame: EpochEnd) -> bool:
        """The leader's EPOCH_END: the divergent tail cut; True when the logs agree.

        A cut below the committed offset this follower was told means the leader does not
        hold what was committed there (it lost its log: a power loss before its fsync, a
        new disk); the log may even begin again at 0 (``PartitionLog.match_leader``). The
        committed offset then comes down to the cut: it was the old log's, and a follower
        promoted later must not show what it appends there before its ISR holds it."""
        held = min(self.log.high_watermark, self.committed)
        agreed = self.log.match_leader(asked, (frame.epoch, frame.end_offset))
        end = self.log.high_watermark
        if end < held:
            self.committed, self.answerable = end, min(self.answerable, end)
            self._changed()
        return agreed

    def fetch_frame(self, epoch: int, max_bytes: int) -> bytes:
        log = self.log
        return encode_fetch(epoch, log.high_watermark, max_bytes, log.last_epoch)

    def take_append(self, frame: Append, epoch: int) -> None:
        """An APPEND of the leader followed in ``epoch``, into the log (pending: the shell
        flushes a whole read's worth at once); the leader's committed offset kept."""
        if frame.leader_epoch != epoch:
            raise MalformedFrame(f"APPEND in epoch {frame.leader_epoch} on a link in {epoch}")
        if self.role == LEADER:
            raise MalformedFrame(f"APPEND for {self.where}, which is led here")
        log = self.log
        end = log.high_watermark
        if frame.start_offset > end:  # the leader's log skips offsets here (an empty
            log.advance_to(frame.start_offset)  # APPEND: up to its end, a reboot's jump)
        elif frame.start_offset < end and frame.count:
            raise MalformedFrame(f"APPEND from {frame.start_offset}, the log ends at {end}")
        if frame.count:
            log.append_raw(frame.data, frame.start_offset)
        if frame.committed_offset > self.committed:
            self.committed = frame.committed_offset
            self._changed()

    def cursors_ack(self, frame: Cursors, epoch: int) -> bytes:
        """The leader's CURSORS on a link in ``epoch`` (the owner takes the cursors, after
        the records they cover): the CURSORS_ACK to send. MalformedFrame for another
        epoch or another partition."""
        if frame.leader_epoch != epoch:
            raise MalformedFrame(f"CURSORS in epoch {frame.leader_epoch} on a link in {epoch}")
        if (frame.topic, frame.partition) != (self.topic, self.partition):
            raise MalformedFrame(f"CURSORS for {frame.topic}/{frame.partition} on {self.where}")
        return encode_cursors_ack(epoch, frame.seq)

    def ack_frame(
        self, epoch: int, durable_only: bool = False, unless: tuple[int, int] | None = None
    ) -> tuple[tuple[int, int], bytes]:
        """(end, durable) as they are now, and the ACK saying so (empty when they are
        ``unless``: nothing to acknowledge); with ``durable_only`` the end acknowledged is
        the durable one (under the ``always`` policy, what was appended while an fsync ran
        waits for its own: a follower whose disk stalls is then seen lagging, ``lagging``,
        not caught up with nothing committed)."""
        log = self.log
        durable = log.durable_offset
        now = (durable if durable_only else log.flushed_offset, durable)
        return now, b"" if now == unless else encode_ack(epoch, *now)


__all__ = [
    "CHUNK",
    "FOLLOWER",
    "LEADER",
    "MAX_REPORTS",
    "NO_ROLE",
    "UNACKED_CURSORS",
    "WINDOW",
    "FollowerLink",
    "Peer",
    "Refused",
    "ReplicaState",
]
