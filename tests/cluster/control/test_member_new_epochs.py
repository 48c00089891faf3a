"""A node that finds itself leading partitions it already held (its lease lapsed and came
back, or an earlier life) asks etcd for a new leader epoch of each: the asks of a pass go
together, ``TXN_CHUNK`` to a txn, each guarded by its key's revision; one decided meanwhile
by the coordinator fails alone. Against the session's real etcd."""

from __future__ import annotations

from typing import Any

from nsqpy.cluster.etcd import TXN_CHUNK, Etcd
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.member import FOLLOWER, Member, MemberSettings
from nsqpy.cluster.model import Replicas, Snapshot, TopicMeta, Versioned
from nsqpy.testing import eventually

from .test_member_take_up import Host, me

COUNT = 250


class Counting:
    """The etcd client, counting txns."""

    def __init__(self, etcd: Etcd) -> None:
        self.etcd, self.txns = etcd, 0

    async def txn(self, *args: Any, **kwargs: Any) -> bool:
        self.txns += 1
        return await self.etcd.txn(*args, **kwargs)


class View:
    def __init__(self, keys: Keys) -> None:
        self.keys = keys


async def test_the_new_epochs_of_many_partitions_go_in_few_txns(etcd: Etcd, keys: Keys) -> None:
    metas = {"t": TopicMeta(COUNT, 2, multipart=True)}
    replicas = {}
    for p in range(COUNT):
        r = Replicas("n0", ("n0", "n1"), (), epoch=3, leader_epoch=2)
        revision = await etcd.put(keys.replicas("t", p), r.to_json())
        replicas[("t", p)] = Versioned(r, revision)
    raced = Replicas("n1", ("n1", "n0"), (), epoch=4, leader_epoch=3)  # (the coordinator's)
    await etcd.put(keys.replicas("t", 7), raced.to_json())
    host = Host()
    for p in range(COUNT):  # led in epoch 2, then demoted (its lease lapsed)
        host.held[("t", p)] = (FOLLOWER, 2, 0)
    counting = Counting(etcd)
    view: Any = View(keys)
    m = Member(counting, view, me, host, MemberSettings())  # type: ignore[arg-type]
    m._lease = await etcd.lease(10)  # (live)
    try:
        m.apply(Snapshot(nodes={"n0": me()}, topics=metas, replicas=replicas, revision=1))

        async def epochs() -> list[int]:
            out = []
            for p in range(COUNT):
                kv = await etcd.get(keys.replicas("t", p))
                assert kv is not None
                out.append(Replicas.from_json(kv.value).leader_epoch)
            return out

        async def written() -> bool:
            return not m._renewing and (await epochs()).count(3) == COUNT

        await eventually(written, timeout=10)
        got = await epochs()
        assert got[7] == 3 and set(got) == {3}
        kv = await etcd.get(keys.replicas("t", 7))
        assert kv is not None and Replicas.from_json(kv.value) == raced  # (the race lost)
        chunks = -(-COUNT // TXN_CHUNK)
        # a txn per chunk; the chunk with the raced key failed, then each of it alone
        assert counting.txns == chunks + TXN_CHUNK, counting.txns
        assert all(role == FOLLOWER for role, _, _ in host.held.values())  # (until it is told)
    finally:
        await m._lease.revoke()
