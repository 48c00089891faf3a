"""nsqlookupd's registration DB: who has which topic and channel (pure, no I/O).

Owns the data: registrations keyed ``(category, key, subkey)`` — ``("client", "", "")``
for every identified nsqd, ``("topic", t, "")`` and ``("channel", t, c)`` — each mapping
a peer id (the connection's remote ``ip:port``) to a ``Producer``: the shared
``PeerInfo`` plus a per-registration tombstone. ``RegistrationDB`` mirrors nsqlookupd's
primitives (``*`` is a wildcard for key and subkey, empty registrations stay until
removed); ``Registry`` adds the protocol's operations (IDENTIFY, PING, REGISTER,
UNREGISTER, disconnect), the HTTP API's, and time: a producer whose last IDENTIFY/PING
is older than the inactive timeout is hidden, a tombstone counts for its lifetime only.
Time comes from an injected clock in nanoseconds. Imports only the standard library and
nsqpy.protocol.names; never asyncio, sockets or HTTP.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from nsqpy.protocol.names import is_ephemeral

_K = TypeVar("_K")

CLIENT, TOPIC, CHANNEL = "client", "topic", "channel"
WILDCARD = "*"
CLIENT_REGISTRATION_KEY = (CLIENT, "", "")


@dataclass(frozen=True, slots=True)
class Registration:
    category: str
    key: str = ""
    subkey: str = ""

    def matches(self, category: str, key: str, subkey: str) -> bool:
        """nsqlookupd's IsMatch: ``*`` matches any key or subkey, category is exact."""
        return (
            self.category == category
            and (key == WILDCARD or self.key == key)
            and (subkey == WILDCARD or self.subkey == subkey)
        )


CLIENT_REGISTRATION = Registration(*CLIENT_REGISTRATION_KEY)


@dataclass(slots=True, eq=False)
class PeerInfo:
    """One identified nsqd connection; shared by all of its producers."""

    id: str
    remote_address: str
    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    last_update: int = 0  # clock ns of the last IDENTIFY or PING


@dataclass(slots=True, eq=False)
class Producer:
    """A peer within one registration; the tombstone belongs to this pairing."""

    peer: PeerInfo
    tombstoned: bool = False
    tombstoned_at: int | None = None  # clock ns; None = never tombstoned


class RegistrationDB:
    """Registrations -> producers by peer id, with indexes by category, key and peer.

    Orders are insertion orders (nsqlookupd's are Go map orders, i.e. unspecified).
    """

    def __init__(self) -> None:
        self._map: dict[Registration, dict[str, Producer]] = {}
        self._by_category: dict[str, dict[Registration, None]] = {}
        self._by_key: dict[tuple[str, str], dict[Registration, None]] = {}
        self._by_peer: dict[str, dict[Registration, None]] = {}

    def __len__(self) -> int:
        return len(self._map)

    def items(self) -> Iterator[tuple[Registration, dict[str, Producer]]]:
        """Every registration with its producers (for /debug)."""
        return iter(list(self._map.items()))

    def producers_of(self, reg: Registration) -> dict[str, Producer] | None:
        return self._map.get(reg)

    def add_registration(self, reg: Registration) -> dict[str, Producer]:
        producers = self._map.get(reg)
        if producers is None:
            producers = self._map[reg] = {}
            self._by_category.setdefault(reg.category, {})[reg] = None
            self._by_key.setdefault((reg.category, reg.key), {})[reg] = None
        return producers

    def add_producer(self, reg: Registration, producer: Producer) -> bool:
        """Add unless the peer is already there (its existing producer is kept); True if added."""
        producers = self.add_registration(reg)
        peer_id = producer.peer.id
        if peer_id in producers:
            return False
        producers[peer_id] = producer
        self._by_peer.setdefault(peer_id, {})[reg] = None
        return True

    def remove_producer(self, reg: Registration, peer_id: str) -> tuple[bool, int]:
        """(whether the peer was there, producers left); the registration itself stays."""
        producers = self._map.get(reg)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        if removed:
            self._unindex_peer(peer_id, reg)
        return removed, len(producers)

    def remove_registration(self, reg: Registration) -> None:
        producers = self._map.pop(reg, None)
        if producers is None:
            return
        for peer_id in producers:
            self._unindex_peer(peer_id, reg)
        _discard(self._by_category, reg.category, reg)
        _discard(self._by_key, (reg.category, reg.key), reg)

    def _unindex_peer(self, peer_id: str, reg: Registration) -> None:
        _discard(self._by_peer, peer_id, reg)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        if key != WILDCARD and subkey != WILDCARD:
            reg = Registration(category, key, subkey)
            return [reg] if reg in self._map else []
        if key == WILDCARD:
            candidates = self._by_category.get(category, {})
        else:
            candidates = self._by_key.get((category, key), {})
        return [r for r in candidates if r.matches(category, key, subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """Producers of the matching registrations, the first one per peer id."""
        seen: dict[str, Producer] = {}
        for reg in self.find_registrations(category, key, subkey):
            for peer_id, producer in self._map[reg].items():
                seen.setdefault(peer_id, producer)
        return list(seen.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        """Every registration the peer is a producer in."""
        return list(self._by_peer.get(peer_id, {}))


def _discard(index: dict[_K, dict[Registration, None]], key: _K, reg: Registration) -> None:
    regs = index.get(key)
    if regs is not None:
        regs.pop(reg, None)
        if not regs:
            del index[key]


class Registry:
    """The DB plus nsqlookupd's operations on it and its two clocks (inactivity, tombstones)."""

    def __init__(
        self,
        *,
        clock: Callable[[], int] = time.time_ns,
        inactive_producer_timeout_ms: int = 300_000,
        tombstone_lifetime_ms: int = 45_000,
    ) -> None:
        self.db = RegistrationDB()
        # (peer id, topic) -> how many partitions the topic has there (nsqpy's PARTITIONS)
        self.partition_counts: dict[tuple[str, str], int] = {}
        self.clock = clock
        self.inactive_producer_timeout_ns = inactive_producer_timeout_ms * 1_000_000
        self.tombstone_lifetime_ns = tombstone_lifetime_ms * 1_000_000

    # -- time ------------------------------------------------------------------------------

    def is_active(self, peer: PeerInfo, now: int | None = None) -> bool:
        """Seen (IDENTIFY or PING) within the inactive-producer timeout."""
        now = self.clock() if now is None else now
        return now - peer.last_update <= self.inactive_producer_timeout_ns

    def is_tombstoned(self, producer: Producer, lifetime_ns: int, now: int | None = None) -> bool:
        """Tombstoned less than ``lifetime_ns`` ago (a zero lifetime: never)."""
        if not producer.tombstoned or producer.tombstoned_at is None:
            return False
        now = self.clock() if now is None else now
        return now - producer.tombstoned_at < lifetime_ns

    def _filter_active(self, producers: list[Producer], lifetime_ns: int) -> list[Producer]:
        now = self.clock()
        return [
            p
            for p in producers
            if self.is_active(p.peer, now) and not self.is_tombstoned(p, lifetime_ns, now)
        ]

    # -- the TCP protocol --------------------------------------------------------------------

    def identify(self, peer: PeerInfo) -> bool:
        """A new peer: stamp it and add it to the client registration (False if already in)."""
        peer.last_update = self.clock()
        return self.db.add_producer(CLIENT_REGISTRATION, Producer(peer))

    def ping(self, peer: PeerInfo) -> None:
        peer.last_update = self.clock()

    def register(
        self, peer: PeerInfo, topic: str, channel: str | None = None
    ) -> list[Registration]:
        """REGISTER: the channel (when given) and the topic; returns the ones newly joined."""
        added = []
        regs = [Registration(TOPIC, topic)]
        if channel:
            regs.insert(0, Registration(CHANNEL, topic, channel))
        for reg in regs:
            if self.db.add_producer(reg, Producer(peer)):
                added.append(reg)
        return added

    def set_partitions(self, peer: PeerInfo, topic: str, count: int) -> None:
        """nsqpy's PARTITIONS: the topic has ``count`` partitions on ``peer``."""
        self.partition_counts[(peer.id, topic)] = count

    def unregister(
        self, peer: PeerInfo, topic: str, channel: str | None = None
    ) -> list[Registration]:
        """UNREGISTER: see SPEC 3.1; returns the registrations the peer left."""
        left: list[Registration] = []
        if channel:
            self._leave(Registration(CHANNEL, topic, channel), peer, channel, left)
            return left
        self.partition_counts.pop((peer.id, topic), None)
        for reg in self.db.find_registrations(CHANNEL, topic, WILDCARD):
            if self.db.remove_producer(reg, peer.id)[0]:
                left.append(reg)
        self._leave(Registration(TOPIC, topic), peer, topic, left)
        return left

    def _leave(
        self, reg: Registration, peer: PeerInfo, name: str, left: list[Registration]
    ) -> None:
        """``peer`` leaves ``reg`` (noted in ``left``); once no producer is left, an ephemeral
        ``name`` (the channel's or the topic's) takes its registration with it."""
        removed, remaining = self.db.remove_producer(reg, peer.id)
        if removed:
            left.append(reg)
        if remaining == 0 and is_ephemeral(name):
            self.db.remove_registration(reg)

    def remove_peer(self, peer_id: str) -> list[Registration]:
        """The connection closed: leave every registration (they stay, maybe empty)."""
        regs = self.db.lookup_registrations(peer_id)
        for reg in regs:
            self.db.remove_producer(reg, peer_id)
        for key in [k for k in self.partition_counts if k[0] == peer_id]:
            del self.partition_counts[key]
        return regs

    # -- the HTTP API ------------------------------------------------------------------------

    def topics(self) -> list[str]:
        return [r.key for r in self.db.find_registrations(TOPIC, WILDCARD, "")]

    def channels(self, topic: str) -> list[str]:
        return [r.subkey for r in self.db.find_registrations(CHANNEL, topic, WILDCARD)]

    def produced_topics(self) -> list[str]:
        """The topics some nsqd registered and still has (not only ``/topic/create``)."""
        return [t for t in self.topics() if self.db.find_producers(TOPIC, t, "")]

    def produced_channels(self, topic: str) -> list[str]:
        """The channels of ``topic`` some nsqd registered and still has."""
        return [c for c in self.channels(topic) if self.db.find_producers(CHANNEL, topic, c)]

    def lookup(self, topic: str) -> tuple[list[str], list[PeerInfo]] | None:
        """/lookup: channels and live, untombstoned producers; None when the topic is unknown."""
        if not self.db.find_registrations(TOPIC, topic, ""):
            return None
        producers = self._filter_active(
            self.db.find_producers(TOPIC, topic, ""), self.tombstone_lifetime_ns
        )
        return self.channels(topic), [p.peer for p in producers]

    def partitions(self, topic: str, producers: list[PeerInfo]) -> dict[int, PeerInfo]:
        """Partition number -> the producer holding it, for the producers that said how
        many partitions the topic has (nsqpy's PARTITIONS; the first in ``producers``
        order when several hold one)."""
        out: dict[int, PeerInfo] = {}
        for peer in producers:
            for number in range(self.partition_counts.get((peer.id, topic), 0)):
                out.setdefault(number, peer)
        return out

    def nodes(self) -> list[tuple[PeerInfo, list[str], list[bool]]]:
        """/nodes: every active peer with its topics and, parallel to them, its tombstones."""
        out = []
        now = self.clock()
        clients = self._filter_active(self.db.find_producers(*CLIENT_REGISTRATION_KEY), 0)
        for client in clients:
            peer = client.peer
            topics = [r.key for r in self.db.lookup_registrations(peer.id) if r.category == TOPIC]
            tombstones = []
            for topic in topics:
                producers = self.db.producers_of(Registration(TOPIC, topic)) or {}
                producer = producers.get(peer.id)
                tombstones.append(
                    producer is not None
                    and producer.peer is peer
                    and self.is_tombstoned(producer, self.tombstone_lifetime_ns, now)
                )
            out.append((peer, topics, tombstones))
        return out

    def create_topic(self, topic: str) -> None:
        self.db.add_registration(Registration(TOPIC, topic))

    def delete_topic(self, topic: str) -> None:
        """The topic's channel registrations, then the topic's (``*`` matches every topic)."""
        for reg in self.db.find_registrations(CHANNEL, topic, WILDCARD):
            self.db.remove_registration(reg)
        for reg in self.db.find_registrations(TOPIC, topic, ""):
            self.db.remove_registration(reg)

    def create_channel(self, topic: str, channel: str) -> None:
        self.db.add_registration(Registration(CHANNEL, topic, channel))
        self.db.add_registration(Registration(TOPIC, topic))

    def delete_channel(self, topic: str, channel: str) -> bool:
        """False when there is no such channel registration."""
        regs = self.db.find_registrations(CHANNEL, topic, channel)
        for reg in regs:
            self.db.remove_registration(reg)
        return bool(regs)

    def tombstone(self, topic: str, node: str) -> int:
        """Tombstone the producers of ``topic`` whose ``broadcast_address:http_port`` is ``node``."""
        count = 0
        now = self.clock()
        for producer in self.db.find_producers(TOPIC, topic, ""):
            peer = producer.peer
            if f"{peer.broadcast_address}:{peer.http_port}" == node:
                producer.tombstoned = True
                producer.tombstoned_at = now
                count += 1
        return count
