"""Benchmark the Spark archive pipeline against Spark writing the same rows from memory.

Starts a real ``nsqd`` (data in a temp dir), publishes ``--messages`` bodies of ``--size``
bytes into one topic with pipelined TCP MPUBs of 200 (``--bodies json``: each message its
own small JSON event, as real traffic is; ``same``: one body repeated, which Parquet's
dictionary encoding shrinks to nothing), then in one SparkSession (built
as ``nsqpy pipeline`` builds it: ``local[*]`` unless ``--master``):

  - archive: ``nsqpy.spark.pipelines.archive`` with Trigger.AvailableNow (``--once``),
    the topic into Parquet partitioned by ``date`` (``--writer``: ``auto``/``arrow``, the
    tasks write the files with pyarrow; ``spark``, Spark's Parquet file sink); timed from
    ``start()`` until the query ends (query start-up included), and also inside its
    micro-batches;
  - baseline: the archived rows read back, repartitioned to as many partitions as the
    archive's read, cached and counted (so they are in memory), then timed while Spark
    writes them to Parquet with the same columns and the same ``partitionBy("date")``.

Prints rows/s of each, archive/baseline, nsqd's CPU seconds per million records served
and the machine's context. Each figure is the best of ``--repeat`` runs (archive and
baseline interleaved, both after a warm-up of the JVM on a small topic). Asserts nothing
about speed; checks only that the archive holds every message (Spark reads it back
for the baseline).

Run: ``.venv/bin/python bench/spark_archive.py [--messages 1000000] [--size 200]
[--bodies json|same] [--repeat 3] [--master local[*]] [--min-partitions N] [--fetch-max-count N]
[--fetch-max-bytes N] [--writer auto|arrow|spark]``
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from nsqpy.spark.nsqhttp import NsqdHttp
from nsqpy.testing import nsqd_process

MPUB_BATCH = 200


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User + system CPU of ``pid`` (and of its children it has waited for)."""
    fields = _stat(pid)
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def _role(pid: int, root: int) -> str:
    if pid == root:
        return "driver"
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if not args[0]:  # a zombie (a Python worker that ended, not reaped yet)
            stat = Path(f"/proc/{pid}/stat").read_bytes()
            args = [stat[stat.index(b"(") + 1 : stat.rindex(b")")]]
    except (OSError, ValueError):
        return "other"
    text = b" ".join(args[:3])
    if b"nsqd" in text:
        return "nsqd"
    if b"java" in Path(args[0].decode(errors="replace")).name.encode():
        return "jvm"
    return "python workers" if b"python" in text else "other"


def cpu_by_role(root: int) -> dict[str, float]:
    """CPU seconds of ``root`` and every process below it (the JVM, Spark's Python
    workers, nsqd), including children they have already reaped, by role."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat(int(entry.name))[1])
            except (OSError, IndexError, ValueError):
                continue
    out: dict[str, float] = {}
    for pid in parents:
        p = pid
        while p > 1 and p != root:
            p = parents.get(p, 0)
        if p == root:
            try:
                seconds = cpu_seconds(pid, children=True)
            except OSError:
                continue
            role = _role(pid, root)
            out[role] = out.get(role, 0.0) + seconds
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per role: CPU seconds spent between two ``cpu_by_role`` readings (a process that
    ended in between counts through its parent's reaped-children time)."""
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(before) | set(after)}


def bodies(first: int, n: int, size: int, kind: str) -> list[bytes]:
    """``n`` message bodies of ``size`` bytes: ``same`` repeats one; ``json`` gives each
    message its own small JSON event (a counter, a user, an amount), padded to ``size``."""
    if kind == "same":
        return [b"x" * size] * n
    out = []
    for i in range(first, first + n):
        head = b'{"event":"order","n":%d,"user":"u%05d","amount":%d.%02d,"note":"' % (
            i,
            (i * 7919) % 100_000,
            (i * 31) % 1000,
            i % 100,
        )
        pad = max(0, size - len(head) - 2)
        out.append(head + (b"%x" % (i * 2654435761 % (1 << 32))).ljust(pad, b"-")[:pad] + b'"}')
    return out


def publish(
    port: int, topic: str, count: int, size: int, kind: str = "json", pipeline: int = 16
) -> None:
    """``count`` bodies of ``size`` bytes in MPUBs of 200, ``pipeline`` MPUBs in flight."""
    batches = []
    for first in range(0, count, MPUB_BATCH):
        n = min(MPUB_BATCH, count - first)
        parts = [struct.pack(">i", n)]
        for body in bodies(first, n, size, kind):
            parts.append(struct.pack(">i", len(body)))
            parts.append(body)
        payload = b"".join(parts)
        batches.append(f"MPUB {topic}\n".encode() + struct.pack(">i", len(payload)) + payload)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"  V2")
    buf = bytearray()
    sent = acked = 0
    while acked < len(batches):
        while sent < len(batches) and sent - acked < pipeline:
            sock.sendall(batches[sent])
            sent += 1
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("nsqd closed the connection")
        buf += data
        while len(buf) >= 8:
            frame_size, frame_type = struct.unpack_from(">ii", buf)
            if len(buf) < 4 + frame_size:
                break
            frame = bytes(buf[8 : 4 + frame_size])
            del buf[: 4 + frame_size]
            if frame == b"_heartbeat_":
                sock.sendall(b"NOP\n")
                continue
            if frame_type != 0 or frame != b"OK":
                raise RuntimeError(f"MPUB failed: {frame!r}")
            acked += 1
    sock.close()


def high_watermark(http: str, topic: str) -> int:
    with NsqdHttp(http) as conn:
        marks = conn.watermarks(topic)
    return marks[0].high if marks else 0


def java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (out.stderr.splitlines() or ["unknown"])[0]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class Bench:
    """One nsqd, one SparkSession and a scratch directory."""

    def __init__(self, args: argparse.Namespace, root: Path, nsqd: Any, spark: Any) -> None:
        self.args = args
        self.root = root
        self.nsqd = nsqd
        self.spark = spark
        self.runs = 0

    def fresh(self, name: str) -> Path:
        self.runs += 1
        path = self.root / f"{name}-{self.runs}"
        shutil.rmtree(path, ignore_errors=True)
        return path

    def archive(self, topic: str) -> tuple[float, float, int, Path, dict[str, float]]:
        """(wall seconds, seconds inside micro-batches, rows, output, CPU seconds by role:
        nsqd, the JVM, Spark's Python workers, this driver)."""
        from nsqpy.spark import pipelines as pl

        extra = {
            k: str(v)
            for k, v in (
                ("minPartitions", self.args.min_partitions),
                ("fetchMaxCount", self.args.fetch_max_count),
                ("fetchMaxBytes", self.args.fetch_max_bytes),
            )
            if v is not None
        }
        out, checkpoint = self.fresh("archive"), self.fresh("checkpoint")
        settings = pl.StreamSettings(checkpoint=str(checkpoint), once=True, extra=extra)
        assert self.nsqd.proc is not None
        cpu0 = cpu_by_role(os.getpid())
        t0 = time.perf_counter()
        query = pl.archive(
            self.spark,
            pl.Endpoint(nsqd=self.nsqd.http),
            topic,
            str(out),
            settings,
            self.args.writer,
        )
        query.awaitTermination()
        wall = time.perf_counter() - t0
        cpu = cpu_delta(cpu0, cpu_by_role(os.getpid()))
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        progress = [p for p in query.recentProgress if pl.progress_messages(p) > 0]
        rows = sum(pl.progress_messages(p) for p in progress)
        inside = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
        return wall, inside, rows, out, cpu

    def baseline(self, source: Path, partitions: int) -> tuple[float, int, float]:
        """(seconds, rows, CPU seconds) of Spark writing ``source``'s rows from a cached
        DataFrame."""
        df = self.spark.read.parquet(str(source)).repartition(partitions).cache()
        rows = int(df.count())
        out = self.fresh("baseline")
        cpu0 = cpu_by_role(os.getpid())
        t0 = time.perf_counter()
        df.write.partitionBy("date").parquet(str(out))
        seconds = time.perf_counter() - t0
        cpu = sum(cpu_delta(cpu0, cpu_by_role(os.getpid())).values())
        df.unpersist(blocking=True)
        return seconds, rows, cpu


def report(n: int, archives: list[tuple[Any, ...]], baselines: list[tuple[Any, ...]]) -> None:
    """Best wall times, in-batch time and CPU seconds per million rows, and the ratios."""
    wall = min(a[0] for a in archives)
    inside = min(a[1] for a in archives)
    roles = min((a[4] for a in archives), key=lambda r: sum(r.values()))
    cpu = sum(roles.values())
    base = min(b[0] for b in baselines)
    base_cpu = min(b[2] for b in baselines)
    per_m = 1e6 / n
    print(
        f"archive  (nsqd -> Parquet by date, AvailableNow) {n / wall:>10,.0f} rows/s  "
        f"{wall:6.2f} s wall, query start-up included"
    )
    print(
        f"archive, inside its micro-batch (trigger)        {n / inside:>10,.0f} rows/s  "
        f"{inside:6.2f} s"
    )
    print(
        f"baseline (cached DataFrame -> Parquet by date)   {n / base:>10,.0f} rows/s  {base:6.2f} s"
    )
    print(
        f"archive / baseline: {base / wall:.0%} with query start-up, "
        f"{base / inside:.0%} inside the micro-batch"
    )
    split = ", ".join(
        f"{role} {seconds * per_m:.2f}"
        for role, seconds in sorted(roles.items(), key=lambda kv: -kv[1])
        if seconds >= 0.005
    )
    print(
        f"CPU seconds per million rows (all processes): archive {cpu * per_m:.2f} "
        f"({split}), baseline {base_cpu * per_m:.2f}; baseline / archive {base_cpu / cpu:.0%}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=200, help="body bytes")
    ap.add_argument(
        "--bodies",
        choices=("json", "same"),
        default="json",
        help="json: each message its own JSON event (default); same: one body repeated",
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs of each; the best is shown")
    ap.add_argument("--master", default=None, help="Spark master (default: local[*])")
    ap.add_argument("--min-partitions", type=int, default=None, help="source minPartitions")
    ap.add_argument("--fetch-max-count", type=int, default=None, help="source fetchMaxCount")
    ap.add_argument("--fetch-max-bytes", type=int, default=None, help="source fetchMaxBytes")
    ap.add_argument(
        "--writer",
        choices=("auto", "arrow", "spark"),
        default="auto",
        help="the archive's Parquet writer (default auto: arrow for a local output)",
    )
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()

    from nsqpy.spark.cli import spark_session

    confs = ["spark.ui.enabled=false", *args.conf]
    with tempfile.TemporaryDirectory(prefix="nsqpy-spark-bench-") as tmp:
        root = Path(tmp)
        with nsqd_process(root / "nsqd") as nsqd:
            t0 = time.perf_counter()
            publish(nsqd.tcp_port, "bench", args.messages, args.size, args.bodies)
            pub_s = time.perf_counter() - t0
            publish(nsqd.tcp_port, "warmup", 20_000, args.size, args.bodies)
            assert high_watermark(nsqd.http, "bench") == args.messages
            spark, _ = spark_session(args.master, confs, True, "nsqpy spark_archive bench")
            assert not isinstance(spark, tuple)
            sc = spark.sparkContext  # type: ignore[attr-defined]
            print("# nsqpy Spark archive bench (figures, no assertions)")
            print(
                f"# {platform.node()}: {os.cpu_count()} cores ({cpu_model()}), "
                f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
            )
            print(
                f"# Python {platform.python_version()}, PySpark {spark.version}, "  # type: ignore[attr-defined]
                f"{java_version()}, master {sc.master}, default parallelism "
                f"{sc.defaultParallelism}"
            )
            print(
                f"# {args.messages:,} messages of {args.size} bytes ({args.bodies} bodies) "
                f"published in {pub_s:.1f} s "
                f"({args.messages / pub_s:,.0f} msgs/s, TCP MPUB x{MPUB_BATCH}); "
                f"nsqd and Spark share the machine"
            )
            bench = Bench(args, root, nsqd, spark)
            warm_out = bench.archive("warmup")[3]  # JIT, Python workers, imports
            bench.baseline(warm_out, sc.defaultParallelism)
            archives, baselines = [], []
            for _ in range(max(1, args.repeat)):
                run = bench.archive("bench")
                if run[2] != args.messages:
                    raise SystemExit(f"archive read {run[2]} rows, expected {args.messages}")
                archives.append(run)
                parts = spark.read.parquet(str(run[3])).rdd.getNumPartitions()  # type: ignore[attr-defined]
                base = bench.baseline(run[3], max(parts, sc.defaultParallelism))
                assert base[1] == args.messages, base
                baselines.append(base)
                shutil.rmtree(run[3], ignore_errors=True)
            report(args.messages, archives, baselines)
            spark.stop()  # type: ignore[attr-defined]


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
