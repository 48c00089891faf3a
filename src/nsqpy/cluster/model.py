"""The cluster's metadata as values: what etcd holds (nodes, lookupds, the coordinator,
topic metas, each partition's replicas) and the Snapshot the pure decisions read.

Standard library only: no asyncio, no etcd client, nothing else from nsqpy. Every record is a
frozen dataclass with ``to_json() -> bytes`` and ``from_json(bytes)``; ``from_json`` raises
ValueError naming the field on anything malformed and ignores fields it does not know (so a
newer writer can add some). The JSON is compact UTF-8 with sorted keys:

- ``NodeInfo`` (``nodes/<id>``): ``{"broadcast_address": str, "ends": {"<topic>/<p>":
  [leader_epoch, end], ...}, "hostname": str, "http_port": int, "id": str, "load":
  {"bytes": int, "leaders": int, "msgs_per_sec": number, "partitions": int}, "rpc_address":
  "host:port", "started_ns": int, "tcp_port": int, "version": str}`` (``ends``, ``load``
  optional on read).
- ``LookupdInfo`` (``lookupds/<id>``): ``{"broadcast_address", "http_port", "id", "tcp_port"}``.
- ``CoordinatorInfo`` (``coordinator``): ``{"http_address": "host:port", "id": str}``.
- ``TopicMeta`` (``topics/<t>/meta``): ``{"created_ns", "ext", "multipart", "ordered",
  "partition_num", "replicator", "retention_days", "syncdisk"}`` (all but partition_num and
  replicator optional on read).
- ``Replicas`` (``topics/<t>/<p>/replicas``): ``{"catchup": [ids], "epoch": int, "isr": [ids],
  "leader": id, "leader_epoch": int}``, plus ``"move": {"from": id, "leader": bool, "to": id}``
  while an operator's or the rebalancer's move of the partition is under way; the leader is
  the first ISR member it names.
- ``removing/<id>`` (a node being drained): ``{"since_ns": int}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Generic, TypeVar

__all__ = [
    "Change",
    "CoordinatorInfo",
    "Load",
    "LookupdInfo",
    "Move",
    "NodeInfo",
    "Replicas",
    "Snapshot",
    "TopicMeta",
    "Versioned",
    "partition_name",
]

T = TypeVar("T")
EMPTY: Mapping[Any, Any] = MappingProxyType({})


def partition_name(topic: str, partition: int) -> str:
    """The key of a partition in ``NodeInfo.ends``: ``"<topic>/<partition>"``."""
    return f"{topic}/{partition}"


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def _load(data: bytes | str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (ValueError, TypeError) as e:  # UnicodeDecodeError and JSONDecodeError included
        raise ValueError(f"{what}: not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{what}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _int(
    obj: Mapping[str, Any], name: str, what: str, *, lo: int = 0, default: int | None = None
) -> int:
    value = obj.get(name, default)
    if value is None:
        raise ValueError(f"{what}: field {name!r} is missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what}: field {name!r} must be an integer, got {value!r}")
    if value < lo:
        raise ValueError(f"{what}: field {name!r} must be >= {lo}, got {value}")
    return value


def _str(obj: Mapping[str, Any], name: str, what: str, *, empty: bool = False) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or (not empty and not value):
        raise ValueError(
            f"{what}: field {name!r} must be a {'' if empty else 'non-empty '}string, got {value!r}"
        )
    return value


def _bool(obj: Mapping[str, Any], name: str, what: str) -> bool:
    value = obj.get(name, False)
    if not isinstance(value, bool):
        raise ValueError(f"{what}: field {name!r} must be true or false, got {value!r}")
    return value


def _ids(obj: Mapping[str, Any], name: str, what: str) -> tuple[str, ...]:
    value = obj.get(name)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{what}: field {name!r} must be a list of node ids, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class Load:
    """What a node reports about its own load."""

    partitions: int = 0
    leaders: int = 0
    msgs_per_sec: float = 0.0
    bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"partitions": self.partitions, "leaders": self.leaders,
                "msgs_per_sec": self.msgs_per_sec, "bytes": self.bytes}  # fmt: skip

    @classmethod
    def from_dict(cls, obj: Any, what: str = "load") -> Load:
        if not isinstance(obj, dict):
            raise ValueError(f"{what}: expected an object, got {obj!r}")
        rate = obj.get("msgs_per_sec", 0.0)
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate >= 0:
            raise ValueError(f"{what}: field 'msgs_per_sec' must be a number >= 0, got {rate!r}")
        return cls(_int(obj, "partitions", what, default=0), _int(obj, "leaders", what, default=0),
                   float(rate), _int(obj, "bytes", what, default=0))  # fmt: skip


# A load figure is written again once it moved by more than this share of itself and this
# floor ((msgs/s, bytes)): an idle cluster's decaying rates and a busy one's jitter are not.
LOAD_STEP = 0.2
LOAD_FLOOR = (5.0, 1 << 20)


def _moved(old: float, new: float, floor: float) -> bool:
    return abs(new - old) > max(floor, LOAD_STEP * abs(old))


@dataclass(frozen=True)
class NodeInfo:
    """A live nsqd as it registers itself under ``nodes/<id>``. ``ends`` maps
    ``"<topic>/<partition>"`` to ``(leader_epoch, log end offset)`` for every partition the
    node holds (the leader epoch of its last record batch). ``lagging`` maps a partition
    the node leads to ``(leader_epoch, followers)``: the replicas that have not kept up
    with it (silent, unconnected or not acknowledging) for its timeout; ``caught_up`` the
    same way, the catch-up members that have acknowledged everything it has committed,
    which it waits for from then on as for ISR members (so one may join the ISR).
    ``failing`` maps a partition the node leads to the leader_epoch in which it cannot
    write it (its disk is full or failing): the coordinator hands the leadership to another
    ISR member. ``loads`` maps every partition the node holds to ``(msgs_per_sec, bytes)``:
    how fast its log grows (smoothed) and the bytes it keeps, what the rebalancer weighs.
    ``secure``: its links to the other daemons are mutual TLS (``--cluster-tls-*``).
    ``incarnation``: a random token of this start of the process, which its replication
    HELLOs carry (a leader accepts a follower's link only from that incarnation; nothing
    outside etcd shows it).
    Not hashable."""

    id: str
    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    rpc_address: str
    version: str
    started_ns: int
    load: Load = field(default_factory=Load)
    ends: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    lagging: Mapping[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)
    caught_up: Mapping[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)
    failing: Mapping[str, int] = field(default_factory=dict)
    loads: Mapping[str, tuple[float, int]] = field(default_factory=dict)
    secure: bool = False
    incarnation: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "ends", MappingProxyType(dict(self.ends)))
        object.__setattr__(self, "loads", MappingProxyType(dict(self.loads)))
        object.__setattr__(self, "failing", MappingProxyType(dict(self.failing)))
        object.__setattr__(self, "lagging", MappingProxyType(dict(self.lagging)))
        object.__setattr__(self, "caught_up", MappingProxyType(dict(self.caught_up)))

    def lagging_in(self, topic: str, partition: int, leader_epoch: int) -> tuple[str, ...]:
        """The followers this node, leading in ``leader_epoch``, reports lagging."""
        found = self.lagging.get(partition_name(topic, partition))
        return found[1] if found is not None and found[0] == leader_epoch else ()

    def caught_up_in(self, topic: str, partition: int, leader_epoch: int) -> tuple[str, ...]:
        """The catch-up members this node, leading in ``leader_epoch``, reports caught up."""
        found = self.caught_up.get(partition_name(topic, partition))
        return found[1] if found is not None and found[0] == leader_epoch else ()

    def failing_in(self, topic: str, partition: int, leader_epoch: int) -> bool:
        """Whether this node, leading in ``leader_epoch``, reports it cannot write there."""
        return self.failing.get(partition_name(topic, partition)) == leader_epoch

    def end(self, topic: str, partition: int) -> tuple[int, int] | None:
        """The ``(leader_epoch, end)`` this node reports for a partition, if any."""
        return self.ends.get(partition_name(topic, partition))

    def without_load(self) -> NodeInfo:
        """This report less its load figures (rates and bytes, which move all the time)."""
        return replace(self, load=Load(self.load.partitions, self.load.leaders), loads={})

    def shape(self) -> NodeInfo:
        """This report less its load figures and its partitions' end offsets (their leader
        epochs kept): what must be in etcd as soon as it changes (roles, epochs, lagging,
        caught-up and failing partitions, addresses)."""
        ends = {name: (epoch, 0) for name, (epoch, _end) in self.ends.items()}
        return replace(self.without_load(), ends=ends)

    def load_moved(self, since: NodeInfo) -> bool:
        """Whether a load figure moved from ``since``'s by more than ``LOAD_STEP`` of it and
        ``LOAD_FLOOR`` (a rate, in msgs/s, or a size, in bytes), or a partition's appeared
        or went: worth writing again (the rebalancer weighs loads over minutes)."""
        if self.loads.keys() != since.loads.keys():
            return True
        pairs = [(since.loads[k], v) for k, v in self.loads.items()]
        pairs.append(((since.load.msgs_per_sec, since.load.bytes),
                      (self.load.msgs_per_sec, self.load.bytes)))  # fmt: skip
        rate_floor, size_floor = LOAD_FLOOR
        return any(
            _moved(old_rate, new_rate, rate_floor) or _moved(old_size, new_size, size_floor)
            for (old_rate, old_size), (new_rate, new_size) in pairs
        )

    def to_json(self) -> bytes:
        return _dump({
            "id": self.id, "hostname": self.hostname,
            "broadcast_address": self.broadcast_address, "tcp_port": self.tcp_port,
            "http_port": self.http_port, "rpc_address": self.rpc_address,
            "version": self.version, "started_ns": self.started_ns, "load": self.load.to_dict(),
            "ends": {k: [le, end] for k, (le, end) in sorted(self.ends.items())},
            **_node_lists("lagging", self.lagging), **_node_lists("caught_up", self.caught_up),
            **({"failing": dict(sorted(self.failing.items()))} if self.failing else {}),
            **({"loads": {k: [rate, size] for k, (rate, size) in sorted(self.loads.items())}}
               if self.loads else {}),
            **({"secure": True} if self.secure else {}),
            **({"incarnation": self.incarnation} if self.incarnation else {}),
        })  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes | str) -> NodeInfo:
        what = "NodeInfo"
        obj = _load(data, what)
        ends = obj.get("ends", {})
        if not isinstance(ends, dict):
            raise ValueError(f"{what}: field 'ends' must be an object, got {ends!r}")
        parsed: dict[str, tuple[int, int]] = {}
        for name, pair in ends.items():
            if "/" not in name or not _pair_ok(pair):
                raise ValueError(f"{what}: field 'ends' entry {name!r}: {pair!r} is not "
                                 "'<topic>/<p>': [leader_epoch >= 0, end >= 0]")  # fmt: skip
            parsed[name] = (pair[0], pair[1])
        return cls(
            lagging=_lagging(obj.get("lagging", {}), what, "lagging"),
            caught_up=_lagging(obj.get("caught_up", {}), what, "caught_up"),
            failing=_failing(obj.get("failing", {}), what),
            loads=_loads(obj.get("loads", {}), what),
            id=_str(obj, "id", what), hostname=_str(obj, "hostname", what, empty=True),
            broadcast_address=_str(obj, "broadcast_address", what),
            tcp_port=_int(obj, "tcp_port", what), http_port=_int(obj, "http_port", what),
            rpc_address=_str(obj, "rpc_address", what), version=_str(obj, "version", what, empty=True),
            started_ns=_int(obj, "started_ns", what, default=0),
            load=Load.from_dict(obj.get("load", {}), f"{what}: field 'load'"), ends=parsed,
            secure=obj.get("secure") is True,
            incarnation=_str({"incarnation": obj.get("incarnation", "")}, "incarnation", what,
                             empty=True),
        )  # fmt: skip


def _node_lists(name: str, lists: Mapping[str, tuple[int, tuple[str, ...]]]) -> dict[str, Any]:
    """``{name: {"<topic>/<p>": [leader_epoch, [node, ...]]}}``, or {} when empty."""
    if not lists:
        return {}
    return {name: {k: [le, list(nodes)] for k, (le, nodes) in sorted(lists.items())}}


def _loads(raw: Any, what: str) -> dict[str, tuple[float, int]]:
    """``loads`` of a NodeInfo, checked: ``{"<topic>/<p>": [msgs_per_sec >= 0, bytes >= 0]}``."""
    if not isinstance(raw, dict):
        raise ValueError(f"{what}: field 'loads' must be an object, got {raw!r}")
    parsed: dict[str, tuple[float, int]] = {}
    for key, pair in raw.items():
        ok = isinstance(pair, list) and len(pair) == 2 and "/" in key
        rate, size = pair if ok else (None, None)
        if (not ok or isinstance(rate, bool) or not isinstance(rate, int | float)
                or not rate >= 0 or isinstance(size, bool) or not isinstance(size, int)
                or size < 0):  # fmt: skip
            raise ValueError(f"{what}: field 'loads' entry {key!r}: {pair!r} is not "
                             "'<topic>/<p>': [msgs_per_sec >= 0, bytes >= 0]")  # fmt: skip
        parsed[key] = (float(rate), size)
    return parsed


def _failing(raw: Any, what: str) -> dict[str, int]:
    """``failing`` of a NodeInfo, checked: ``{"<topic>/<p>": leader_epoch}``."""
    if not isinstance(raw, dict):
        raise ValueError(f"{what}: field 'failing' must be an object, got {raw!r}")
    for key, epoch in raw.items():
        if "/" not in key or isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"{what}: field 'failing' entry {key!r}: {epoch!r} is not "
                             "'<topic>/<p>': leader_epoch >= 0")  # fmt: skip
    return dict(raw)


def _lagging(raw: Any, what: str, name: str) -> dict[str, tuple[int, tuple[str, ...]]]:
    """``lagging`` or ``caught_up`` of a NodeInfo, checked."""
    if not isinstance(raw, dict):
        raise ValueError(f"{what}: field '{name}' must be an object, got {raw!r}")
    out: dict[str, tuple[int, tuple[str, ...]]] = {}
    for key, entry in raw.items():
        ok = (
            "/" in key and isinstance(entry, list) and len(entry) == 2
            and isinstance(entry[0], int) and not isinstance(entry[0], bool) and entry[0] >= 0
            and isinstance(entry[1], list) and all(isinstance(n, str) and n for n in entry[1])
        )  # fmt: skip
        if not ok:
            raise ValueError(f"{what}: field '{name}' entry {key!r}: {entry!r} is not "
                             "'<topic>/<p>': [leader_epoch >= 0, [node id, ...]]")  # fmt: skip
        out[key] = (entry[0], tuple(entry[1]))
    return out


def _pair_ok(pair: Any) -> bool:
    return (isinstance(pair, list) and len(pair) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pair))  # fmt: skip


@dataclass(frozen=True)
class LookupdInfo:
    """A live nsqlookupd under ``lookupds/<id>``."""

    id: str
    broadcast_address: str
    tcp_port: int
    http_port: int

    def to_json(self) -> bytes:
        return _dump({"id": self.id, "broadcast_address": self.broadcast_address,
                      "tcp_port": self.tcp_port, "http_port": self.http_port})  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes | str) -> LookupdInfo:
        what = "LookupdInfo"
        obj = _load(data, what)
        return cls(_str(obj, "id", what), _str(obj, "broadcast_address", what),
                   _int(obj, "tcp_port", what), _int(obj, "http_port", what))  # fmt: skip


@dataclass(frozen=True)
class CoordinatorInfo:
    """The holder of the coordinator lock: a lookupd id, its HTTP address, and in a secure
    cluster the address where the other daemons call it over mutual TLS (its
    ``--rpc-address``; "" otherwise, or from an older version)."""

    id: str
    http_address: str
    rpc_address: str = ""

    def to_json(self) -> bytes:
        return _dump({"id": self.id, "http_address": self.http_address,
                      **({"rpc_address": self.rpc_address} if self.rpc_address else {})})  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes | str) -> CoordinatorInfo:
        what = "CoordinatorInfo"
        obj = _load(data, what)
        rpc = _str({"rpc_address": obj.get("rpc_address", "")}, "rpc_address", what, empty=True)
        return cls(_str(obj, "id", what), _str(obj, "http_address", what), rpc)


@dataclass(frozen=True)
class TopicMeta:
    """A topic's settings (Youzan's TopicMetaInfo): partitions, replicas per partition,
    ``syncdisk`` (fsync every N messages, 0 = nsqd's default), ``retention_days`` (0 = nsqd's
    default), ``ordered`` (orderedmulti), ``ext`` (extend), ``multipart``."""

    partition_num: int
    replicator: int
    syncdisk: int = 0
    retention_days: int = 0
    ordered: bool = False
    ext: bool = False
    multipart: bool = False
    created_ns: int = 0

    @property
    def allow_multi(self) -> bool:
        """Youzan's AllowMulti: a node may hold replicas of several partitions of the topic,
        so partition_num * replicator may exceed the live nodes."""
        return self.multipart or self.ordered

    def to_json(self) -> bytes:
        return _dump({
            "partition_num": self.partition_num, "replicator": self.replicator,
            "syncdisk": self.syncdisk, "retention_days": self.retention_days,
            "ordered": self.ordered, "ext": self.ext, "multipart": self.multipart,
            "created_ns": self.created_ns,
        })  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes | str) -> TopicMeta:
        what = "TopicMeta"
        obj = _load(data, what)
        return cls(
            partition_num=_int(obj, "partition_num", what, lo=1),
            replicator=_int(obj, "replicator", what, lo=1),
            syncdisk=_int(obj, "syncdisk", what, default=0),
            retention_days=_int(obj, "retention_days", what, default=0),
            ordered=_bool(obj, "ordered", what), ext=_bool(obj, "ext", what),
            multipart=_bool(obj, "multipart", what),
            created_ns=_int(obj, "created_ns", what, default=0),
        )  # fmt: skip


@dataclass(frozen=True)
class Move:
    """A planned move of one partition (``nsqpy.cluster.decisions`` carries it out step by
    step): the replica on ``source`` goes to ``target`` (which copies, joins the ISR, takes
    the lead if ``source`` led, then ``source`` leaves), or with ``leader_only`` the
    leadership alone goes from ``source`` to ``target``, an ISR member."""

    source: str
    target: str
    leader_only: bool = False

    def __post_init__(self) -> None:
        if self.source == self.target:
            raise ValueError(f"Move: from and to are the same node {self.source!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target, "leader": self.leader_only}

    @classmethod
    def from_dict(cls, obj: Any, what: str) -> Move:
        if not isinstance(obj, dict):
            raise ValueError(f"{what}: field 'move' must be an object, got {obj!r}")
        return cls(_str(obj, "from", what), _str(obj, "to", what), _bool(obj, "leader", what))


@dataclass(frozen=True)
class Replicas:
    """Who holds one partition. ``isr`` (leader included) has every committed record;
    ``catchup`` members are copying. ``epoch`` grows on every change of the key;
    ``leader_epoch`` grows when the leader changes, or when the same node takes the lead
    again after a restart (``Member``), and is written into record batches.
    Construction checks the shape: leader in isr, no node twice, epochs >= 0."""

    leader: str
    isr: tuple[str, ...]
    catchup: tuple[str, ...] = ()
    epoch: int = 1
    leader_epoch: int = 1
    move: Move | None = None
    # Derived once (the coordinator's rounds read them for every partition, many times):
    # every node holding the partition, isr then catchup; the ISR members but the leader.
    holders: tuple[str, ...] = field(init=False, repr=False, compare=False)
    followers: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "isr", tuple(self.isr))
        object.__setattr__(self, "catchup", tuple(self.catchup))
        holders = self.isr + self.catchup
        object.__setattr__(self, "holders", holders)
        object.__setattr__(self, "followers", tuple(n for n in self.isr if n != self.leader))
        if self.leader not in self.isr:
            raise ValueError(f"Replicas: leader {self.leader!r} is not in isr {list(self.isr)}")
        if len(set(holders)) != len(holders):
            raise ValueError(f"Replicas: a node appears twice in isr {list(self.isr)} "
                             f"+ catchup {list(self.catchup)}")  # fmt: skip
        if self.epoch < 0 or self.leader_epoch < 0:
            raise ValueError(f"Replicas: epochs must be >= 0, got epoch={self.epoch} "
                             f"leader_epoch={self.leader_epoch}")  # fmt: skip

    def to_json(self) -> bytes:
        move = {"move": self.move.to_dict()} if self.move is not None else {}
        return _dump({"leader": self.leader, "isr": list(self.isr), "catchup": list(self.catchup),
                      "epoch": self.epoch, "leader_epoch": self.leader_epoch, **move})  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes | str) -> Replicas:
        what = "Replicas"
        obj = _load(data, what)
        move = obj.get("move")
        return cls(
            leader=_str(obj, "leader", what), isr=_ids(obj, "isr", what),
            catchup=_ids(obj, "catchup", what) if "catchup" in obj else (),
            epoch=_int(obj, "epoch", what), leader_epoch=_int(obj, "leader_epoch", what),
            move=Move.from_dict(move, what) if move is not None else None,
        )  # fmt: skip


@dataclass(frozen=True)
class Versioned(Generic[T]):
    """A value read from etcd with the key's ``mod_revision`` (what a guarded txn compares)."""

    value: T
    mod_revision: int


@dataclass(frozen=True)
class Snapshot:
    """One consistent view of a cluster: the live nodes (those with a ``nodes/`` key), the
    topic metas, every partition's replicas keyed ``(topic, partition)``, and the etcd
    revision the view is at. May be stale; the decisions only ever write by guarded txn."""

    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    topics: Mapping[str, TopicMeta] = field(default_factory=dict)
    replicas: Mapping[tuple[str, int], Versioned[Replicas]] = field(default_factory=dict)
    revision: int = 0
    node_revisions: Mapping[str, int] = field(default_factory=dict)  # node key mod_revision
    removing: frozenset[str] = frozenset()  # nodes being drained (``removing/<id>`` keys)

    @property
    def moving(self) -> list[tuple[str, int]]:
        """The partitions with a move under way."""
        return sorted(k for k, v in self.replicas.items() if v.value.move is not None)

    def partition_load(self, topic: str, partition: int) -> tuple[float, int]:
        """``(msgs_per_sec, bytes)`` of a partition: the most any live holder reports (a new
        replica still catching up, or a leader just taken over, reports less)."""
        name = partition_name(topic, partition)
        found = [load for n in self.nodes.values() if (load := n.loads.get(name)) is not None]
        return (max(r for r, _ in found), max(b for _, b in found)) if found else (0.0, 0)

    def partitions(self, topic: str) -> list[tuple[int, Versioned[Replicas]]]:
        """The topic's partitions that have a replicas key, by partition number."""
        return sorted(((p, v) for (t, p), v in self.replicas.items() if t == topic), key=_first)

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """``(leaders, replicas)`` per node id over every partition in the snapshot (each
        node named by a replicas key, live or not, has an entry)."""
        leaders: dict[str, int] = {}
        held: dict[str, int] = {}
        for versioned in self.replicas.values():
            r = versioned.value
            leaders[r.leader] = leaders.get(r.leader, 0) + 1
            for node in r.holders:
                held[node] = held.get(node, 0) + 1
                leaders.setdefault(node, 0)
        return leaders, held


def _first(item: tuple[int, Versioned[Replicas]]) -> int:
    return item[0]


@dataclass(frozen=True)
class Change:
    """One decision: write ``new`` to ``topics/<topic>/<partition>/replicas`` only if the
    key's mod_revision is still ``expected_revision`` and each node key of ``guards``
    (node id, mod_revision) is still the one the decision read (a decision resting on a
    node's report is void once the node reported again). ``old``: the value it replaces,
    as the decision read it (what the coordinator's counts compare)."""

    topic: str
    partition: int
    expected_revision: int
    new: Replicas
    reason: str
    guards: tuple[tuple[str, int], ...] = ()
    old: Replicas | None = field(default=None, compare=False)


HEALTH_KINDS = ("offline", "under_replicated", "catching_up", "moving")


def partition_health(snapshot: Snapshot) -> dict[str, list[tuple[str, int]]]:
    """The partitions (of topics as their metas count them) in each of ``HEALTH_KINDS``:
    offline (the leader is not live: nothing published or delivered), under-replicated
    (an ISR smaller than the topic's replicas, or with a member that is not live),
    catching up (a replica copying the log), moving (a move under way); sorted."""
    found: dict[str, list[tuple[str, int]]] = {kind: [] for kind in HEALTH_KINDS}
    live = snapshot.nodes
    for (topic, number), versioned in sorted(snapshot.replicas.items()):
        meta = snapshot.topics.get(topic)
        if meta is None or number >= meta.partition_num:
            continue  # (being created, grown or deleted)
        r = versioned.value
        if r.leader not in live:
            found["offline"].append((topic, number))
        if len(r.isr) < meta.replicator or any(n not in live for n in r.isr):
            found["under_replicated"].append((topic, number))
        if r.catchup:
            found["catching_up"].append((topic, number))
        if r.move is not None:
            found["moving"].append((topic, number))
    return found
