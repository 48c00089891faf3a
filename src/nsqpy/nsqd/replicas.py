"""nsqd's replication in a cluster: one ``ReplicaState`` per partition held, the leader's
feed and the followers' fetches, wired to the broker's partitions.

``Replication`` keeps a ``nsqpy.cluster.replica_state.ReplicaState`` for every durable
partition held here: the single owner of its committed offset and of whether it takes
writes. The state tells ``_publish`` of every change, and only there are the partition's
``commit_bound`` and ``writable`` written, together: consumers see and producers are
answered only up to the committed offset (the smallest end every ISR member holds; the
flushed end for a partition that is its own whole ISR), publishers only while the ISR is a
majority of the replicas (``ack_bound``). A partition held in a cluster is created closed
(bounds 0, not writable: ``Partition``), so nothing is read or acknowledged before its
state has said so; a follower keeps the committed offset its leader sent, and when it
becomes leader its consumers read on to what every member of its new ISR holds.

It listens on ``--rpc-address`` (``LeaderFeed``) and keeps one ``FollowerFetch`` per
partition this node follows, pointed at the leader etcd names (re-pointed when the leader
or its epoch changes, stopped before this node leads), and sends the channels' cursors to
followers; a follower that becomes leader starts its channels from the cursors the old
leader sent (``_adopt_cursors``). Imports asyncio, the cluster links and the broker; never
the TCP or HTTP handlers.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence

from nsqpy.broker.broker import Broker
from nsqpy.broker.channel import Channel
from nsqpy.broker.partition import Partition
from nsqpy.broker.topic import Topic
from nsqpy.cluster.model import Replicas, Snapshot, partition_name
from nsqpy.cluster.replica_follower import FollowerFetch
from nsqpy.cluster.replica_leader import LeaderFeed
from nsqpy.cluster.replica_mux import MuxPool
from nsqpy.cluster.replica_state import FOLLOWER, LEADER, ReplicaState
from nsqpy.cluster.tls import ClusterTls
from nsqpy.errors import StorageError
from nsqpy.protocol.replication import CHANNEL_PAUSED, ChannelCursor, Cursors
from nsqpy.storage import PartitionLog

log = logging.getLogger("nsqpy.nsqd")

ReplicasOf = Callable[[str, int], "Replicas | None"]


class Replication:
    """The replication side of one clustered nsqd (see the module docstring)."""

    def __init__(
        self,
        broker: Broker,
        node_id: str,
        cluster_id: str,
        replicas: ReplicasOf,
        on_committed: Callable[[Partition], None],
        *,
        on_cursors: Callable[[Partition], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = 5.0,
        tls: ClusterTls | None = None,
        incarnation: str = "",
    ) -> None:
        self.tls = tls
        # this start of the node (its HELLOs say it), and every live node's as etcd has it
        self.incarnation = incarnation
        self.incarnations: dict[str, str] = {}
        self.broker = broker
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.replicas = replicas
        self.on_committed = on_committed
        # (a follower took a led partition's cursors; without it, as a commit)
        self.on_cursors = on_cursors if on_cursors is not None else on_committed
        self.clock = clock
        self.timeout = timeout
        self.feed = LeaderFeed(
            node_id,
            cluster_id,
            self.state_of,
            cursors=self._cursors_of,
            on_cursors_acked=self._cursors_acked,
            timeout=timeout,
            clock=clock,
            tls=tls,
        )
        self.fetches: dict[tuple[str, int], FollowerFetch] = {}
        # every partition followed from one leader: streams on one connection to it
        self.pool = MuxPool(tls, timeout=timeout)
        # per partition, what its last assignment was made of (``apply``)
        self._applied: dict[tuple[str, int], tuple[object, ...]] = {}
        # one state per durable partition held, and the partition it belongs to
        self.states: dict[tuple[str, int], ReplicaState] = {}
        self._held: dict[tuple[str, int], Partition] = {}
        self.address: tuple[str, int] | None = None
        broker.on_stepped_down.append(self._stepped_down)
        # Channels made here (a client's SUB, /channel/create) on a topic this node leads no
        # partition of, that no leader's CURSORS has named yet: a full CURSORS the leader
        # built before it had them too does not delete them (``_adopt_cursors``).
        self._made_here: set[tuple[str, str]] = set()
        self._adopting = False
        broker.on_channel_created.append(self._channel_created)

    async def start(self, host: str, port: int) -> None:
        self.address = await self.feed.start(host or "0.0.0.0", port)
        log.info("RPC: listening on %s:%d", *self.address)

    async def stop(self) -> None:
        for fetch in list(self.fetches.values()):
            await fetch.stop()
        self.fetches.clear()
        await self.pool.close()
        await self.feed.close()

    # -- the states ----------------------------------------------------------------------

    def _part(self, topic: str, partition: int) -> Partition | None:
        found = self.broker.get_topic(topic)
        return found.partition(partition) if found is not None else None

    def state_of(self, topic: str, partition: int) -> ReplicaState | None:
        """The state of a durable partition held here (made on first use)."""
        part = self._part(topic, partition)
        return self.state(part) if part is not None else None

    def state(self, part: Partition) -> ReplicaState | None:
        if part.ephemeral or not isinstance(part.log, PartitionLog):
            return None
        key = (part.name, part.number)
        state = self.states.get(key)
        if state is None or self._held.get(key) is not part:  # (held anew: a new log)
            state = ReplicaState(
                self.node_id,
                part.name,
                part.number,
                part.log,
                clock=self.clock,
                timeout=self.timeout,
                on_change=self._publish,
                incarnation_of=self.incarnations.get,
            )
            self.states[key], self._held[key] = state, part
            self._publish(state)
        return state

    def _publish(self, state: ReplicaState) -> None:
        """The one place a partition's ``commit_bound``, ``ack_bound`` and ``writable`` are
        written: as its state says, all at once; a led partition's publishes and channels
        are told when its bounds rose."""
        key = (state.topic, state.partition)
        part = self._held.get(key)
        if part is None:
            return
        before = part.commit_bound
        part.commit_bound, part.ack_bound = state.committed, state.answerable
        if state.writable != part.writable:
            part.writable = state.writable
            if state.role == LEADER:
                log.log(
                    logging.INFO if state.writable else logging.WARNING,
                    "REPLICATION(%s/%d): %s (ISR %d of %d replicas)",
                    *key,
                    "writable again" if state.writable else "not writable",
                    len(state.isr),
                    state.replicator,
                )
        # (``answerable`` moves only while writable)
        if part.leading and (before is None or state.committed > before or state.writable):
            self.on_committed(part)

    def _stepped_down(self, topic: object, part: Partition) -> None:
        """A partition led here is followed now (a lost lease demotes every partition before
        etcd says who leads): its state follows at once, so its links end and nothing more
        is committed here."""
        del topic
        state = self.states.get((part.name, part.number))
        if state is not None and state.role == LEADER and self._held.get(state.key) is part:
            state.assign(FOLLOWER, part.leader_epoch, state.isr, state.catchup, state.replicator)

    def reported(self, revision: int) -> None:
        """The NodeInfo built last is in etcd at ``revision`` (``ReplicaState.reported``)."""
        for state in self.states.values():
            state.reported(revision)

    def _cursors_of(self, topic: str, partition: int) -> list[ChannelCursor]:
        """The cursor of every durable channel over a led partition (sent to followers)."""
        found = self.broker.get_topic(topic)
        if found is None:
            return []
        out = []
        for name, channel in sorted(found.channels.items()):
            part = channel.part(partition)
            if part is None or channel.ephemeral:
                continue
            cursor = part.cursor
            flags = CHANNEL_PAUSED if channel.paused else 0
            entries, rest = part.deferred.sent(MAX_DEFERRED)  # (its delayed store goes along)
            confirmed, ranges = without(cursor.confirmed, cursor.ranges, rest)
            out.append(ChannelCursor(name, confirmed, flags, ranges, entries))
        return out

    def _channel_created(self, topic: Topic, channel: Channel) -> None:
        if not self._adopting and not any(p.leading for p in topic.partitions):
            self._made_here.add((topic.name, channel.name))

    def _adopt_cursors(self, frame: Cursors) -> bool:
        """A follower takes its leader's channel cursors (``ChannelPartition.adopt_cursor``),
        never past its own log's end; channels the leader has are created here, and (a full
        set, on a topic this node leads no partition of) those it lacks are deleted, but for
        one made here that no CURSORS named yet (the leader may not have had it when it built
        this one), so the node that takes over delivers where the old leader was (at most a
        second back). False when the cursors could not all be stored: not acknowledged, so
        the leader sends them again (and counts none of them taken meanwhile)."""
        topic = self.broker.get_topic(frame.topic)
        part = topic.partition(frame.partition) if topic is not None else None
        if topic is None or part is None or part.leading:
            return True
        end = part.log.high_watermark
        leads_some = any(p.leading for p in topic.partitions)
        try:
            for c in frame.channels:
                self._made_here.discard((topic.name, c.name))
                self._adopting = True
                try:
                    channel = self.broker.channel(topic, c.name)
                finally:
                    self._adopting = False
                channel_part = channel.part(frame.partition)
                if channel_part is None:
                    continue
                ranges = [(s, min(e, end)) for s, e in c.ranges if s < end]
                deferred = [d for d in c.deferred if d[0] < end]
                channel_part.adopt_cursor(min(c.confirmed, end), ranges, deferred)
                paused = bool(c.flags & CHANNEL_PAUSED)
                if not leads_some and channel.paused != paused:
                    channel.paused = paused
                    self.broker.save_metadata()
            if frame.full and not leads_some:
                named = {c.name for c in frame.channels}
                for name, channel in list(topic.channels.items()):
                    made_here = (topic.name, name) in self._made_here
                    if name not in named and not channel.ephemeral and not made_here:
                        self.broker.delete_channel(topic, name)
        except StorageError as exc:  # (reported by the broker; the next CURSORS tries again)
            log.warning("REPLICATION(%s/%d): cursors not taken: %s", *frame_key(frame), exc)
            return False
        return True

    def _cursors_acked(self, topic: str, partition: int) -> None:
        """A follower took the cursors: an ordered channel waiting for them may go on."""
        part = self._part(topic, partition)
        if part is not None and part.leading and part.cursor_bound is not None:
            self.on_cursors(part)

    def _led_states(self) -> list[tuple[Partition, ReplicaState]]:
        out = []
        for key, state in self.states.items():
            part = self._held.get(key)
            if part is not None and part.leading and state.role == LEADER:
                out.append((part, state))
        return out

    def lagging(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        """(``NodeInfo.lagging``) Per partition led here, in its leader epoch, the other
        holders that have not kept up for the timeout (``ReplicaState.lagging``): the
        coordinator moves such ISR members to catch-up and keeps such catch-up members out
        of the ISR, so one stuck follower never holds the partition's writes."""
        out: dict[str, tuple[int, tuple[str, ...]]] = {}
        for part, state in self._led_states():
            r = self.replicas(part.name, part.number)
            if r is None or r.leader != self.node_id:
                continue
            late = state.lagging(r.holders)
            if late:
                out[partition_name(part.name, part.number)] = (part.leader_epoch, tuple(late))
        return out

    def follower_lags(self) -> list[tuple[str, int, str, int, float]]:
        """For the metrics: per partition led here and each other holder, (topic,
        partition, follower, messages behind the leader's end, seconds since it was last
        heard; -1: never in this leader epoch)."""
        out: list[tuple[str, int, str, int, float]] = []
        for part, state in self._led_states():
            r = self.replicas(part.name, part.number)
            if r is None or r.leader != self.node_id:
                continue
            end, now = part.log.high_watermark, state.clock()
            for node in r.holders:
                if node == self.node_id:
                    continue
                peer = state.peers.get(node)
                if peer is None:
                    out.append((part.name, part.number, node, end, -1.0))
                else:
                    silent = now - peer.last_heard
                    out.append((part.name, part.number, node, max(0, end - peer.end), silent))
        return out

    def failing(self) -> dict[str, int]:
        """(``NodeInfo.failing``) Per partition led here whose last write failed (a full
        disk): its leader epoch. The coordinator gives it to another ISR member."""
        out: dict[str, int] = {}
        for topic in list(self.broker.topics.values()):
            for part in topic.partitions:
                if part.leading and part.write_failing and not topic.ephemeral:
                    out[partition_name(part.name, part.number)] = part.leader_epoch
        return out

    def caught_up(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        """(``NodeInfo.caught_up``) Per partition led here, in its leader epoch, the
        catch-up members that hold everything committed (``ReplicaState.caught_up``):
        from the moment one is reported the committed offset waits for it too, until a
        report without it is in etcd and this node has applied etcd's assignment as of that
        report's revision or later (``reported``, ``apply``), so when the coordinator (its
        join guarded by the revision of the report it read) makes it an ISR member, no
        record acknowledged or shown before is missing on it."""
        out: dict[str, tuple[int, tuple[str, ...]]] = {}
        for part, state in self._led_states():
            r = self.replicas(part.name, part.number)
            if r is None or r.leader != self.node_id:
                continue
            joining = state.caught_up()
            if joining:
                out[partition_name(part.name, part.number)] = (part.leader_epoch, joining)
        return out

    # -- the server's hooks ------------------------------------------------------------

    def flushed(self, part: Partition) -> None:
        """A led partition's log was flushed or synced: commit what that allows (a
        partition that is its own whole ISR commits it at once) and ship it."""
        if not part.leading or part.ephemeral:
            return
        self.feed.notify(part.name, part.number)

    # -- following what etcd says ------------------------------------------------------

    def apply(self, snap: Snapshot) -> None:
        """Every held partition's state assigned as etcd says; fetches for those followed."""
        wanted: set[tuple[str, int]] = set()
        held: set[tuple[str, int]] = set()
        self.incarnations.clear()  # (the states look it up: the same dict, kept current)
        self.incarnations.update({n.id: n.incarnation for n in snap.nodes.values()})
        applied: dict[tuple[str, int], tuple[object, ...]] = {}
        for topic in list(self.broker.topics.values()):
            if topic.ephemeral:
                continue
            meta = snap.topics.get(topic.name)
            replicator = meta.replicator if meta is not None else 1
            for part in topic.partitions:
                state = self.state(part)
                if state is None:
                    continue
                key = (topic.name, part.number)
                held.add(key)
                versioned = snap.replicas.get(key)
                r = versioned.value if versioned is not None else None
                leader = snap.nodes.get(r.leader) if r is not None else None
                follows = r is not None and r.leader != self.node_id and leader is not None
                if follows and not part.leading:
                    wanted.add(key)
                # What the assignment below is made of: the same as last time, nothing
                # to do (a pass over thousands of partitions on every change in etcd)
                inputs = applied[key] = (
                    state, r, part.leading, part.leader_epoch, replicator,
                    leader.rpc_address if leader is not None else None,
                )  # fmt: skip
                if self._applied.get(key) == inputs:
                    state.seen(snap.revision)
                    continue
                if part.leading:
                    self._lead(part, state, r, replicator)
                else:
                    part.cursor_bound = None
                    epoch = r.leader_epoch if r is not None else part.leader_epoch
                    isr, catchup = (r.isr, r.catchup) if r is not None else ((), ())
                    state.assign(FOLLOWER, epoch, isr, catchup, replicator)
                    if follows and r is not None and leader is not None:
                        self._follow(state, leader.rpc_address, r.leader_epoch)
                state.seen(snap.revision)
        self._applied = applied
        for key in set(self.fetches) - wanted:
            self._drop_fetch(key)
        for key in set(self.states) - held:
            del self.states[key]
            self._held.pop(key, None)

    def _lead(
        self, part: Partition, state: ReplicaState, r: Replicas | None, replicator: int
    ) -> None:
        key = (part.name, part.number)
        self._drop_fetch(key)  # (promoted: nothing more is taken from the old leader)
        isr = r.isr if r is not None else (self.node_id,)
        catchup = r.catchup if r is not None else ()
        new = (state.role, state.epoch) != (LEADER, part.leader_epoch)
        state.assign(LEADER, part.leader_epoch, isr, catchup, replicator)
        others = tuple(n for n in isr if n != self.node_id)
        if new:
            log.info(
                "REPLICATION(%s/%d): leading in epoch %d with ISR %s from committed offset %d",
                *key,
                part.leader_epoch,
                ",".join(isr),
                state.committed,
            )
        if others:
            feed, topic, number = self.feed, part.name, part.number
            part.cursor_bound = lambda channel: feed.replicated_confirmed(
                topic, number, channel, others
            )
        else:
            part.cursor_bound = None
        self.feed.notify(*key)

    def _follow(self, state: ReplicaState, address: str, epoch: int) -> None:
        key = (state.topic, state.partition)
        fetch = self.fetches.get(key)
        if fetch is None or fetch.replica is not state:
            if fetch is not None:
                fetch.halt()
            fetch = FollowerFetch(
                state,
                cluster_id=self.cluster_id,
                leader=address,
                leader_epoch=epoch,
                on_cursors=self._adopt_cursors,
                timeout=self.timeout,
                tls=self.tls,
                incarnation=self.incarnation,
                pool=self.pool,
            )
            self.fetches[key] = fetch
            fetch.start()
            log.info("REPLICATION(%s/%d): following %s in epoch %d", *key, address, epoch)
        elif (fetch.leader, fetch.leader_epoch) != (address, epoch):
            fetch.set_leader(address, epoch)

    def _drop_fetch(self, key: tuple[str, int]) -> None:
        fetch = self.fetches.pop(key, None)
        if fetch is not None:
            fetch.halt()


def frame_key(frame: Cursors) -> tuple[str, int]:
    return frame.topic, frame.partition


MAX_PIECES = 4096  # confirmed ranges one channel's CURSORS entry carries at most
# Delayed-store entries one channel's CURSORS entry carries at most (the first by offset);
# the offsets of the rest are left out of the confirmed set it sends, so a follower that
# takes over delivers them again at once (early, never lost).
MAX_DEFERRED = 4096


def without(
    confirmed: int, ranges: Sequence[tuple[int, int]], deferred: Sequence[int]
) -> tuple[int, tuple[tuple[int, int], ...]]:
    """A cursor's confirmed offsets (all below ``confirmed``, and ``ranges``) less the
    ``deferred`` ones: what a follower may count as done. The leader's cursor confirms a
    deferred offset (its entry in the delayed store brings it back); a follower is sent the
    entries too, up to ``MAX_DEFERRED``, but for those beyond it has none: it must read
    that record again once it leads (a DPUB is deferred again by its record's deliver-at; a
    delayed REQ comes early), never skip it. Beyond
    ``MAX_PIECES`` ranges the rest is left out (delivered again: at least once)."""
    if not deferred:
        return confirmed, tuple(ranges)
    holes = sorted(set(deferred))
    pieces: list[tuple[int, int]] = []
    for start, end in ((0, confirmed), *ranges):
        i = bisect_left(holes, start)
        while i < len(holes) and holes[i] < end:
            if holes[i] > start:
                pieces.append((start, holes[i]))
            start = holes[i] + 1
            i += 1
        if start < end:
            pieces.append((start, end))
    if pieces and pieces[0][0] == 0:
        first, rest = pieces[0][1], pieces[1:]
    else:
        first, rest = 0, pieces
    return first, tuple(rest[:MAX_PIECES])
