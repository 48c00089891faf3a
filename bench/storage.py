"""Benchmark of nsqpy.storage against raw sequential os.write/os.read of the same bytes.

Prints, for 200-byte messages: append msgs/s and MB/s in batches of 1 and 200 under each
fsync policy (always, every:2500, interval:2000ms), sequential read msgs/s, and the raw
baseline measured in the same run with the same batch sizes and fsync policy, with the
ratio log/raw. Run: ``.venv/bin/python bench/storage.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nsqpy.storage import PartitionLog, SyncPolicy

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


def log_append(d: Path, policy: SyncPolicy, batch: int, n: int) -> float:
    bodies = [bytes([65 + i % 26]) * MSG for i in range(batch)]
    log = PartitionLog(d, sync=policy)
    clock = time.time_ns
    t0 = time.perf_counter()
    for _ in range(n // batch):  # one loop turn: append, flush, maybe fsync
        log.append_bodies(bodies)
        log.flush()
        if log.sync_due(clock()):
            log.sync()
    log.sync()
    dt = time.perf_counter() - t0
    log.close()
    return dt


def raw_append(d: Path, policy: SyncPolicy, batch: int, n: int) -> float:
    bodies = [bytes([65 + i % 26]) * MSG for i in range(batch)]
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / "raw", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
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


def log_read(d: Path, batch: int, frames: bool) -> tuple[int, float]:
    log = PartitionLog(d, verify_on_open=False)
    read: Callable[..., list[object]] = log.read_frames if frames else log.read  # type: ignore[assignment]
    off, total = log.low_watermark, 0
    t0 = time.perf_counter()
    while True:
        got = read(off, batch, 1 << 24)
        if not got:
            break
        total += len(got)
        off += len(got)
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a quarter of the messages")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nsqpy-bench-", dir=args.dir))
    print(f"python {sys.version.split()[0]} ({platform.python_implementation()}), "
          f"{os.cpu_count()} cpus, {platform.machine()}, {platform.system()} {platform.release()}")  # fmt: skip
    print(f"dir {root}; message {MSG} bytes; log record = {MSG + 38} bytes + 28 per batch\n")
    print(f"{'append':<16}{'batch':>6}{'msgs':>9}{'log msg/s':>13}{'log MB/s':>10}"
          f"{'raw msg/s':>13}{'raw MB/s':>10}{'ratio':>8}")  # fmt: skip
    started = time.perf_counter()
    for name, policy in POLICIES.items():
        for batch in (1, 200):
            n = counts(name, batch, args.quick)
            d = root / f"{name}-{batch}"
            lt = log_append(d / "log", policy, batch, n)
            rt = raw_append(d / "raw", policy, batch, n)
            lr, rr = n / lt, n / rt
            print(f"{name:<16}{batch:>6}{n:>9}{lr:>13,.0f}{lr * MSG / 1e6:>10.1f}"
                  f"{rr:>13,.0f}{rr * MSG / 1e6:>10.1f}{lr / rr:>8.2f}")  # fmt: skip
    print(
        f"\n{'sequential read':<22}{'batch':>6}{'msgs':>9}{'log msg/s':>13}{'raw msg/s':>13}{'ratio':>8}"
    )
    d = root / "every:2500-200"
    for batch in (200, 1000):
        for frames in (True, False):
            n, lt = log_read(d / "log", batch, frames)
            rn, rt = raw_read(d / "raw", batch)
            assert n == rn, (n, rn)
            label = "read_frames" if frames else "read (Record)"
            print(f"{label:<22}{batch:>6}{n:>9}{n / lt:>13,.0f}{rn / rt:>13,.0f}"
                  f"{(n / lt) / (rn / rt):>8.2f}")  # fmt: skip
    print(f"\ntotal {time.perf_counter() - started:.1f}s")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
