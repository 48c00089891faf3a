"""A deterministic simulation of the data plane: one partition, three nodes, real logs.

Each node has a real ``PartitionLog`` (in a temporary folder) and plays the rules of
``cluster/replica_leader.py``, ``replica_follower.py`` and ``nsqd/replicas.py`` as messages:
a follower asks where its last epoch ends (EPOCH_QUERY), cuts its log to match
(``match_leader``), FETCHes from its end and takes APPENDs with ``append_raw``, ACKing its
durable end; the leader commits the smallest durable end of the ISR and of the catch-up
members it reported caught up (as under ``--sync-always``), and acknowledges a publish
only below it. The coordinator is the real ``decisions.plan`` over the nodes' reports, its
Changes applied as guarded txns. A seeded schedule publishes, delivers messages late, out of
order, twice or never, fsyncs, crashes nodes (a power loss: the log keeps only what was
fsynced) and restarts them. After every step the checker asserts:

- every acknowledged record, and every record a consumer was shown, is on every ISR
  member, at its offset, the same (so it survives any failover the coordinator makes);
- a consumer is shown only what is below the leader's committed offset;
- at the end, after the faults stop, every node holds the same log up to the leader's end.

The network is a list of messages; a node is a small state machine. A schedule costs tens
of milliseconds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsqpy.cluster.decisions import plan, track_missing
from nsqpy.cluster.model import NodeInfo, Replicas, Snapshot, TopicMeta, Versioned
from nsqpy.storage import PartitionLog
from nsqpy.storage.policy import SyncPolicy
from nsqpy.storage.reservation import RESERVED_FILE

TOPIC = "t"
META = TopicMeta(partition_num=1, replicator=3)
SECOND = 1_000_000_000


@dataclass
class Msg:
    src: str
    dst: str
    kind: str  # query, end, fetch, append, ack
    epoch: int  # the leader epoch the link is in
    session: int  # the follower's conversation (a TCP link: in order, or broken)
    data: tuple[Any, ...] = ()

    @property
    def link(self) -> tuple[str, int]:
        """(follower, session): one TCP connection, both ways."""
        return (self.src if self.kind in ("query", "fetch", "ack") else self.dst, self.session)

    @property
    def way(self) -> tuple[str, str, int]:
        return (self.src, self.dst, self.session)


@dataclass
class Node:
    id: str
    path: Path
    log: PartitionLog
    live: bool = True
    # as follower: the leader and epoch followed, and where the conversation is
    leader: str | None = None
    epoch: int = 0  # leader epoch followed or led
    state: str = "idle"  # query, fetch (follower); lead (leader)
    session: int = 0  # as follower: its current conversation with the leader
    asked: int = 0  # the last epoch asked about
    committed: int = 0  # as follower: the leader's, as last told
    # as leader
    lead_committed: int = 0
    links: dict[str, int] = field(default_factory=dict)  # follower -> next offset to send
    sessions: dict[str, int] = field(default_factory=dict)  # follower -> its conversation
    acked: dict[str, int] = field(default_factory=dict)  # follower -> durable end
    joining: set[str] = field(default_factory=set)
    joining_next: set[str] = field(default_factory=set)
    pending: list[tuple[int, list[bytes]]] = field(default_factory=list)  # (last, values)
    revision: int = 0  # of its last report
    crashed_at: int = 0  # coordinator rounds when it lost power
    seen: int | None = 0  # the leader epoch it last applied (None: none since its start)

    def report(self, r: Replicas) -> NodeInfo:
        if self.state == "lead":
            ends = {f"{TOPIC}/0": (self.epoch, self.log.flushed_offset)}
            caught = self.caught_up(r)
            caught_up = {f"{TOPIC}/0": (self.epoch, tuple(sorted(caught)))} if caught else {}
        else:
            epoch = self.epoch if self.state == "fetch" else self.log.last_epoch
            ends = {f"{TOPIC}/0": (epoch, self.log.flushed_offset)}
            caught_up = {}
        return NodeInfo(self.id, self.id, "127.0.0.1", 4150, 4151, "127.0.0.1:4250", "sim", 0,
                        ends=ends, caught_up=caught_up)  # fmt: skip

    def caught_up(self, r: Replicas) -> set[str]:
        """As ``Replication.caught_up``: catch-up members with everything committed."""
        keep = self.joining & set(r.catchup)
        new = {
            n for n in r.catchup if n in self.links and self.acked.get(n, 0) >= self.lead_committed
        }
        self.joining_next = keep | new
        return self.joining_next

    def waited(self, r: Replicas) -> set[str]:
        return (set(r.isr) | ((self.joining | self.joining_next) & set(r.catchup))) - {self.id}


class World:
    def __init__(self, seed: int, tmp: Path) -> None:
        self.rng = random.Random(seed)
        self.tmp = tmp
        names = ["n0", "n1", "n2"]
        self.nodes = {n: Node(n, tmp / n, self.open(tmp / n)) for n in names}
        self.replicas = Replicas("n0", tuple(names), (), epoch=1, leader_epoch=1)
        self.revision = 1  # of the replicas key
        self.etcd_revision = 1
        self.reports: dict[str, tuple[NodeInfo, int]] = {}
        self.missing: dict[str, int] = {}
        self.net: list[Msg] = []
        self.broken: set[tuple[str, int]] = set()  # links that lost a message (closed)
        self.now = 0
        self.next_value = 0
        self.acked: dict[bytes, int] = {}  # value -> offset, acknowledged to a producer
        self.shown: dict[int, bytes] = {}  # offset -> value a consumer was shown
        self.elections = 0
        self.crashes = 0
        self.coordinations = 0
        self.renewals = 0  # new epochs a leader asked for (it had led the epoch before)

    @staticmethod
    def open(path: Path) -> PartitionLog:
        return PartitionLog(path, segment_bytes=2048, sync=SyncPolicy(always=True))

    # -- the coordinator ---------------------------------------------------------------

    def report_all(self) -> None:
        for node in self.nodes.values():
            if node.live:
                self.etcd_revision += 1
                self.reports[node.id] = (node.report(self.replicas), self.etcd_revision)
                node.joining = set(node.joining_next)  # (the report is in etcd now)
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

    # -- nodes follow etcd -------------------------------------------------------------

    def apply(self, node: Node) -> None:
        r = self.replicas
        seen, node.seen = node.seen, r.leader_epoch
        if r.leader == node.id:
            taking_over = node.state != "lead" or node.epoch != r.leader_epoch
            if taking_over and (seen is None or seen >= r.leader_epoch):
                # not an election it saw happen (``Member.apply``): only in a new epoch
                self.replicas = r = Replicas(r.leader, r.isr, r.catchup, r.epoch + 1,
                                             r.leader_epoch + 1)  # fmt: skip
                self.etcd_revision += 1
                self.revision = self.etcd_revision
                self.renewals += 1
            if taking_over:
                node.log.begin_epoch(r.leader_epoch)
                node.lead_committed = max(node.committed, node.lead_committed)
                node.state, node.epoch, node.leader = "lead", r.leader_epoch, None
                node.links, node.acked, node.joining = {}, {}, set()
                node.joining_next, node.sessions = set(), {}
            return
        if node.state == "lead":  # stepped down: what it had not committed is refused
            node.pending = []
        if (node.leader, node.epoch) != (r.leader, r.leader_epoch) or node.state == "lead":
            node.leader, node.epoch = r.leader, r.leader_epoch
            self.converse(node)

    def converse(self, node: Node) -> None:
        """A follower (re)connects to its leader: a new link, the catch-up from its start."""
        assert node.leader is not None
        node.session += 1
        node.state, node.asked = "query", node.log.last_epoch
        self.send(node.id, node.leader, "query", node.epoch, node.session, node.asked)

    def send(self, src: str, dst: str, kind: str, epoch: int, session: int, *data: Any) -> None:
        msg = Msg(src, dst, kind, epoch, session, data)
        if msg.link not in self.broken:  # (on a broken link nothing arrives any more)
            self.net.append(msg)

    # -- steps ---------------------------------------------------------------------------

    def leader(self) -> Node | None:
        node = self.nodes[self.replicas.leader]
        return node if node.live and node.state == "lead" else None

    def publish(self) -> None:
        node = self.leader()
        r = self.replicas
        if node is None or len(r.isr) * 2 <= META.replicator:
            return
        values = [b"v%06d" % (self.next_value + i) for i in range(self.rng.randint(1, 4))]
        self.next_value += len(values)
        base = node.log.append_bodies(values)
        node.log.flush()
        node.pending.append((base + len(values) - 1, values))

    def stream(self) -> None:
        node = self.leader()
        if node is None:
            return
        for follower, pos in list(node.links.items()):
            pos = max(pos, node.log.low_watermark)
            if pos < node.log.flushed_offset:
                raw = node.log.read_raw(pos, 1500)
                if raw.count:
                    self.send(node.id, follower, "append", node.epoch, node.sessions[follower],
                              raw.offset, raw.data, node.lead_committed)  # fmt: skip
                    node.links[follower] = raw.next_offset
                else:  # a gap up to the end (a reboot's jump): the follower jumps too
                    end = node.log.flushed_offset
                    self.send(node.id, follower, "append", node.epoch, node.sessions[follower],
                              end, b"", node.lead_committed)  # fmt: skip
                    node.links[follower] = end

    def commit(self) -> None:
        node = self.leader()
        if node is None:
            return
        low = node.log.durable_offset
        for n in node.waited(self.replicas):
            low = min(low, node.acked.get(n, 0))
        node.lead_committed = max(node.lead_committed, low)
        keep = []
        for last, values in node.pending:
            if last < node.lead_committed:
                for i, v in enumerate(values):
                    self.acked[v] = last - len(values) + 1 + i
            else:
                keep.append((last, values))
        node.pending = keep
        start = max(node.log.low_watermark, node.lead_committed - 5)
        for rec in node.log.read(start, 5) if start < node.log.high_watermark else []:
            if rec.offset < node.lead_committed:
                self.shown[rec.offset] = rec.body

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
        """A link lost a message: the connection is closed, both ends know (the leader
        forgets the follower's link; the follower connects again when it next times out)."""
        self.net = [m for m in self.net if m.link != link]
        self.broken.add(link)
        follower, session = link
        for node in self.nodes.values():
            if node.state == "lead" and node.sessions.get(follower) == session:
                node.links.pop(follower, None)

    def receive(self, msg: Msg) -> None:
        dst = self.nodes[msg.dst]
        if not dst.live:
            return
        if dst.state == "lead":
            self.at_leader(dst, msg)
        elif msg.src == dst.leader and msg.epoch == dst.epoch and msg.session == dst.session:
            self.at_follower(dst, msg)

    def timeout(self) -> None:
        """A follower whose link closed (or that hears nothing for a while) connects again."""
        waiting = [n for n in self.nodes.values() if n.live and n.state in ("query", "fetch")]
        if waiting:
            node = self.rng.choice(waiting)
            if (node.id, node.session) in self.broken or self.rng.random() < 0.2:
                self.converse(node)

    def at_leader(self, node: Node, msg: Msg) -> None:
        if msg.epoch != node.epoch or msg.src not in self.replicas.holders:
            return
        current = node.sessions.get(msg.src, 0)
        if msg.session < current or msg.session <= 0:
            return  # an old link's
        if msg.session > current:  # a new link replaces the old one
            node.sessions[msg.src] = msg.session
            node.links.pop(msg.src, None)
        if msg.kind == "query":
            self.send(node.id, msg.src, "end", node.epoch, msg.session, msg.data[0],
                      node.log.end_offset_for_epoch(msg.data[0]))  # fmt: skip
        elif msg.kind == "fetch":
            if msg.data[0] > node.log.high_watermark:  # refused: it must catch up first
                self.cut(msg.link)
                return
            node.links[msg.src] = msg.data[0]
            node.acked[msg.src] = min(node.acked.get(msg.src, 0), msg.data[0])
        elif msg.kind == "ack" and msg.src in node.links:
            node.acked[msg.src] = msg.data[0]

    def at_follower(self, node: Node, msg: Msg) -> None:
        log = node.log
        if msg.kind == "end" and node.state == "query" and msg.data[0] == node.asked:
            if log.match_leader(node.asked, msg.data[1]):
                node.state = "fetch"
                self.send(node.id, msg.src, "fetch", node.epoch, node.session, log.high_watermark)
            else:
                node.asked = log.last_epoch
                self.send(node.id, msg.src, "query", node.epoch, node.session, node.asked)
        elif msg.kind == "append" and node.state == "fetch":
            start, data, committed = msg.data
            node.committed = max(node.committed, committed)
            if start > log.high_watermark:  # the leader's log skips offsets here
                log.advance_to(start)
            assert start == log.high_watermark, (node.id, start, log.high_watermark)
            if data:
                log.append_raw(data, start)
                log.flush()
            self.send(node.id, msg.src, "ack", node.epoch, node.session, log.durable_offset)

    def fsync(self) -> None:
        node = self.nodes[self.rng.choice(sorted(self.nodes))]
        if node.live:
            node.log.sync()
            if node.state == "fetch" and node.leader is not None:
                self.send(node.id, node.leader, "ack", node.epoch, node.session,
                          node.log.durable_offset)  # fmt: skip

    def crash(self) -> None:
        """A power loss: the log keeps what was fsynced, and its reservation says the
        offsets up to what it had reserved were handed out (a reboot: the log goes on
        above them, never reusing one: ``nsqpy.storage.reservation``)."""
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
        node.live = False
        node.crashed_at = self.coordinations
        node.state, node.leader, node.pending = "idle", None, []
        node.links, node.acked, node.joining, node.joining_next = {}, {}, set(), set()
        node.sessions = {}
        node.seen = None

    def restart(self) -> None:
        """A node back, at once or once the coordinator saw it gone (its lease expired)."""
        dead = [n for n in self.nodes.values() if not n.live]
        if dead:
            node = self.rng.choice(dead)
            node.live = True
            node.committed = node.lead_committed = 0
            node.epoch = 0

    # -- the checks ---------------------------------------------------------------------

    def check(self) -> None:
        must = {off: v for v, off in self.acked.items()}
        must.update(self.shown)
        for n in self.replicas.isr:
            log = self.nodes[n].log
            for offset, value in must.items():
                got = (
                    log.read(offset, 1) if log.low_watermark <= offset < log.high_watermark else []
                )
                assert got and got[0].offset == offset and got[0].body == value, (
                    f"ISR member {n} lacks {value!r} at {offset} (acked or shown); its log "
                    f"[{log.low_watermark}, {log.flushed_offset}) epochs {log.epochs()} live "
                    f"{self.nodes[n].live} {self.nodes[n].state}, replicas {self.replicas}"
                )

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
           ("restart", 0.6)]  # fmt: skip


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
                    and node.state in ("query", "fetch")
                    and (
                        node.state == "query"
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
            states = {n.id: (n.live, n.state, n.epoch, n.log.epochs(), n.log.flushed_offset,
                             n.log.durable_offset) for n in world.nodes.values()}  # fmt: skip
            leader = world.leader()
            extra = (leader.links, leader.acked, leader.lead_committed) if leader else None
            raise AssertionError(f"seed {seed}: never settled: {world.replicas} {states} {extra}")
        logs = [world.contents(n) for n in world.nodes.values()]
        assert logs[0] == logs[1] == logs[2], f"seed {seed}: the logs differ at the end"
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
