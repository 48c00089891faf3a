"""nsqd's replication in a cluster: the leader's feed and the followers' fetches, wired to
the broker's partitions (issue 19; the links are ``nsqpy.cluster.replica_leader`` and
``replica_follower``).

``Replication`` listens on ``--rpc-address`` (``LeaderFeed``) and keeps one
``FollowerFetch`` per partition this node follows, pointed at the leader etcd names
(re-pointed when the leader or its epoch changes, stopped before this node leads). For a
partition this node leads with other ISR members, consumers see and producers are
answered only up to the **committed offset**: the smallest end every ISR member has
acknowledged (``Partition.commit_bound``); the server is told when it moves
(``on_committed``) and answers the publishes it covers. A partition whose ISR is this
node alone commits at its own flushed end, as a single node does. A follower that becomes
leader starts from the committed offset it learned from the old leader, and its channels
from the cursors the old leader sent every second (``_adopt_cursors``). Imports asyncio,
the cluster links and the broker; never the TCP or HTTP handlers.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Sequence

from nsqpy.broker.broker import Broker
from nsqpy.broker.partition import Partition
from nsqpy.cluster.model import Replicas, Snapshot, partition_name
from nsqpy.cluster.replica_follower import FollowerFetch
from nsqpy.cluster.replica_leader import LeaderFeed
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
    ) -> None:
        self.broker = broker
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.replicas = replicas
        self.on_committed = on_committed
        self.feed = LeaderFeed(
            node_id,
            cluster_id,
            self._log_of,
            self._epoch_of,
            self._isr_of,
            on_progress=self._progress,
            cursors=self._cursors_of,
            on_cursors_acked=self._cursors_acked,
        )
        self.fetches: dict[tuple[str, int], FollowerFetch] = {}
        self._led: dict[tuple[str, int], int] = {}  # leader epoch of each partition led
        # catch-up members reported caught up, waited for as ISR members (``caught_up``):
        # as the last report written to etcd says, and as the one being written says
        self._joining: dict[tuple[str, int], set[str]] = {}
        self._joining_next: dict[tuple[str, int], set[str]] = {}
        self.address: tuple[str, int] | None = None

    async def start(self, host: str, port: int) -> None:
        self.address = await self.feed.start(host or "0.0.0.0", port)
        log.info("RPC: listening on %s:%d", *self.address)

    async def stop(self) -> None:
        for fetch in list(self.fetches.values()):
            await fetch.stop()
        self.fetches.clear()
        await self.feed.close()

    # -- lookups the feed uses ---------------------------------------------------------

    def _part(self, topic: str, partition: int) -> Partition | None:
        found = self.broker.get_topic(topic)
        return found.partition(partition) if found is not None else None

    def _log_of(self, topic: str, partition: int) -> PartitionLog | None:
        part = self._part(topic, partition)
        if part is None or part.ephemeral or not isinstance(part.log, PartitionLog):
            return None
        return part.log

    def _epoch_of(self, topic: str, partition: int) -> int | None:
        part = self._part(topic, partition)
        return part.leader_epoch if part is not None and part.leading else None

    def _isr_of(self, topic: str, partition: int) -> tuple[str, ...]:
        """Whom the committed offset waits for: the ISR, and the catch-up members this
        node reported caught up (``caught_up``)."""
        r = self.replicas(topic, partition)
        if r is None:
            return ()
        key = (topic, partition)
        joining = self._joining.get(key, set()) | self._joining_next.get(key, set())
        if not joining:
            return r.isr
        return r.isr + tuple(n for n in sorted(joining) if n in r.catchup)

    def reported(self) -> None:
        """The NodeInfo built last is in etcd: its ``caught_up`` is what the coordinator
        may act on now. Only from here does the committed offset stop waiting for a member
        the new report leaves out (the coordinator's join is guarded by this report's
        revision, so a join decided on the older one cannot land any more)."""
        self._joining = {k: set(v) for k, v in self._joining_next.items()}

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
            entries: tuple[tuple[int, int, int], ...] = ()
            rest: list[int] = []
            if part.deferred.count():  # its delayed store goes along, up to MAX_DEFERRED
                entries = tuple(part.deferred.entries(MAX_DEFERRED))
                if len(entries) == MAX_DEFERRED:
                    rest = [o for o in part.deferred.offsets() if o > entries[-1][0]]
            confirmed, ranges = without(cursor.confirmed, cursor.ranges, rest)
            out.append(ChannelCursor(name, confirmed, flags, ranges, entries))
        return out

    def _adopt_cursors(self, frame: Cursors) -> None:
        """A follower takes its leader's channel cursors (``ChannelPartition.adopt_cursor``),
        never past its own log's end; channels the leader has are created here, and (a full
        set, on a topic this node leads no partition of) those it lacks are deleted, so the
        node that takes over delivers where the old leader was (at most a second back)."""
        topic = self.broker.get_topic(frame.topic)
        part = topic.partition(frame.partition) if topic is not None else None
        if topic is None or part is None or part.leading:
            return
        end = part.log.high_watermark
        leads_some = any(p.leading for p in topic.partitions)
        try:
            for c in frame.channels:
                channel = self.broker.channel(topic, c.name)
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
                    if name not in named and not channel.ephemeral:
                        self.broker.delete_channel(topic, name)
        except StorageError as exc:  # (reported by the broker; the next CURSORS tries again)
            log.warning("REPLICATION(%s/%d): cursors not taken: %s", *frame_key(frame), exc)

    def _cursors_acked(self, topic: str, partition: int) -> None:
        """A follower took the cursors: an ordered channel waiting for them may go on."""
        part = self._part(topic, partition)
        if part is not None and part.leading and part.cursor_bound is not None:
            self.on_committed(part)

    def _progress(self, topic: str, partition: int, committed: int) -> None:
        """The feed's committed offset moved. Publishes are acknowledged up to it only
        while the ISR is a majority of the replicas (``writable``): what only a minority
        holds waits until a member that joins has it too (the join waits for that)."""
        part = self._part(topic, partition)
        if part is None or not part.leading or part.commit_bound is None or not part.writable:
            return
        if committed > part.commit_bound:
            part.commit_bound = committed
            self.on_committed(part)

    def lagging(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        """(``NodeInfo.lagging``) Per partition led here, in its leader epoch, the other
        holders that have not kept up for the feed's timeout (``LeaderFeed.lagging``): the
        coordinator moves such ISR members to catch-up and keeps such catch-up members out
        of the ISR, so one stuck follower never holds the partition's writes."""
        out: dict[str, tuple[int, tuple[str, ...]]] = {}
        for topic in list(self.broker.topics.values()):
            if topic.ephemeral:
                continue
            for part in topic.partitions:
                r = self.replicas(topic.name, part.number) if part.leading else None
                if r is None or r.leader != self.node_id:
                    continue
                late = self.feed.lagging(part.name, part.number, r.holders)
                if late:
                    out[partition_name(part.name, part.number)] = (part.leader_epoch, tuple(late))
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
        catch-up members that have acknowledged everything committed (durably under
        ``always``) and do not lag. From the moment one is reported, the committed offset
        waits for it too (``_isr_of``), and goes on waiting until a report without it is
        in etcd (``reported``): the coordinator's join is guarded by the revision of the
        report it read, so when it makes the member an ISR member no record acknowledged
        before is missing on it (a leader that only compared log ends could commit more,
        without it, between its report and the join)."""
        out: dict[str, tuple[int, tuple[str, ...]]] = {}
        nxt: dict[tuple[str, int], set[str]] = {}
        for topic in list(self.broker.topics.values()):
            if topic.ephemeral:
                continue
            for part in topic.partitions:
                r = self.replicas(topic.name, part.number) if part.leading else None
                if r is None or r.leader != self.node_id or not r.catchup:
                    continue
                key = (part.name, part.number)
                late = set(self.feed.lagging(*key, r.holders))
                joining = self._joining.get(key, set()) & (set(r.catchup) - late)
                always = isinstance(part.log, PartitionLog) and part.log.policy.always
                committed = part.committed_offset
                for node, f in self.feed.followers(*key).items():
                    has = f.durable if always else f.end
                    if node in r.catchup and node not in late and f.connected and has >= committed:
                        joining.add(node)
                if joining:
                    nxt[key] = joining
                    out[partition_name(*key)] = (part.leader_epoch, tuple(sorted(joining)))
        self._joining_next = nxt
        return out

    # -- the server's hooks ------------------------------------------------------------

    def flushed(self, part: Partition) -> None:
        """A led partition's log was flushed or synced: ship it, and commit what a
        partition without other ISR members now holds."""
        if not part.leading or part.ephemeral:
            return
        self.feed.notify(part.name, part.number)

    # -- following what etcd says ------------------------------------------------------

    def apply(self, snap: Snapshot) -> None:
        """Fetches for the partitions followed, commit bounds for those led."""
        wanted: set[tuple[str, int]] = set()
        for topic in list(self.broker.topics.values()):
            if topic.ephemeral:
                continue
            for part in topic.partitions:
                key = (topic.name, part.number)
                if not part.leading:
                    self._led.pop(key, None)
                versioned = snap.replicas.get(key)
                r = versioned.value if versioned is not None else None
                if part.leading:
                    meta = snap.topics.get(topic.name)
                    self._lead(part, r, meta.replicator if meta is not None else 1)
                elif r is not None and r.leader != self.node_id:
                    leader = snap.nodes.get(r.leader)
                    if leader is not None:
                        wanted.add(key)
                        self._follow(part, leader.rpc_address, r.leader_epoch)
        for key in set(self.fetches) - wanted:
            self._drop_fetch(key)

    def _lead(self, part: Partition, r: Replicas | None, replicator: int) -> None:
        key = (part.name, part.number)
        if self._led.get(key) != part.leader_epoch:
            self._led[key] = part.leader_epoch
            self.feed.begin_leading(*key)
        isr = r.isr if r is not None else (self.node_id,)
        writable = len(isr) * 2 > replicator  # the ISR must stay a majority of the replicas
        if writable != part.writable:
            part.writable = writable
            log.log(
                logging.INFO if writable else logging.WARNING,
                "REPLICATION(%s/%d): %s (ISR %d of %d replicas)",
                part.name,
                part.number,
                "writable again" if writable else "not writable",
                len(isr),
                replicator,
            )
        fetch = self.fetches.get(key)
        if fetch is not None:  # promoted: start from what the old leader had committed
            self._drop_fetch(key)
            self.feed.set_committed(part.name, part.number, fetch.committed_offset)
        others = tuple(n for n in (r.isr if r is not None else ()) if n != self.node_id)
        if not others and writable:  # one replica in all: committed when flushed
            part.commit_bound = None
            part.cursor_bound = None
            return
        if not others:  # the only ISR member left of several: what waits goes on waiting
            if part.commit_bound is None:
                part.commit_bound = self.feed.committed_offset(part.name, part.number)
            part.cursor_bound = None
            return
        feed, number = self.feed, part.number
        part.cursor_bound = lambda channel: feed.replicated_confirmed(
            key[0], number, channel, others
        )
        committed = self.feed.committed_offset(part.name, part.number)
        if part.commit_bound is None or (writable and committed > part.commit_bound):
            part.commit_bound = committed
            log.info(
                "REPLICATION(%s/%d): leading with ISR %s from committed offset %d",
                part.name,
                part.number,
                ",".join(others),
                part.commit_bound,
            )
            self.on_committed(part)  # (publishes that waited for a member that joined)
        self.feed.notify(part.name, part.number)

    def _follow(self, part: Partition, address: str, epoch: int) -> None:
        key = (part.name, part.number)
        part.commit_bound = None
        part.cursor_bound = None
        fetch = self.fetches.get(key)
        if fetch is None:
            plog = self._log_of(part.name, part.number)
            if plog is None:
                return
            fetch = FollowerFetch(
                plog,
                node_id=self.node_id,
                cluster_id=self.cluster_id,
                topic=part.name,
                partition=part.number,
                leader=address,
                leader_epoch=epoch,
                on_cursors=self._adopt_cursors,
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
