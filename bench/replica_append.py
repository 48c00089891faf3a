"""Benchmark of a follower's ``append_raw`` against a leader's ``append_bodies``, same run.

The leader appends MPUB-like batches (``--batch`` bodies of ``--size`` bytes) and flushes
every ``--group`` batches (group commit: one ``pwritev`` per flush). The follower takes the
same batches as bytes two ways, each timed on its own (the leader's reads done before):
one ``read_raw`` chunk of up to 1 MiB per call, flushed after each (catch-up), and one
batch per call flushed every ``--group`` calls (the live replication stream). No fsync in
any (the page cache: the CPU cost of each path). Every figure is the best of ``--repeat``
runs. Run: ``.venv/bin/python bench/replica_append.py [--mb 64] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from nsqpy.storage import PartitionLog

SEGMENT = 64 * 1024 * 1024


def leader_run(d: Path, bodies: list[bytes], batches: int, group: int) -> tuple[float, int]:
    log = PartitionLog(d, segment_bytes=SEGMENT)
    log.begin_epoch(1)
    t0 = time.perf_counter()
    for i in range(batches):
        log.append_bodies(bodies)
        if (i + 1) % group == 0:
            log.flush()
    log.flush()
    dt = time.perf_counter() - t0
    size = log.stats()["bytes"]
    log.close()
    return dt, size


def chunks(d: Path, max_bytes: int) -> list[tuple[bytes, int]]:
    """The leader's log as read_raw hands it out: (data, offset) per call."""
    out = []
    with PartitionLog(d, segment_bytes=SEGMENT) as log:
        offset = log.low_watermark
        while (raw := log.read_raw(offset, max_bytes)).count:
            out.append((raw.data, raw.offset))
            offset = raw.next_offset
    return out


def follower_run(d: Path, parts: list[tuple[bytes, int]], group: int) -> float:
    log = PartitionLog(d, segment_bytes=SEGMENT)
    t0 = time.perf_counter()
    for i, (data, offset) in enumerate(parts):
        log.append_raw(data, offset)
        if (i + 1) % group == 0:
            log.flush()
    log.flush()
    dt = time.perf_counter() - t0
    log.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=64, help="MB the leader writes (64)")
    ap.add_argument("--batch", type=int, default=200, help="bodies per batch (200)")
    ap.add_argument("--size", type=int, default=200, help="bytes per body (200)")
    ap.add_argument("--group", type=int, default=8, help="batches per flush (8)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure, best taken (3)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nsqpy-bench-replica-", dir=args.dir))
    bodies = [bytes([65 + i % 26]) * args.size for i in range(args.batch)]
    batches = args.mb * 1024 * 1024 // (args.batch * args.size)
    print(f"python {sys.version.split()[0]} ({platform.python_implementation()}), "
          f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}; {batches} batches of "
          f"{args.batch} x {args.size} B, best of {args.repeat}")  # fmt: skip
    best: dict[str, float] = {}
    size = 0
    try:
        for r in range(args.repeat):
            lead = root / f"leader{r}"
            dt, size = leader_run(lead, bodies, batches, args.group)
            best["append_bodies"] = min(best.get("append_bodies", dt), dt)
            for name, max_bytes, group in (
                ("append_raw 1 MiB chunks", 1 << 20, 1),
                ("append_raw batch/call", 1, args.group),
            ):
                parts = chunks(lead, max_bytes)
                dt = follower_run(root / f"{name[-5:]}{r}", parts, group)
                best[name] = min(best.get(name, dt), dt)
                shutil.rmtree(root / f"{name[-5:]}{r}")
            shutil.rmtree(lead)
        msgs = batches * args.batch
        base = best["append_bodies"]
        for name, dt in best.items():
            print(f"{name:<26}{size / dt / 1e6:>9.0f} MB/s{msgs / dt:>12,.0f} msgs/s"
                  f"{base / dt:>7.2f}x append_bodies")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
