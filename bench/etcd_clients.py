"""Which async etcd v3 client cluster mode should use, measured against a real 3-member
etcd (Debian's /usr/bin/etcd on free loopback ports in a temp dir) with members killed.

Usage: .venv/bin/python bench/etcd_clients.py [--rounds 20]

Clients: ``aetcd`` used raw (gRPC's multi-address target, gRPC's default pick_first),
``nsqpy.cluster.etcd.Etcd`` (aetcd + round_robin, deadlines, retries, keep-alive task,
re-watch), and ``etcd-client-py`` (Rust, when installed). Checks, each on a healthy
cluster: kv (are revisions returned), a txn race on mod_revision (two racers, then ten:
exactly one winner per round), a lease with keep-alive across a leader SIGKILL (key still
there after 3 TTLs), a watch from a revision while each member in turn is SIGKILLed and 10
keys are written during its outage (events received; the raw clients are re-watched from
the last revision + 1 when their stream fails), and the failover of puts when the leader is
SIGKILLed (failed ops, longest gap between successful puts). Prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import aetcd  # type: ignore[import-untyped]

from nsqpy.cluster.etcd import Compare, Etcd, PutOp, grpc_target
from nsqpy.testing.etcd import EtcdCluster

OP_TIMEOUT = 5.0


class Unsupported(Exception):
    """The client has no API for this."""


class AetcdRaw:
    """aetcd as it comes: one Client on the multi-address target, no wrapper."""

    name = "aetcd (raw, multi-address, pick_first)"
    resumes_itself = False

    async def open(self, endpoints: list[str]) -> None:
        target = grpc_target([("127.0.0.1", int(e.rpartition(":")[2])) for e in endpoints])
        host, _, port = target.rpartition(":")
        self.c = aetcd.Client(host=host, port=int(port), timeout=OP_TIMEOUT)
        await self.c.connect()

    async def close(self) -> None:
        await self.c.close()

    async def put(self, key: str, value: bytes, lease: Any = None) -> int | None:
        return int((await self.c.put(key.encode(), value, lease=lease)).header.revision)

    async def get(self, key: str) -> tuple[bytes, int | None] | None:
        kv = await self.c.get(key.encode())
        return None if kv is None else (kv.value, kv.mod_revision)

    async def replace(self, key: str, value: bytes, mod_revision: int) -> bool:
        t = self.c.transactions
        ok, _ = await self.c.transaction(
            compare=[t.mod(key.encode()) == mod_revision],
            success=[t.put(key.encode(), value)],
            failure=[],
        )
        return bool(ok)

    async def lease(self, ttl: int) -> Any:
        lease = await self.c.lease(ttl)
        return lease, lease.id

    async def refresh(self, lease: Any) -> None:
        await lease[0].refresh()

    async def watch(self, prefix: str, start: int | None) -> AsyncIterator[tuple[str, int | None]]:
        w = await self.c.watch_prefix(prefix.encode(), start_revision=start)
        async for ev in w:
            yield ev.kv.key.decode(), ev.kv.mod_revision


class Wrapped:
    """nsqpy.cluster.etcd.Etcd: aetcd with round_robin, deadlines, keep-alive, re-watch."""

    name = "nsqpy Etcd (aetcd + round_robin + wrapper)"
    resumes_itself = True

    async def open(self, endpoints: list[str]) -> None:
        self.c = await Etcd.connect(endpoints, timeout=OP_TIMEOUT)

    async def close(self) -> None:
        await self.c.close()

    async def put(self, key: str, value: bytes, lease: Any = None) -> int | None:
        return await self.c.put(key, value, lease=lease)

    async def get(self, key: str) -> tuple[bytes, int | None] | None:
        kv = await self.c.get(key)
        return None if kv is None else (kv.value, kv.mod_revision)

    async def replace(self, key: str, value: bytes, mod_revision: int) -> bool:
        return await self.c.txn([Compare.mod_is(key, mod_revision)], [PutOp(key, value)])

    async def lease(self, ttl: int) -> Any:
        lease = await self.c.lease(ttl)
        return lease, lease.id

    async def refresh(self, lease: Any) -> None:
        if lease[0].lost.is_set():
            raise RuntimeError("lease lost")  # its own task refreshes it

    async def watch(self, prefix: str, start: int | None) -> AsyncIterator[tuple[str, int | None]]:
        async for batch in self.c.watch_prefix(prefix, start):
            for ev in batch:
                yield ev.kv.key, ev.kv.mod_revision


class EtcdClientPy:
    """etcd-client-py (PyO3 binding of the Rust etcd-client)."""

    name = "etcd-client-py"
    resumes_itself = False

    async def open(self, endpoints: list[str]) -> None:
        import etcd_client  # type: ignore[import-untyped,import-not-found,unused-ignore]

        self.m = etcd_client
        self.client = etcd_client.Client([f"http://{e}" for e in endpoints])
        self.ctx = self.client.connect()
        self.c = await self.ctx.__aenter__()

    async def close(self) -> None:
        await self.ctx.__aexit__(None, None, None)

    async def put(self, key: str, value: bytes, lease: Any = None) -> int | None:
        if lease is not None:
            raise Unsupported("put has no lease argument")
        await self.c.put(key.encode(), value)
        return None

    async def get(self, key: str) -> tuple[bytes, int | None] | None:
        value = await self.c.get(key.encode())
        return None if value is None else (bytes(value), None)

    async def replace(self, key: str, value: bytes, mod_revision: int) -> bool:
        m = self.m
        txn = (
            m.Txn()
            .when([m.Compare.mod_revision(key.encode(), m.CompareOp.EQUAL, mod_revision)])
            .and_then([m.TxnOp.put(key.encode(), value)])
        )
        return bool((await self.c.txn(txn)).succeeded())

    async def create(self, key: str, value: bytes) -> bool:
        m = self.m
        txn = (
            m.Txn()
            .when([m.Compare.create_revision(key.encode(), m.CompareOp.EQUAL, 0)])
            .and_then([m.TxnOp.put(key.encode(), value)])
        )
        return bool((await self.c.txn(txn)).succeeded())

    async def lease(self, ttl: int) -> Any:
        granted = await self.c.lease_grant(ttl)
        return granted, getattr(granted, "id", None)

    async def refresh(self, lease: Any) -> None:
        if lease[1] is None:
            raise Unsupported("no lease id")
        await self.c.lease_keep_alive(lease[1])

    async def watch(self, prefix: str, start: int | None) -> AsyncIterator[tuple[str, int | None]]:
        async for ev in self.c.watch_prefix(prefix.encode()):
            yield bytes(ev.key).decode(), None


# -- checks ---------------------------------------------------------------------------------


async def heal(cluster: EtcdCluster) -> None:
    for i in range(cluster.size):
        if not cluster.running(i):
            cluster.restart(i)
    await asyncio.to_thread(cluster.wait_healthy)


async def check_kv(client: Any, tag: str) -> str:
    rev = await client.put(f"/{tag}/kv", b"v")
    got = await client.get(f"/{tag}/kv")
    ok = got is not None and got[0] == b"v"
    if not ok:
        return f"✘ read back {got!r}"
    return "✔ revisions" if rev is not None and got[1] is not None else "✔ **no revisions**"


async def check_race(client: Any, tag: str, rounds: int) -> str:
    out = []
    for racers in (2, 10):
        exact = 0
        for r in range(rounds):
            key = f"/{tag}/race/{racers}/{r}"
            rev = await client.put(key, b"0")
            got = await client.get(key)
            mod = got[1] if got is not None else None
            if mod is None and rev is None:  # no revisions: race creates instead
                tries = [client.create(key + "/c", b"%d" % i) for i in range(racers)]
            else:
                tries = [client.replace(key, b"%d" % i, mod or rev) for i in range(racers)]
            wins = await asyncio.gather(*tries)
            exact += sum(wins) == 1
        out.append(f"{exact}/{rounds} ({racers} racers)")
    return "one winner " + ", ".join(out)


async def check_lease(client: Any, cluster: EtcdCluster, tag: str) -> str:
    ttl = 2
    lease = await client.lease(ttl)
    try:
        await client.put(f"/{tag}/lease", b"n", lease=lease[1])
    except Unsupported as exc:
        return f"✘ {exc}"
    if lease[1] is None:
        return "✘ no lease id"
    stop = asyncio.Event()
    failures = 0

    async def keep() -> None:
        nonlocal failures
        while not stop.is_set():
            try:
                async with asyncio.timeout(ttl / 3):
                    await client.refresh(lease)
            except Exception:
                failures += 1
            await asyncio.sleep(ttl / 3)

    task = asyncio.create_task(keep())
    cluster.kill(cluster.wait_leader())
    await asyncio.sleep(3 * ttl)
    stop.set()
    await task
    alive = await client.get(f"/{tag}/lease")
    verdict = "✔ key kept" if alive is not None else "✘ key expired"
    return f"{verdict} {3 * ttl} s after leader kill ({failures} refreshes failed)"


async def check_watch(client: Any, writer: Etcd, cluster: EtcdCluster, tag: str) -> str:
    prefix = f"/{tag}/watch/"
    _, revision = await writer.get_prefix(prefix)
    seen: list[str] = []
    last: list[int | None] = [None]
    rewatches = 0

    async def follow() -> None:
        nonlocal rewatches
        start: int | None = revision + 1
        while True:
            try:
                async for key, rev in client.watch(prefix, start):
                    seen.append(key)
                    last[0] = rev
                return
            except Exception:
                rewatches += 1
                start = last[0] + 1 if last[0] is not None else None
                await asyncio.sleep(0.1)

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.3)
    written = 0
    for member in range(cluster.size):
        cluster.kill(member)
        for n in range(10):
            await writer.put(f"{prefix}{member}/{n}", b"x")
            written += 1
        cluster.restart(member)
        await asyncio.to_thread(cluster.wait_healthy)
    deadline = time.monotonic() + 10
    while len(set(seen)) < written and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    dup = len(seen) - len(set(seen))
    how = "resumes itself" if client.resumes_itself else f"{rewatches} re-watches by the bench"
    return f"{len(set(seen))}/{written} events, {dup} dup ({how})"


async def check_failover(client: Any, cluster: EtcdCluster, tag: str) -> str:
    """Puts one after another; the leader is SIGKILLed after 0.5 s; runs until 1 s of puts
    succeeded after the kill (at most 12 s)."""
    loop = asyncio.get_running_loop()
    ok_times: list[float] = []
    failed = 0
    started = loop.time()
    killed_at: float | None = None
    n = 0
    while True:
        now = loop.time()
        if killed_at is None and now > started + 0.5:
            cluster.kill(cluster.wait_leader())
            killed_at = now = loop.time()
        if killed_at is not None and (
            now > killed_at + 12
            or (ok_times and ok_times[-1] > killed_at and now > ok_times[-1] + 1)
        ):
            break
        try:
            async with asyncio.timeout(OP_TIMEOUT):
                await client.put(f"/{tag}/fo/{n}", b"x")
            ok_times.append(loop.time())
        except Exception:
            failed += 1
        n += 1
    assert killed_at is not None
    after = [t for t in ok_times if t > killed_at]
    before = [t for t in ok_times if t <= killed_at]
    if not after:
        return f"✘ no put succeeded within 12 s ({failed} failed)"
    gap = after[0] - (before[-1] if before else killed_at)
    return f"{failed} failed puts, writes again after {gap:.2f} s"


async def evaluate(kind: Any, cluster: EtcdCluster, writer: Etcd, rounds: int) -> dict[str, str]:
    client = kind()
    tag = kind.__name__.lower()
    row: dict[str, str] = {}
    try:
        await client.open(cluster.endpoints)
    except Exception as exc:
        return {"kv": f"✘ connect: {exc!r}"}
    checks: dict[str, Callable[[], Awaitable[str]]] = {
        "kv": lambda: check_kv(client, tag),
        "race": lambda: check_race(client, tag, rounds),
        "lease": lambda: check_lease(client, cluster, tag),
        "watch": lambda: check_watch(client, writer, cluster, tag),
        "failover": lambda: check_failover(client, cluster, tag),
    }
    for name, check in checks.items():
        await heal(cluster)
        try:
            async with asyncio.timeout(60):
                row[name] = await check()
        except Exception as exc:
            row[name] = f"✘ {type(exc).__name__}: {str(exc)[:60]}"
    with contextlib.suppress(Exception):
        await client.close()
    return row


def context() -> str:
    etcd = subprocess.run(["etcd", "--version"], capture_output=True, text=True).stdout
    versions = []
    for dist in ("aetcd", "grpcio", "protobuf", "etcd-client-py"):
        try:
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{dist} not installed")
    return (
        f"{etcd.splitlines()[0]}, 3 members on loopback (heartbeat 50 ms, election 500 ms); "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs; " + ", ".join(versions)
    )


async def main(rounds: int) -> None:
    kinds: list[Any] = [AetcdRaw, Wrapped]
    try:
        import etcd_client  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: F401

        kinds.append(EtcdClientPy)
    except ImportError:
        print("etcd-client-py not installed: skipped")
    with tempfile.TemporaryDirectory(prefix="etcd-bench-") as tmp:
        cluster = EtcdCluster(3, tmp)
        try:
            await cluster.astart()
            writer = await Etcd.connect(cluster.endpoints)
            rows = {}
            for kind in kinds:
                rows[kind.name] = await evaluate(kind, cluster, writer, rounds)
            await writer.close()
        finally:
            cluster.close()
    print(context())
    cols = ["kv", "race", "lease", "watch", "failover"]
    print("| client | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(row.get(c, "-") for c in cols) + " |")


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="txn race rounds per racer count")
    asyncio.run(main(parser.parse_args().rounds))
