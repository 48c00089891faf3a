"""Benchmark of nsqpy.storage against raw sequential os.write/os.read of the same bodies.

Append: 200-byte messages in batches of 1 and 200 under each fsync policy (always,
every:2500, interval:2000ms), plus batches of 200 bodies of mixed sizes (50..350 bytes,
mean 200); the raw baseline writes the same bodies (joined) with os.write and fsyncs by
the same policy. Both times include the final fsync: messages per second until durable.

Read (from the page cache, files written above, batch = messages per call): ``read_raw``
(whole batches as bytes, what replication and the HTTP log-read API use; with and without
the server-side records-CRC check; the receiver checks CRCs), ``read_frames`` and ``read``
(a tuple / a ``Record`` per message, what the broker uses); the raw baseline os.reads the
raw file in chunks of ``batch`` bodies.

Each figure is the best of ``--repeat`` runs (log and raw interleaved); the ratio is
log/raw of those bests. Run: ``.venv/bin/python bench/storage.py [--quick] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nsqpy.storage import PartitionLog, SyncPolicy
from nsqpy.storage.records import BATCH_SIZE, RECORD_SIZE

MSG = 200
POLICIES = {
    "always": SyncPolicy.parse("always"),
    "every:2500": SyncPolicy.parse("every:2500"),
    "interval:2000ms": SyncPolicy.parse("interval:2000ms"),
}


def counts(policy: str, batch: int, quick: bool) -> int:
    table = {("always", 1): 400, ("always", 200): 20_000}
    n = table.get((policy, batch), 60_000 if batch == 1 else 400_000)
    return n // 4 if quick else n


def make_bodies(batch: int, mixed: bool) -> list[bytes]:
    rng = random.Random(batch)
    sizes = [rng.randint(50, 350) if mixed else MSG for _ in range(batch)]
    return [bytes([65 + i % 26]) * size for i, size in enumerate(sizes)]


def log_append(d: Path, policy: SyncPolicy, bodies: list[bytes], n: int) -> float:
    log = PartitionLog(d, sync=policy)
    clock = time.time_ns
    t0 = time.perf_counter()
    for _ in range(n // len(bodies)):  # one loop turn: append, flush, maybe fsync
        log.append_bodies(bodies)
        log.flush()
        if log.sync_due(clock()):
            log.sync()
    log.sync()
    dt = time.perf_counter() - t0
    log.close()
    return dt


def raw_append(d: Path, policy: SyncPolicy, bodies: list[bytes], n: int) -> float:
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / "raw", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    batch = len(bodies)
    unsynced = 0
    since = 0.0
    t0 = time.perf_counter()
    for _ in range(n // batch):
        os.write(fd, b"".join(bodies))
        unsynced += batch
        now = time.perf_counter()
        since = since or now
        if (
            policy.always
            or (policy.every_messages and unsynced >= policy.every_messages)
            or (policy.every_ms and (now - since) * 1000 >= policy.every_ms)
        ):
            os.fsync(fd)
            unsynced, since = 0, 0.0
    os.fsync(fd)
    dt = time.perf_counter() - t0
    os.close(fd)
    return dt


def log_read(d: Path, batch: int, how: str) -> tuple[int, float]:
    log = PartitionLog(d, verify_on_open=False)
    off, total = log.low_watermark, 0
    t0 = time.perf_counter()
    if how.startswith("read_raw"):
        verify = how == "read_raw"
        max_bytes = batch * (MSG + RECORD_SIZE + 1)  # room for `batch` records and a header
        while (got := log.read_raw(off, max_bytes, verify=verify)).count:
            total += got.count
            off += got.count
    else:
        read: Callable[..., list[object]] = log.read_frames if how == "read_frames" else log.read  # type: ignore[assignment]
        while got_list := read(off, batch, 1 << 24):
            total += len(got_list)
            off += len(got_list)
    dt = time.perf_counter() - t0
    log.close()
    return total, dt


def raw_read(d: Path, batch: int) -> tuple[int, float]:
    fd = os.open(d / "raw", os.O_RDONLY)
    chunk = batch * MSG
    total = 0
    t0 = time.perf_counter()
    while data := os.read(fd, chunk):
        total += len(data) // MSG
    dt = time.perf_counter() - t0
    os.close(fd)
    return total, dt


def append_row(root: Path, name: str, batch: int, mixed: bool, args: argparse.Namespace) -> None:
    policy = POLICIES[name]
    n = counts(name, batch, args.quick)
    bodies = make_bodies(batch, mixed)
    log_best = raw_best = float("inf")
    for i in range(args.repeat):
        d = root / f"{name}-{batch}{'-mixed' if mixed else ''}"
        shutil.rmtree(d, ignore_errors=True)
        if i % 2:  # interleave, so drifting load hits both sides alike
            raw_best = min(raw_best, raw_append(d / "raw", policy, bodies, n))
            log_best = min(log_best, log_append(d / "log", policy, bodies, n))
        else:
            log_best = min(log_best, log_append(d / "log", policy, bodies, n))
            raw_best = min(raw_best, raw_append(d / "raw", policy, bodies, n))
    lr, rr = n / log_best, n / raw_best
    mb = sum(map(len, bodies)) / len(bodies) / 1e6
    label = f"{name}{' mixed' if mixed else ''}"
    print(f"{label:<22}{batch:>6}{n:>9}{lr:>13,.0f}{lr * mb:>10.1f}"
          f"{rr:>13,.0f}{rr * mb:>10.1f}{lr / rr:>8.2f}")  # fmt: skip


def read_row(d: Path, batch: int, how: str, args: argparse.Namespace) -> None:
    log_best = raw_best = float("inf")
    n = rn = 0
    for _ in range(args.repeat):
        n, lt = log_read(d / "log", batch, how)
        rn, rt = raw_read(d / "raw", batch)
        log_best, raw_best = min(log_best, lt), min(raw_best, rt)
    assert n == rn, (n, rn)
    lr, rr = n / log_best, rn / raw_best
    print(f"{LABELS[how]:<22}{batch:>6}{n:>9}{lr:>13,.0f}{rr:>13,.0f}{lr / rr:>8.2f}")


LABELS = {
    "read_raw": "read_raw (verify)",
    "read_raw-noverify": "read_raw (no verify)",
    "read_frames": "read_frames",
    "read": "read (Record)",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a quarter of the messages")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure, best taken (3)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nsqpy-bench-", dir=args.dir))
    print(f"python {sys.version.split()[0]} ({platform.python_implementation()}), "
          f"{os.cpu_count()} cpus, {platform.machine()}, {platform.system()} {platform.release()}, "
          f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"dir {root}; message {MSG} bytes; log record = {MSG + RECORD_SIZE} bytes "
          f"+ {BATCH_SIZE} per batch; best of {args.repeat}\n")  # fmt: skip
    print(f"{'append':<22}{'batch':>6}{'msgs':>9}{'log msg/s':>13}{'log MB/s':>10}"
          f"{'raw msg/s':>13}{'raw MB/s':>10}{'ratio':>8}")  # fmt: skip
    started = time.perf_counter()
    for name in POLICIES:
        for batch in (1, 200):
            append_row(root, name, batch, False, args)
    for name in POLICIES:
        append_row(root, name, 200, True, args)
    print(f"\n{'sequential read':<22}{'batch':>6}{'msgs':>9}{'log msg/s':>13}{'raw msg/s':>13}"
          f"{'ratio':>8}")  # fmt: skip
    d = root / "every:2500-200"
    for batch in (200, 1000, 5000):
        for how in LABELS:
            read_row(d, batch, how, args)
    print(f"\ntotal {time.perf_counter() - started:.1f}s")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
