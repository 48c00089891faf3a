"""Resource bounds of an nsqd process: descriptors per topic, memory per GB of log.

1. Topics under a small open-files limit: an nsqd with ``--nofile`` (soft = hard) gets
   ``--topics`` topics by HTTP /pub (every tenth with a channel and a deferred message),
   then is restarted; prints descriptors in use and RSS after each step.
2. Memory per GB of retained log: a log of ``--gigabytes`` GB written directly with
   ``PartitionLog`` in small batches (one index entry per ~4 KiB, as single PUBs make),
   then nsqd started on it; prints its RSS and start time against an empty nsqd's.

Run: ``.venv/bin/python bench/bounds.py [--topics 20000] [--nofile 1024] [--gigabytes 1]``.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

from nsqpy.storage import PartitionLog
from nsqpy.testing import DaemonProcess, nsqd_process


def post_all(nsqd: DaemonProcess, paths: list[str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", nsqd.http_port, timeout=30)
    failed = 0
    for path in paths:
        conn.request("POST", path, body=b"m")
        resp = conn.getresponse()
        resp.read()
        failed += resp.status != 200
    conn.close()
    return failed


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def topics_under_a_limit(root: Path, topics: int, nofile: int) -> None:
    data = root / "topics"
    data.mkdir()
    nsqd = nsqd_process(data, nofile=nofile).start()
    started = time.monotonic()
    failed = post_all(nsqd, [f"/pub?topic=t{i}" for i in range(topics)])
    tenth = range(0, topics, 10)
    failed += post_all(nsqd, [f"/channel/create?topic=t{i}&channel=c" for i in tenth])
    failed += post_all(nsqd, [f"/pub?topic=t{i}&defer=3600000" for i in tenth])
    took = time.monotonic() - started
    print(
        f"{topics} topics ({len(tenth)} with a channel and a deferred message) under a "
        f"limit of {nofile} descriptors: {failed} requests failed, {took:.1f} s"
    )
    print(
        f"  running:   {nsqd.open_fds()} descriptors, RSS {mib(nsqd.rss_bytes())}, "
        f"idle CPU {idle_cpu(nsqd):.0%}"
    )
    started = time.monotonic()
    nsqd.stop(timeout=600)
    print(f"  stopped:   in {time.monotonic() - started:.1f} s")
    started = time.monotonic()
    again = nsqd_process(data, nofile=nofile).start(timeout=600)
    print(
        f"  restarted: in {time.monotonic() - started:.1f} s, {again.open_fds()} descriptors, "
        f"RSS {mib(again.rss_bytes())}, idle CPU {idle_cpu(again):.0%}"
    )
    again.stop(timeout=600)


def idle_cpu(nsqd: DaemonProcess, seconds: float = 5.0) -> float:
    """The share of one core the process used over ``seconds`` with no client."""

    def ticks() -> int:
        with open(f"/proc/{nsqd.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    before = ticks()
    time.sleep(seconds)
    return (ticks() - before) / os.sysconf("SC_CLK_TCK") / seconds


def memory_per_gigabyte(root: Path, gigabytes: float) -> None:
    empty = nsqd_process(root / "empty").start()
    base = empty.rss_bytes()
    empty.stop()
    data = root / "log"
    part = data / "topics" / "topic-big" / "p0"
    body = b"x" * 200
    target = int(gigabytes * (1 << 30))
    started = time.monotonic()
    with PartitionLog(part) as log:
        written = 0
        while written < target:
            log.append_bodies([body] * 16)  # ~4 KiB per batch: an index entry each
            log.flush()
            written += 16 * 238 + 40
        size = log.stats()["bytes"]
    (data / "nsqd.dat").write_text('{"topics":[{"name":"big","paused":false,"channels":[]}]}')
    print(f"log of {mib(size)} written in {time.monotonic() - started:.1f} s")
    started = time.monotonic()
    nsqd = nsqd_process(data).start(timeout=600)
    took = time.monotonic() - started
    rss = nsqd.rss_bytes()
    print(
        f"  nsqd on it: RSS {mib(rss)} (empty nsqd {mib(base)}: +{mib(rss - base)}), "
        f"start {took:.1f} s"
    )
    nsqd.stop(timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=20000)
    parser.add_argument("--nofile", type=int, default=1024)
    parser.add_argument("--gigabytes", type=float, default=1.0)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, {platform.platform()}")
    root = Path(tempfile.mkdtemp(prefix="nsqpy-bounds-"))
    try:
        topics_under_a_limit(root, args.topics, args.nofile)
        memory_per_gigabyte(root, args.gigabytes)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
