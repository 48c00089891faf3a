"""``Etcd`` when etcd fails under it, with real members killed, paused and restarted:
leases kept alive across a leader kill and lost when nobody refreshes them, watches that
resume without losing an event, ``Compacted``, and ``EtcdUnavailable`` within the deadline
when every member is down, then recovery."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from nsqpy.cluster.etcd import Compacted, Etcd, EtcdUnavailable, Event
from nsqpy.testing import eventually
from nsqpy.testing.etcd import IN_MEMORY_ENV, SHM, EtcdCluster, shm_has_room


async def test_a_lease_nobody_refreshes_expires_and_takes_its_key(
    etcd_single: EtcdCluster, etcd: Etcd, prefix: str
) -> None:
    owner = await Etcd.connect(etcd_single.endpoints)
    lease = await owner.lease(1)
    key = prefix + "nodes/gone"
    await owner.put(key, b"node", lease=lease)
    await eventually(lambda: lease.expires > asyncio.get_running_loop().time() + 0.5,
                     what="one refresh")  # fmt: skip
    await owner.close()  # the owner's keep-alive stops, as when its process dies
    assert await etcd.get(key) is not None
    loop = asyncio.get_running_loop()
    stopped = loop.time()
    await eventually(lambda: _absent(etcd, key), timeout=10, what="the key deleted")
    assert loop.time() - stopped < lease.ttl + 3  # etcd checks expiry every 500 ms


async def _absent(etcd: Etcd, key: str) -> bool:
    return await etcd.get(key) is None


async def test_a_lease_stays_alive_across_a_leader_kill(own_trio: EtcdCluster) -> None:
    etcd = await Etcd.connect(own_trio.endpoints)
    try:
        lease = await etcd.lease(3)  # (2 s left no slack for an election on a busy machine)
        await etcd.put("/lease/node", b"n", lease=lease)
        own_trio.kill(own_trio.wait_leader())
        loop = asyncio.get_running_loop()
        killed = loop.time()
        # writes go on within the deadline, through the other members
        await etcd.put("/lease/after-kill", b"x")
        failover = loop.time() - killed
        # 3 TTLs later: still refreshed, key still there
        await eventually(lambda: loop.time() > killed + 3 * lease.ttl, timeout=10,
                         interval=0.2, what="3 TTLs")  # fmt: skip
        assert not lease.lost.is_set()
        got = await etcd.get("/lease/node")
        assert got is not None and got.lease == lease.id
        assert failover < etcd.timeout
    finally:
        await etcd.close()


async def test_a_lease_is_lost_when_no_member_answers_for_its_ttl(
    own_single: EtcdCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "nsqpy.cluster.etcd")
    etcd = await Etcd.connect(own_single.endpoints, timeout=1.0)
    try:
        lease = await etcd.lease(2)
        own_single.pause(0)
        loop = asyncio.get_running_loop()
        paused = loop.time()
        await asyncio.wait_for(lease.lost.wait(), lease.ttl + 2)
        assert loop.time() - paused <= lease.ttl + 0.5
        own_single.resume(0)
    finally:
        await etcd.close()
    lines = [r.getMessage() for r in caplog.records]
    assert sum("refresh failing" in line for line in lines) == 1  # one line per state change
    assert sum("lost" in line for line in lines) == 1


async def test_a_watch_resumes_after_each_member_it_could_use_dies_losing_nothing(
    own_trio: EtcdCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "nsqpy.cluster.etcd")
    watcher = await Etcd.connect(own_trio.endpoints)
    writer = await Etcd.connect(own_trio.endpoints)
    seen: list[Event] = []

    async def follow(start: int) -> None:
        async for batch in watcher.watch_prefix("/w/", start):
            seen.extend(batch)

    try:
        _, revision = await writer.get_prefix("/w/")
        task = asyncio.create_task(follow(revision + 1))
        written = []
        # whichever member holds the watch stream, it is killed once while keys are written
        for member in range(3):
            own_trio.kill(member)
            for n in range(10):
                key = f"/w/{member}/{n}"
                await writer.put(key, str(n).encode())
                written.append(key)
            own_trio.restart(member)
            await asyncio.to_thread(own_trio.wait_healthy)
        await eventually(lambda: len(seen) >= len(written), timeout=15,
                         what=f"{len(written)} events")  # fmt: skip
        task.cancel()
    finally:
        await watcher.close()
        await writer.close()
    assert [e.kv.key for e in seen] == written  # every one, once, in order
    revisions = [e.kv.mod_revision for e in seen]
    assert revisions == sorted(set(revisions))
    assert any("watch /w/ lost" in r.getMessage() for r in caplog.records)
    assert any("watch /w/ resumed" in r.getMessage() for r in caplog.records)


async def test_a_watch_from_a_compacted_revision_raises_compacted(
    own_single: EtcdCluster,
) -> None:
    etcd = await Etcd.connect(own_single.endpoints)
    try:
        first = await etcd.put("/c/a", b"1")
        last = await etcd.put("/c/a", b"2")
        await etcd.compact(last)
        with pytest.raises(Compacted) as raised:
            async for _ in etcd.watch_prefix("/c/", first):
                pass
        assert raised.value.compact_revision == last
        # from the compaction revision on, the watch works
        seen: list[Event] = []

        async def follow() -> None:
            async for batch in etcd.watch_prefix("/c/", last):
                seen.extend(batch)

        task = asyncio.create_task(follow())
        await eventually(lambda: seen, timeout=5, what="the event at the compaction revision")
        task.cancel()
        assert [e.kv.value for e in seen] == [b"2"]
    finally:
        await etcd.close()


async def test_every_member_down_is_unavailable_within_the_deadline_then_recovers(
    own_trio: EtcdCluster,
) -> None:
    etcd = await Etcd.connect(own_trio.endpoints, timeout=1.0)
    try:
        await etcd.put("/u/k", b"1")
        for i in range(3):
            own_trio.kill(i)
        loop = asyncio.get_running_loop()
        for call in (
            lambda: etcd.get("/u/k"),
            lambda: etcd.put("/u/k", b"2"),
            lambda: etcd.create("/u/new", b"1"),
            lambda: etcd.lease(5),
        ):
            started = loop.time()
            with pytest.raises(EtcdUnavailable):
                await call()
            assert loop.time() - started < 1.5
        for i in range(3):
            own_trio.restart(i)
        got = await eventually(lambda: _get_or_none(etcd, "/u/k"), timeout=15,
                               what="a read after the restart")  # fmt: skip
        assert got == b"1"
        assert await etcd.create("/u/new", b"1") is True
    finally:
        await etcd.close()


async def _get_or_none(etcd: Etcd, key: str) -> bytes | None:
    try:
        kv = await etcd.get(key)
    except EtcdUnavailable:
        return None
    return None if kv is None else kv.value


def test_the_cluster_helper_pauses_stops_and_restarts_members(own_trio: EtcdCluster) -> None:
    assert len(own_trio.endpoints) == 3 and len(set(own_trio.endpoints)) == 3
    leader = own_trio.wait_leader()
    own_trio.pause(leader)
    assert not own_trio.healthy(leader)
    new = own_trio.wait_leader(timeout=10)
    assert new != leader
    own_trio.resume(leader)
    own_trio.stop(new)
    assert not own_trio.running(new)
    own_trio.restart(new)
    own_trio.wait_healthy(timeout=10)
    assert own_trio.running(new) and own_trio.wait_leader() in range(3)
    own_trio.close()
    assert not any(own_trio.running(i) for i in range(3))


@pytest.mark.skipif(
    os.environ.get(IN_MEMORY_ENV) != "1" or not shm_has_room(), reason="no room on /dev/shm"
)
def test_the_suites_members_keep_their_data_on_dev_shm_across_a_kill(
    own_single: EtcdCluster, tmp_path: Path
) -> None:
    """The suite's members have their data on /dev/shm (``IN_MEMORY_ENV``, set by the
    suite's conftest): no fsync of theirs waits behind what other tests write to the disk.
    Their logs stay in the test's folder; a member killed and started again has its keys;
    ``close()`` removes the data."""
    data = own_single.data_dir(0)
    assert data.parent.parent == SHM and data.is_dir()
    assert own_single.log_path(0).parent == tmp_path / "etcd" and own_single.log_path(0).exists()
    assert not (tmp_path / "etcd" / own_single.name(0)).exists()
    own_single.put("kept", b"yes")
    own_single.kill(0)
    own_single.restart(0)
    found = own_single.get("kept")
    assert found is not None and found[0] == b"yes"
    own_single.close()
    assert not data.exists()
