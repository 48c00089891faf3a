"""A deterministic simulation of the data plane: one partition, three nodes, real logs, and
the real replica state machine (FoundationDB's way: the code that runs is the code
simulated).

Each node has a real ``PartitionLog`` (in a temporary folder, ``--sync-always``) and the
real ``nsqpy.cluster.replica_state.ReplicaState`` that nsqd runs; only the I/O shells are
replaced by this world, which moves the frames those states emit, encoded and decoded by the
real codec (``nsqpy.protocol.replication``), as messages. A follower says HELLO, asks where
its last epoch ends (EPOCH_QUERY), cuts its log to match, FETCHes with its last epoch and
takes APPENDs, ACKing its ends; the leader's state commits and refuses what it must. The
world plays only what nsqd's ``Member.apply`` and ``Replication.apply`` do around them (the
assignment from etcd, a new epoch for a leader that did not see its election), and the
coordinator is the real ``decisions.plan`` over the nodes' reports, its Changes applied as
guarded txns. A seeded schedule publishes, delivers messages late, out of order or never
(a lost message breaks its link), fsyncs, crashes nodes (a power loss: the log keeps only
what was fsynced) and restarts them, and makes a peer lie: an ACK beyond what its link was
sent, a frame of a stale epoch, a FETCH whose last epoch its log cannot have, a HELLO from
a node holding no replica. After every step the checker asserts:

- every record, when acknowledged, is held durably by more than half the replicas;
- every acknowledged record, and every record a consumer was shown (below a node's
  ``readable_offset``, leader or follower: a log reader may read a follower), is on every
  ISR member, at its offset, the same (so it survives any failover the coordinator makes);
- an offset once shown never shows other content;
- every lie was refused (its link closed);
- at the end, after the faults stop, every node holds the same log up to the leader's end.

A schedule costs tens of milliseconds; ``SEEDS_THAT_FOUND_BUGS`` are replayed as regression
cases.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from nsqpy.cluster.decisions import plan, track_missing
from nsqpy.cluster.model import NodeInfo, Replicas, Snapshot, TopicMeta, Versioned
from nsqpy.cluster.replica_state import FOLLOWER, LEADER, FollowerLink, Refused, ReplicaState
from nsqpy.protocol.replication import (
    MAGIC,
    Ack,
    Append,
    Buffer,
    EpochEnd,
    EpochQuery,
    ErrorFrame,
    Fetch,
    Heartbeat,
    Hello,
    ReplicationFrame,
    ReplicationProtocolError,
    ReplicationReader,
    encode,
    encode_ack,
    encode_fetch,
    encode_hello,
)
from nsqpy.storage import PartitionLog
from nsqpy.storage.policy import SyncPolicy
from nsqpy.storage.reservation import RESERVED_FILE

TOPIC = "t"
META = TopicMeta(partition_num=1, replicator=3)
SECOND = 1_000_000_000
CLUSTER = "sim"

# Seeds whose schedules found a bug in an earlier version of the rules, kept as regression
# cases (``test_data_simulation`` replays each): a node that had just become leader showed
# its consumers its local end, records only it held; a leader stopped waiting for a
# catch-up member it had reported caught up as soon as a report without it was in etcd,
# though the coordinator had made it an ISR member meanwhile (an assignment the leader had
# not applied yet), and committed what that member lacked; a follower whose log began again
# at 0 (its leader had lost its own) kept the committed offset of the old log, and once
# promoted showed what it appended there (14804).
PROMOTION_SEEDS: tuple[int, ...] = (2, 11, 17, 20)
JOIN_SEEDS: tuple[int, ...] = (6068, 6218)
SEEDS_THAT_FOUND_BUGS = (*PROMOTION_SEEDS, *JOIN_SEEDS, 14804)


def frames_of(data: bytes) -> list[ReplicationFrame]:
    reader = ReplicationReader(expect_magic=True)
    reader.feed(MAGIC + data)
    return list(reader.frames())


@dataclass
class Msg:
    src: str
    dst: str
    follower: str  # the follower end of the link: (follower, session) is one TCP link
    session: int
    data: bytes  # one encoded frame

    @property
    def link(self) -> tuple[str, int]:
        return (self.follower, self.session)

    @property
    def way(self) -> tuple[str, str, int]:
        return (self.src, self.dst, self.session)


@dataclass
class Node:
    id: str
    path: Path
    log: PartitionLog
    state: ReplicaState
    live: bool = True
    # as follower: the leader and epoch followed, and where its conversation is
    leader: str | None = None
    epoch: int = 0
    phase: str = "idle"  # hello, query, fetch
    session: int = 0  # its current link to the leader
    asked: int = 0  # the last epoch asked about
    # as leader: each follower's link (session, the state's link)
    links: dict[str, tuple[int, FollowerLink]] = field(default_factory=dict)
    pending: list[tuple[int, list[bytes]]] = field(default_factory=list)  # (last, values)
    crashed_at: int = 0  # coordinator rounds when it lost power
    seen: int | None = 0  # the leader epoch it last applied (None: none since its start)

    def report(self) -> NodeInfo:
        st = self.state
        if st.role == LEADER:
            ends = {f"{TOPIC}/0": (st.epoch, self.log.flushed_offset)}
            caught = st.caught_up()
            caught_up = {f"{TOPIC}/0": (st.epoch, caught)} if caught else {}
        else:
            epoch = self.epoch if self.phase == "fetch" else self.log.last_epoch
            ends = {f"{TOPIC}/0": (epoch, self.log.flushed_offset)}
            caught_up = {}
        return NodeInfo(self.id, self.id, "127.0.0.1", 4150, 4151, "127.0.0.1:4250", "sim", 0,
                        ends=ends, caught_up=caught_up)  # fmt: skip


class World:
    def __init__(self, seed: int, tmp: Path) -> None:
        self.rng = random.Random(seed)
        self.tmp = tmp
        self.now = 0
        names = ["n0", "n1", "n2"]
        self.nodes: dict[str, Node] = {}
        for n in names:
            log = self.open(tmp / n)
            self.nodes[n] = Node(n, tmp / n, log, self.new_state(n, log))
        self.replicas = Replicas("n0", tuple(names), (), epoch=1, leader_epoch=1)
        self.revision = 1  # of the replicas key
        self.etcd_revision = 1
        self.reports: dict[str, tuple[NodeInfo, int]] = {}
        self.missing: dict[str, int] = {}
        self.net: list[Msg] = []
        self.broken: set[tuple[str, int]] = set()  # links closed (a lost message, a refusal)
        self.next_value = 0
        self.acked: dict[bytes, int] = {}  # value -> offset, acknowledged to a producer
        self.shown: dict[int, bytes] = {}  # offset -> value a consumer was shown
        self.elections = 0
        self.crashes = 0
        self.coordinations = 0
        self.renewals = 0  # new epochs a leader asked for (it had led the epoch before)
        self.lies = 0
        self.lies_refused = 0
        self.lying: set[tuple[str, int]] = set()  # links a lie went on, not refused yet
        self._intruders = 0
        self._held: dict[int, tuple[PartitionLog, object, dict[int, bytes], int]] = {}

    @staticmethod
    def open(path: Path) -> PartitionLog:
        return PartitionLog(path, segment_bytes=2048, sync=SyncPolicy(always=True))

    def new_state(self, node_id: str, log: PartitionLog) -> ReplicaState:
        return ReplicaState(node_id, TOPIC, 0, log, clock=self.clock, window=4096, chunk=1500)

    def clock(self) -> float:
        return self.now / SECOND

    # -- the coordinator ---------------------------------------------------------------

    def report_all(self) -> None:
        for node in self.nodes.values():
            if node.live:
                self.etcd_revision += 1
                self.reports[node.id] = (node.report(), self.etcd_revision)
                node.state.reported(self.etcd_revision)  # (the report is in etcd now)
            else:
                self.reports.pop(node.id, None)

    def coordinate(self) -> None:
        self.coordinations += 1
        nodes = {n: info for n, (info, _) in self.reports.items()}
        revisions = {n: rev for n, (_, rev) in self.reports.items()}
        snap = Snapshot(nodes, {TOPIC: META},
                        {(TOPIC, 0): Versioned(self.replicas, self.revision)},
                        self.etcd_revision, revisions)  # fmt: skip
        self.missing = track_missing(self.missing, snap, self.now)
        for change in plan(snap, self.now, self.missing, 600 * SECOND, 600 * SECOND).changes:
            if change.expected_revision != self.revision:
                continue
            if any(self.reports.get(n, (None, -1))[1] != rev for n, rev in change.guards):
                continue  # the guarded report changed: the txn fails
            if change.new.leader_epoch != self.replicas.leader_epoch:
                self.elections += 1
            self.replicas = change.new
            self.etcd_revision += 1
            self.revision = self.etcd_revision

    # -- nodes follow etcd (what Member.apply and Replication.apply do) ------------------

    def apply(self, node: Node) -> None:
        r = self.replicas
        st = node.state
        seen, node.seen = node.seen, r.leader_epoch
        if r.leader == node.id:
            taking_over = st.role != LEADER or st.epoch != r.leader_epoch
            if taking_over and (seen is None or seen >= r.leader_epoch):
                # not an election it saw happen (``Member.apply``): only in a new epoch
                self.replicas = r = Replicas(r.leader, r.isr, r.catchup, r.epoch + 1,
                                             r.leader_epoch + 1)  # fmt: skip
                self.etcd_revision += 1
                self.revision = self.etcd_revision
                self.renewals += 1
            if taking_over:  # (``Partition.set_role``; the fetch stops first)
                node.log.begin_epoch(r.leader_epoch)
                if node.leader is not None:
                    self.cut((node.id, node.session))
                node.phase, node.leader, node.links = "idle", None, {}
            st.assign(LEADER, r.leader_epoch, r.isr, r.catchup, META.replicator)
            st.seen(self.etcd_revision)
            return
        if st.role == LEADER:  # stepped down: what it had not committed is refused
            node.pending = []
            for follower, (session, _) in list(node.links.items()):
                self.cut((follower, session))
        st.assign(FOLLOWER, r.leader_epoch, r.isr, r.catchup, META.replicator)
        st.seen(self.etcd_revision)
        if (node.leader, node.epoch) != (r.leader, r.leader_epoch) or node.phase == "idle":
            node.leader, node.epoch = r.leader, r.leader_epoch
            self.converse(node)

    def converse(self, node: Node) -> None:
        """A follower (re)connects to its leader: a new link, HELLO, then the catch-up."""
        assert node.leader is not None
        self.cut((node.id, node.session))  # (the old link is closed: its leader sees EOF)
        node.session += 1
        node.phase = "hello"
        hello = encode_hello(node.id, CLUSTER, TOPIC, 0, node.epoch)
        self.send(node.id, node.leader, node.id, node.session, hello)
        node.asked, query = node.state.epoch_query()
        node.phase = "query"
        self.send(node.id, node.leader, node.id, node.session, query)

    def send(self, src: str, dst: str, follower: str, session: int, data: Buffer) -> None:
        msg = Msg(src, dst, follower, session, bytes(data))
        if msg.link not in self.broken:  # (on a broken link nothing arrives any more)
            self.net.append(msg)

    def send_all(self, src: str, dst: str, follower: str, session: int, bufs: list[Buffer]) -> None:
        """Buffers as the shell writes them, one message per frame."""
        data = b"".join(bytes(b) for b in bufs)
        for frame in frames_of(data):
            self.send(src, dst, follower, session, b"".join(bytes(b) for b in encode(frame)))

    # -- steps ---------------------------------------------------------------------------

    def leader(self) -> Node | None:
        node = self.nodes[self.replicas.leader]
        return node if node.live and node.state.role == LEADER else None

    def publish(self) -> None:
        node = self.leader()
        if node is None or not node.state.writable:
            return
        values = [b"v%06d" % (self.next_value + i) for i in range(self.rng.randint(1, 4))]
        self.next_value += len(values)
        base = node.log.append_bodies(values)
        node.log.flush()
        node.pending.append((base + len(values) - 1, values))
        node.state.local_progress()

    def stream(self) -> None:
        node = self.leader()
        if node is None:
            return
        for follower, (session, link) in list(node.links.items()):
            try:
                out = node.state.leader_output(link)
            except Refused:
                self.cut((follower, session))
                continue
            self.send_all(node.id, follower, follower, session, out)

    def commit(self) -> None:
        """Publishes answered below the leader's answerable offset (its committed offset as
        it was last while writable); what consumers (and log readers, on any node) may see
        is noted as shown."""
        node = self.leader()
        if node is not None:
            node.state.local_progress()
            answerable = node.state.answerable
            keep = []
            for last, values in node.pending:
                if last < answerable:
                    for i, v in enumerate(values):
                        self.acked[v] = offset = last - len(values) + 1 + i
                        self.check_majority(v, offset)
                else:
                    keep.append((last, values))
            node.pending = keep
        for other in self.nodes.values():
            if other.live:
                self.show(other)

    def show(self, node: Node) -> None:
        log, end = node.log, node.state.readable_offset
        start = max(log.low_watermark, end - 5)
        for rec in log.read(start, 5) if start < end else []:
            if rec.offset < end:
                before = self.shown.setdefault(rec.offset, rec.body)
                assert before == rec.body, (
                    f"offset {rec.offset} shown as {before!r}, now {rec.body!r} on {node.id}"
                )

    def deliver(self) -> None:
        """The oldest message of a random link: in order on a link (TCP); a lost one breaks
        its link (what was sent after it on that link is gone too); the messages of a link
        the follower has replaced come late, after the new link's (they change nothing)."""
        if not self.net:
            return
        way = self.rng.choice(self.net).way
        msg = next(m for m in self.net if m.way == way)
        self.net.remove(msg)
        if self.rng.random() < 0.04:
            self.cut(msg.link)
            return
        self.receive(msg)

    def cut(self, link: tuple[str, int]) -> None:
        """A link closed: nothing more arrives on it, both ends know (the leader's state is
        told the link ended; the follower connects again when it next times out)."""
        self.net = [m for m in self.net if m.link != link]
        self.broken.add(link)
        if link in self.lying:
            self.lying.discard(link)
            self.lies_refused += 1
        follower, session = link
        for node in self.nodes.values():
            held = node.links.get(follower)
            if held is not None and held[0] == session:
                del node.links[follower]
                node.state.closed(held[1])

    def receive(self, msg: Msg) -> None:
        dst = self.nodes[msg.dst]
        if not dst.live or msg.link in self.broken:
            return
        (frame,) = frames_of(msg.data)
        if msg.dst != msg.follower:
            self.at_leader(dst, msg, frame)
        elif msg.src == dst.leader and msg.session == dst.session:
            self.at_follower(dst, msg, frame)

    def timeout(self) -> None:
        """A follower whose link closed (or that hears nothing for a while) connects again."""
        waiting = [n for n in self.nodes.values() if n.live and n.leader is not None]
        if waiting:
            node = self.rng.choice(waiting)
            if (node.id, node.session) in self.broken or self.rng.random() < 0.2:
                self.converse(node)

    def at_leader(self, node: Node, msg: Msg, frame: ReplicationFrame) -> None:
        """As ``LeaderFeed`` does: a HELLO makes a link, every other frame goes to the
        state of the link it came on; a refusal or a broken rule closes that link."""
        st = node.state
        try:
            if isinstance(frame, Hello):
                link, _replaced = st.accept(frame)
                old = node.links.get(msg.follower)
                if old is not None:  # a new link replaces the old one
                    self.cut((msg.follower, old[0]))
                node.links[msg.follower] = (msg.session, link)
                return
            held = node.links.get(msg.follower)
            if held is None or held[0] != msg.session:
                self.cut(msg.link)  # (no HELLO on this link, or replaced: closed)
                return
            assert isinstance(frame, Ack | Fetch | EpochQuery | Heartbeat), frame
            answer = st.leader_frame(held[1], frame)
            self.send_all(node.id, msg.follower, msg.follower, msg.session, answer)
        except (Refused, ReplicationProtocolError):
            self.cut(msg.link)

    def at_follower(self, node: Node, msg: Msg, frame: ReplicationFrame) -> None:
        """As ``FollowerFetch`` does: catch up by epoch, FETCH, take APPENDs and ACK."""
        st, epoch = node.state, node.epoch
        try:
            if isinstance(frame, ErrorFrame):
                raise Refused(frame.leader_epoch, frame.code, frame.text)
            if isinstance(frame, EpochEnd) and node.phase == "query":
                if st.on_epoch_end(node.asked, frame):
                    node.phase = "fetch"
                    self.send(node.id, msg.src, node.id, node.session, st.fetch_frame(epoch, 1500))
                else:
                    node.asked, query = st.epoch_query()
                    self.send(node.id, msg.src, node.id, node.session, query)
            elif isinstance(frame, Append) and node.phase == "fetch":
                st.take_append(frame, epoch)
                node.log.flush()
                _, ack = st.ack_frame(epoch)
                self.send(node.id, msg.src, node.id, node.session, ack)
        except (Refused, ReplicationProtocolError):
            self.cut(msg.link)

    def lie(self) -> None:
        """A peer that lies, on a link of its own: the leader must refuse each lie (close the
        link) and commit nothing from it."""
        leader = self.leader()
        if leader is None:
            return
        kind = self.rng.choice(["ack-beyond", "stale-epoch", "fetch-no-epoch", "intruder"])
        epoch = leader.state.epoch
        if kind == "intruder":
            self._intruders += 1
            who, session = f"x{self._intruders}", 1
            frames = [encode_hello(who, CLUSTER, TOPIC, 0, epoch),
                      encode_fetch(epoch, 0, 1500, 0)]  # fmt: skip
        else:
            links = sorted((f, s) for f, (s, _) in leader.links.items())
            if not links:
                return
            who, session = self.rng.choice(links)
            end = leader.log.high_watermark
            frames = {
                "ack-beyond": [encode_ack(epoch, end + 1 + self.rng.randrange(50), 0)],
                "stale-epoch": [encode_ack(epoch - 1, 0, 0)] if epoch > 1 else [],
                "fetch-no-epoch": [encode_fetch(epoch, end + 1, 1500, 0)] if end else [],
            }[kind]
            if not frames:
                return
        self.lies += 1
        self.lying.add((who, session))
        for data in frames:
            self.receive(Msg(who, leader.id, who, session, data))
        assert (who, session) in self.broken, f"a lie ({kind}) was not refused"

    def fsync(self) -> None:
        node = self.nodes[self.rng.choice(sorted(self.nodes))]
        if not node.live:
            return
        node.log.sync()
        if node.state.role == LEADER:
            node.state.local_progress()
        elif node.phase == "fetch" and node.leader is not None:
            _, ack = node.state.ack_frame(node.epoch)
            self.send(node.id, node.leader, node.id, node.session, ack)

    def crash(self) -> None:
        """A power loss: the log keeps what was fsynced, and its reservation says the
        offsets up to what it had reserved were handed out (a reboot: the log goes on
        above them, never reusing one: ``nsqpy.storage.reservation``); its replica state
        starts anew."""
        node = self.nodes[self.rng.choice(sorted(self.nodes))]
        if not node.live or sum(n.live for n in self.nodes.values()) < 3:
            return
        self.crashes += 1
        reserved = (node.path / RESERVED_FILE).read_text().split()
        node.log.truncate(node.log.durable_offset)
        node.log.close()
        (node.path / RESERVED_FILE).write_text(
            f"handed {node.log.durable_offset} reserved {reserved[3]} boot lost-power\n"
        )
        node.log = self.open(node.path)
        node.state = self.new_state(node.id, node.log)
        node.live = False
        node.crashed_at = self.coordinations
        for follower, (session, _) in list(node.links.items()):
            self.cut((follower, session))
        self.cut((node.id, node.session))
        node.phase, node.leader, node.pending = "idle", None, []
        node.seen = None

    def restart(self) -> None:
        """A node back, at once or once the coordinator saw it gone (its lease expired)."""
        dead = [n for n in self.nodes.values() if not n.live]
        if dead:
            node = self.rng.choice(dead)
            node.live = True
            node.epoch = 0

    # -- the checks ---------------------------------------------------------------------

    def check(self) -> None:
        must = {off: v for v, off in self.acked.items()}
        must.update(self.shown)
        for n in self.replicas.isr:
            log = self.nodes[n].log
            held = self.held(log)
            for offset, value in must.items():
                assert held.get(offset) == value, (
                    f"ISR member {n} lacks {value!r} at {offset} (acked or shown); its log "
                    f"[{log.low_watermark}, {log.flushed_offset}) epochs {log.epochs()} live "
                    f"{self.nodes[n].live} {self.nodes[n].state.role}, replicas {self.replicas}"
                )

    def check_majority(self, value: bytes, offset: int) -> None:
        """A publish is answered only once more than half the replicas hold it durably
        (whatever the ISR is at that moment)."""
        holders = [
            n.id
            for n in self.nodes.values()
            if n.log.durable_offset > offset and self.held(n.log).get(offset) == value
        ]
        assert 2 * len(holders) > META.replicator, (
            f"{value!r} at {offset} answered while only {holders} hold it durably"
        )

    def held(self, log: PartitionLog) -> dict[int, bytes]:
        """offset -> body of every record of ``log`` (read in bulk; only the new tail again
        while the log only grew: same object, low watermark and epochs)."""
        key = (log.low_watermark, tuple(log.epochs()))
        cached = self._held.get(id(log))
        if cached is not None and cached[0] is log and cached[1] == key:
            out, offset = cached[2], cached[3]
        else:
            out, offset = {}, log.low_watermark
        end = log.flushed_offset
        if offset > end:  # (shorter with the same history: a cut within the last epoch)
            out, offset = {}, log.low_watermark
        while offset < end:
            records = log.read(offset, 1000)
            if not records:
                break
            out.update((r.offset, r.body) for r in records)
            offset = records[-1].offset + 1
        self._held[id(log)] = (log, key, out, offset)
        return out

    def contents(self, node: Node) -> list[tuple[int, int, bytes]]:
        out, offset = [], node.log.low_watermark
        while offset < node.log.flushed_offset:
            records = node.log.read(offset, 500)
            if not records:
                break
            out += [(r.offset, r.epoch, r.body) for r in records]
            offset = records[-1].offset + 1
        return out

    def close(self) -> None:
        for node in self.nodes.values():
            node.log.close()


ACTIONS = [("publish", 5), ("stream", 4), ("commit", 3), ("deliver", 12), ("fsync", 3),
           ("coordinate", 2), ("apply", 3), ("timeout", 0.5), ("crash", 0.4),
           ("restart", 0.6), ("lie", 0.3)]  # fmt: skip


def run_schedule(seed: int, tmp: Path, steps: int = 400) -> World:
    """One seeded schedule of ``steps`` faulty steps, then quiet ones until the logs agree
    (AssertionError if they do not within a bound)."""
    world = World(seed, tmp)
    try:
        for node in world.nodes.values():
            world.apply(node)
        names, weights = zip(*ACTIONS, strict=True)
        for _ in range(steps):
            world.now += SECOND // 10
            action = world.rng.choices(names, weights)[0]
            step(world, action)
            world.check()
        for node in world.nodes.values():  # quiet: everything back, nothing lost any more
            node.live = True
        for _ in range(4000):
            world.now += SECOND // 10
            for action in ("coordinate", "apply", "stream", "commit", "fsync"):
                step(world, action)
            while world.net:
                world.receive(world.net.pop(0))
            leader = world.leader()
            for node in world.nodes.values():  # a follower that hears nothing reconnects
                stuck = (
                    leader is not None
                    and node.leader is not None
                    and (
                        node.phase != "fetch"
                        or node.id not in leader.links
                        or (node.id, node.session) in world.broken
                    )
                )
                if stuck:
                    world.converse(node)
            world.check()
            leader = world.leader()
            if leader is not None and len(world.replicas.isr) == 3 and not world.net:
                ends = {n.log.flushed_offset for n in world.nodes.values()}
                if len(ends) == 1:
                    break
        else:
            states = {n.id: (n.live, n.phase, n.state.role, n.epoch, n.log.epochs(),
                             n.log.flushed_offset, n.log.durable_offset)
                      for n in world.nodes.values()}  # fmt: skip
            leader = world.leader()
            extra = (leader.state.peers, leader.state.committed) if leader else None
            raise AssertionError(f"seed {seed}: never settled: {world.replicas} {states} {extra}")
        logs = [world.contents(n) for n in world.nodes.values()]
        assert logs[0] == logs[1] == logs[2], f"seed {seed}: the logs differ at the end"
        assert world.lies == world.lies_refused, "every lie refused"
        return world
    finally:
        world.close()


def step(world: World, action: str) -> None:
    if action == "coordinate":
        world.report_all()
        world.coordinate()
    elif action == "apply":
        for node in world.nodes.values():
            if node.live:
                world.apply(node)
    else:
        getattr(world, action)()
