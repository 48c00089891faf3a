"""Benchmark: single-node append+flush against a leader replicating to one follower over
loopback (``nsqpy.cluster.replica_leader.LeaderFeed`` / ``replica_follower.FollowerFetch``),
in the same run.

Both write ``--mb`` MB as batches of ``--batch`` bodies of ``--size`` bytes (MPUB-like),
one ``flush`` per batch (group commit). Single node: done when the last flush returns.
Replicated: after each flush the leader calls ``notify``; a producer may have ``--inflight``
batches not yet committed (acknowledged by the follower) before it waits, as many
producers' batches would be in flight at once; done when the last batch is committed.
The follower runs in a child process (its own core: this is how three nsqd share a
machine), its log in the same temp dir. No fsync anywhere (the page cache).
Run: ``.venv/bin/python bench/replication.py [--mb 64] [--inflight 16]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nsqpy.cluster.replica_follower import FollowerFetch
from nsqpy.cluster.replica_leader import LeaderFeed
from nsqpy.cluster.replica_state import FOLLOWER, LEADER, ReplicaState
from nsqpy.storage import PartitionLog

SEGMENT = 64 * 1024 * 1024


def single(d: Path, bodies: list[bytes], batches: int) -> float:
    log = PartitionLog(d, segment_bytes=SEGMENT)
    log.begin_epoch(1)
    t0 = time.perf_counter()
    for _ in range(batches):
        log.append_bodies(bodies)
        log.flush()
    dt = time.perf_counter() - t0
    log.close()
    return dt


async def replicated(root: Path, bodies: list[bytes], batches: int, inflight: int) -> float:
    log = PartitionLog(root / "leader", segment_bytes=SEGMENT)
    log.begin_epoch(1)
    moved = asyncio.Event()
    state = ReplicaState("L", "t", 0, log, clock=time.monotonic, on_change=lambda s: moved.set())
    state.assign(LEADER, 1, ("L", "F"), (), 2)
    feed = LeaderFeed("L", "bench", lambda t, p: state)
    host, port = await feed.start()
    child = subprocess.Popen(
        [sys.executable, __file__, "--follow", f"{host}:{port}", "--dir", str(root / "f")],
        stdin=subprocess.PIPE,
    )
    try:
        while not (f := state.peers.get("F")) or not f.connected:
            await asyncio.sleep(0.01)  # the child's start is not part of the figure
        ends: list[int] = []
        t0 = time.perf_counter()
        for i in range(batches):
            log.append_bodies(bodies)
            ends.append(log.flush())
            feed.notify("t", 0)
            if i >= inflight:
                await _committed(state, moved, ends[i - inflight])
            else:
                await asyncio.sleep(0)
        await _committed(state, moved, ends[-1])
        return time.perf_counter() - t0
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
        await feed.close()
        log.close()


async def _committed(state: ReplicaState, moved: asyncio.Event, offset: int) -> None:
    while state.committed < offset:
        moved.clear()
        await moved.wait()


async def follow(address: str, directory: str) -> None:
    """The child: follow until stdin closes."""
    log = PartitionLog(directory, segment_bytes=SEGMENT)
    state = ReplicaState("F", "t", 0, log, clock=time.monotonic)
    state.assign(FOLLOWER, 1)
    f = FollowerFetch(state, cluster_id="bench", leader=address, leader_epoch=1)
    f.start()
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await f.stop()
    log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=64, help="MB written (64)")
    ap.add_argument("--batch", type=int, default=200, help="bodies per batch (200)")
    ap.add_argument("--size", type=int, default=200, help="bytes per body (200)")
    ap.add_argument("--inflight", type=int, default=16, help="uncommitted batches (16)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--follow", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.follow:
        asyncio.run(follow(args.follow, args.dir))
        return
    root = Path(tempfile.mkdtemp(prefix="nsqpy-bench-replication-", dir=args.dir))
    bodies = [bytes([65 + i % 26]) * args.size for i in range(args.batch)]
    batches = args.mb * 1024 * 1024 // (args.batch * args.size)
    msgs, mb = batches * args.batch, batches * args.batch * args.size / 1e6
    print(f"python {sys.version.split()[0]} ({platform.python_implementation()}), "
          f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}; {batches} batches of "
          f"{args.batch} x {args.size} B, {args.inflight} in flight")  # fmt: skip
    try:
        base = single(root / "single", bodies, batches)
        rep = asyncio.run(replicated(root, bodies, batches, args.inflight))
        for name, dt in (("single node", base), ("leader + 1 follower", rep)):
            print(f"{name:<22}{msgs / dt:>12,.0f} msgs/s{mb / dt:>9.0f} MB/s"
                  f"{base / dt:>7.2f}x single")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
