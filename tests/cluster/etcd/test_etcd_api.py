"""Every call of ``nsqpy.cluster.etcd.Etcd`` against a real etcd member: keys, prefixes,
conditional writes (create, replace, multi-key txn), leases, and watches."""

from __future__ import annotations

import asyncio
import gc

import pytest
from grpc.aio._call import StreamStreamCall  # type: ignore[import-untyped]

from nsqpy.cluster.etcd import KV, Compare, DeleteOp, Etcd, EtcdUnavailable, Event, PutOp
from nsqpy.testing import eventually, free_ports


async def test_put_then_get_returns_the_value_and_its_revisions(etcd: Etcd, prefix: str) -> None:
    key = prefix + "nodes/n1é"  # keys are str, sent as UTF-8
    revision = await etcd.put(key, b"\x00\xffbytes")
    got = await etcd.get(key)
    assert got == KV(key, b"\x00\xffbytes", revision, revision, lease=0, version=1)
    again = await etcd.put(key, b"v2")
    assert again > revision
    got2 = await etcd.get(key)
    assert got2 is not None
    assert (got2.value, got2.mod_revision, got2.create_revision, got2.version) == (
        b"v2", again, revision, 2,
    )  # fmt: skip


async def test_get_of_a_missing_key_is_none(etcd: Etcd, prefix: str) -> None:
    assert await etcd.get(prefix + "absent") is None


async def test_get_prefix_lists_keys_in_order_with_the_read_revision(
    etcd: Etcd, prefix: str
) -> None:
    for name in ("b", "a", "c/d"):
        await etcd.put(prefix + name, name.encode())
    last = await etcd.put(prefix.rstrip("/") + "-sibling", b"not under the prefix")
    kvs, revision = await etcd.get_prefix(prefix)
    assert [kv.key for kv in kvs] == [prefix + "a", prefix + "b", prefix + "c/d"]
    assert [kv.value for kv in kvs] == [b"a", b"b", b"c/d"]
    assert revision >= last


async def test_delete_and_delete_prefix_say_what_they_removed(etcd: Etcd, prefix: str) -> None:
    for name in ("x", "t/1", "t/2"):
        await etcd.put(prefix + name, b"1")
    assert await etcd.delete(prefix + "x") is True
    assert await etcd.delete(prefix + "x") is False
    assert await etcd.delete_prefix(prefix + "t/") == 2
    assert await etcd.get_prefix(prefix) == ([], (await etcd.get_prefix(prefix))[1])


async def test_create_writes_only_an_absent_key(etcd: Etcd, prefix: str) -> None:
    key = prefix + "coordinator"
    assert await etcd.create(key, b"first") is True
    assert await etcd.create(key, b"second") is False
    got = await etcd.get(key)
    assert got is not None and got.value == b"first"


async def test_replace_writes_only_over_the_revision_it_read(etcd: Etcd, prefix: str) -> None:
    key = prefix + "topics/t/0/replicas"
    first = await etcd.put(key, b"epoch 1")
    assert await etcd.replace(key, b"epoch 2", first) is True
    assert await etcd.replace(key, b"stale writer", first) is False
    got = await etcd.get(key)
    assert got is not None and got.value == b"epoch 2"
    # etcd's mod_revision of an absent key is 0: replacing "revision 0" creates it
    assert await etcd.replace(prefix + "never-written", b"x", 0) is True
    assert await etcd.replace(prefix + "never-written", b"y", 0) is False


async def test_txn_writes_several_keys_only_if_the_meta_is_absent(etcd: Etcd, prefix: str) -> None:
    meta, r0, r1 = (
        prefix + "topics/t/meta",
        prefix + "topics/t/0/replicas",
        prefix + "topics/t/1/replicas",
    )
    ops = [PutOp(meta, b"meta"), PutOp(r0, b"r0"), PutOp(r1, b"r1")]
    assert await etcd.txn([Compare.absent(meta)], ops, [PutOp(prefix + "lost", b"1")]) is True
    kvs, _ = await etcd.get_prefix(prefix + "topics/t/")
    assert {kv.key for kv in kvs} == {meta, r0, r1}
    assert len({kv.mod_revision for kv in kvs}) == 1  # one revision: atomic
    assert (
        await etcd.txn(
            [Compare.absent(meta)], [PutOp(r0, b"other")], [PutOp(prefix + "lost", b"1")]
        )
        is False
    )
    assert (await etcd.get(prefix + "lost")) is not None  # the failure branch ran
    got = await etcd.get(r0)
    assert got is not None and got.value == b"r0"
    assert await etcd.txn([Compare.present(meta)], [DeleteOp(prefix + "topics/t/", prefix=True)])
    assert (await etcd.get_prefix(prefix + "topics/t/"))[0] == []


async def test_a_key_put_with_a_lease_carries_it_and_goes_with_its_revoke(
    etcd: Etcd, prefix: str
) -> None:
    lease = await etcd.lease(5)
    assert lease.ttl >= 5 and lease.id > 0
    key = prefix + "nodes/n1"
    await etcd.put(key, b"node", lease=lease)
    assert await etcd.create(prefix + "lookupds/l1", b"l", lease=lease.id)
    got = await etcd.get(key)
    assert got is not None and got.lease == lease.id
    await lease.revoke()
    assert await etcd.get(key) is None
    assert await etcd.get(prefix + "lookupds/l1") is None
    assert not lease.lost.is_set()


async def test_watch_prefix_yields_batches_from_the_revision_asked(etcd: Etcd, prefix: str) -> None:
    first = await etcd.put(prefix + "a", b"1")  # before the watch starts, seen by it
    watch = etcd.watch_prefix(prefix, first)
    seen: list[Event] = []

    async def follow() -> None:
        async for batch in watch:
            assert batch
            seen.extend(batch)

    task = asyncio.create_task(follow())
    try:
        await etcd.txn([], [PutOp(prefix + "b", b"2"), PutOp(prefix + "c", b"3")])
        await etcd.delete(prefix + "a")
        await etcd.put(prefix.rstrip("/") + "x/other", b"outside the prefix")
        await eventually(lambda: len(seen) >= 4, timeout=5, what="4 events")
    finally:
        task.cancel()
    assert [(e.kind, e.kv.key.removeprefix(prefix), e.kv.value) for e in seen] == [
        ("put", "a", b"1"), ("put", "b", b"2"), ("put", "c", b"3"), ("delete", "a", b""),
    ]  # fmt: skip
    assert seen[1].kv.mod_revision == seen[2].kv.mod_revision  # one txn, one revision


async def test_a_watch_far_behind_gets_history_larger_than_a_grpc_message(
    etcd: Etcd, prefix: str
) -> None:
    """A watcher that starts (or falls) far behind is sent the history it missed in one
    response of up to a thousand revisions: here 80 values of 100 kB, 8 MB, twice what
    gRPC takes in one message by default. Every event arrives, in order (etcd splits the
    response into fragments, which the watch joins again)."""
    first = await etcd.put(prefix + "start", b"")
    value = b"v" * 100_000
    for i in range(80):
        await etcd.put(prefix + f"big{i:02d}", value)
    seen: list[Event] = []

    async def follow() -> None:
        async for batch in etcd.watch_prefix(prefix, first + 1):
            seen.extend(batch)

    task = asyncio.create_task(follow())
    try:
        await eventually(lambda: len(seen) >= 80, timeout=10, what="80 events")
    finally:
        task.cancel()
    assert [e.kv.key.removeprefix(prefix) for e in seen] == [f"big{i:02d}" for i in range(80)]
    assert all(e.kv.value == value for e in seen)


async def test_a_read_of_more_than_a_grpc_message_gets_every_key(etcd: Etcd, prefix: str) -> None:
    """A view's first read takes every key of its cluster at once: 60 values of 100 kB here,
    6 MB, more than gRPC takes in one message by default."""
    value = b"r" * 100_000
    for i in range(60):
        await etcd.put(prefix + f"k{i:02d}", value)
    kvs, _revision = await etcd.get_prefix(prefix)
    assert [kv.key.removeprefix(prefix) for kv in kvs] == [f"k{i:02d}" for i in range(60)]


async def test_watch_from_now_sees_only_later_changes(etcd: Etcd, prefix: str) -> None:
    await etcd.put(prefix + "old", b"0")
    seen: list[Event] = []

    async def follow() -> None:
        async for batch in etcd.watch_prefix(prefix):
            seen.extend(batch)

    task = asyncio.create_task(follow())
    try:
        # the watch is created asynchronously: keep writing until it reports a write

        async def put_then_seen() -> list[Event]:
            await etcd.put(prefix + "new", b"1")
            return seen

        await eventually(put_then_seen, timeout=5, interval=0.05, what="an event")
    finally:
        task.cancel()
    assert {e.kv.key for e in seen} == {prefix + "new"}


async def test_close_ends_watches_and_refuses_calls(etcd_single, prefix: str) -> None:
    client = await Etcd.connect(etcd_single.endpoints)
    ended = asyncio.Event()

    async def follow() -> None:
        async for _ in client.watch_prefix(prefix):
            pass
        ended.set()

    task = asyncio.create_task(follow())
    await asyncio.sleep(0)
    await client.close()
    await asyncio.wait_for(ended.wait(), 5)
    await task
    with pytest.raises(EtcdUnavailable, match="closed"):
        await client.get(prefix + "x")


async def test_connect_to_nothing_is_unavailable_within_the_timeout() -> None:
    (port,) = free_ports(1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(EtcdUnavailable):
        await Etcd.connect([f"127.0.0.1:{port}"], timeout=1.0)
    assert loop.time() - started < 2.0


def test_endpoints_are_checked() -> None:
    from nsqpy.cluster.etcd import grpc_target, parse_endpoint

    assert parse_endpoint("http://127.0.0.1:2379") == ("127.0.0.1", 2379)
    assert parse_endpoint("[::1]:2379") == ("::1", 2379)
    for bad in ("127.0.0.1", "host:", "host:99999", ":2379"):
        with pytest.raises(ValueError, match="bad etcd endpoint"):
            parse_endpoint(bad)
    assert grpc_target([("127.0.0.1", 1), ("127.0.0.2", 2)]) == "ipv4:127.0.0.1:1,127.0.0.2:2"
    assert grpc_target([("::1", 1)]) == "ipv6:[::1]:1"
    with pytest.raises(ValueError, match="mix"):
        grpc_target([("::1", 1), ("127.0.0.1", 2)])


def keep_alive_calls() -> int:
    """gRPC stream calls reachable in this process (a lease's keep-alives are such)."""
    return sum(isinstance(o, StreamStreamCall) for o in gc.get_objects())


async def test_refreshes_keep_a_lease_alive_and_leave_no_call_behind(
    etcd: Etcd, prefix: str
) -> None:
    """A 1 s lease refreshed for 3 s (about nine keep-alives, each on a stream of its own)
    stays alive with its key, and no keep-alive's call stays reachable afterwards: aetcd's
    own refresh left every one behind, a leak of one a refresh for the life of the
    process (found by ``bench/soak.py``)."""
    gc.collect()
    before = keep_alive_calls()
    lease = await etcd.lease(1)
    await etcd.put(prefix + "kept", b"x", lease=lease)
    await asyncio.sleep(3)
    assert not lease.lost.is_set() and await etcd.get(prefix + "kept") is not None
    gc.collect()
    assert keep_alive_calls() - before <= 1, "(one may be under way)"
    await lease.revoke()
