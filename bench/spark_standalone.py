"""Reading a topic on a standalone Spark cluster: one executor against two.

Publishes ``--messages`` messages of ``--size`` bytes over ``--partitions`` partitions to
one nsqd, then for 1 and 2 workers (one core each; a standalone master and its workers from
the pyspark package, ``nsqpy.testing.spark``) submits a job with ``spark-submit --master
spark://... --py-files <nsqpy spark package>`` that reads the whole topic with the ``nsq``
source ``--rounds`` times and reports the best read's rate (the read only: the driver's
and executors' start-up are left out, the first read warms them). Prints both rates, how
many of the machine's cores were busy during that read (from /proc/stat: executors' JVMs,
their Python workers and nsqd together), and the ratio. Everything runs on this machine,
nsqd included, so the ratio says how the read spreads over executors here, not what
separate machines would give: when one executor's read keeps C cores busy, two can go at
most (cores on the machine) / C times as fast.

    .venv/bin/python bench/spark_standalone.py --messages 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from nsqpy.spark.package import build
from nsqpy.testing import http_request, nsqd_process
from nsqpy.testing.spark import StandaloneSpark

JOB = """
import json, sys, time
from pyspark.sql import SparkSession
from nsqpy.spark import NsqDataSource

address, topic, rounds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
spark = SparkSession.builder.appName("nsqpy-bench-read").getOrCreate()
spark.dataSource.register(NsqDataSource)
frame = spark.read.format("nsq").option("nsqd", address).option("topic", topic).load()
times, windows = [], []
for _ in range(rounds + 1):
    start, wall = time.perf_counter(), time.time()
    count = frame.selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()[0]
    times.append(time.perf_counter() - start)
    windows.append((wall, time.time()))
best = min(range(1, rounds + 1), key=lambda i: times[i])
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
json.dump({"messages": count.n, "bytes": count.b, "best_s": times[best],
           "best_window": windows[best], "executors": executors}, open(out, "w"))
spark.stop()
"""


def publish(http: str, topic: str, partitions: int, messages: int, size: int) -> None:
    status, body, _ = http_request(
        "POST", f"{http}/topic/create?topic={topic}&partition_num={partitions}"
    )
    assert status == 200, body
    batch = 1000
    for p in range(partitions):
        for start in range(0, messages // partitions, batch):
            bodies = [b"%0*d" % (size, start + i) for i in range(batch)]
            payload = struct.pack(">i", len(bodies)) + b"".join(
                struct.pack(">i", len(b)) + b for b in bodies
            )
            url = f"{http}/mpub?topic={topic}&partition={p}&binary=true"
            status, body, _ = http_request("POST", url, payload)
            assert (status, body) == (200, b"OK"), body


class CpuSampler:
    """The machine's busy jiffies (/proc/stat's first line), sampled every ``interval``
    seconds in a thread while in the ``with`` block."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.samples: list[tuple[float, int, int]] = []  # (wall time, busy, total)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        idle = values[3] + values[4]  # idle and iowait
        return sum(values) - idle, sum(values)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), *self._read()))
            self._stop.wait(self.interval)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def cores_busy(self, start: float, end: float) -> float:
        """Cores busy on average from ``start`` to ``end`` (the samples just inside)."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return float("nan")
        (_, b0, t0), (_, b1, t1) = inside[0], inside[-1]
        return (os.cpu_count() or 1) * (b1 - b0) / max(t1 - t0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200, help="body bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="timed reads per job")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, nsqd_process(Path(tmp) / "data") as nsqd:
        root = Path(tmp)
        started = time.perf_counter()
        publish(nsqd.http, "bench", args.partitions, args.messages, args.size)
        print(f"published {args.messages:,} messages of {args.size} B over {args.partitions} "
              f"partitions in {time.perf_counter() - started:.1f}s", flush=True)  # fmt: skip
        (root / "job.py").write_text(JOB)
        archive = build(root / "dist")
        rates = {}
        for workers in (1, 2):
            with (
                StandaloneSpark(root / f"spark{workers}", workers=workers) as spark,
                CpuSampler() as cpu,
            ):
                out = root / f"read{workers}.json"
                done = spark.submit(
                    "--py-files", str(archive), "--conf", "spark.executor.memory=1g",
                    "--conf", f"spark.pyspark.python={sys.executable}",
                    str(root / "job.py"), nsqd.http.removeprefix("http://"), "bench",
                    str(args.rounds), str(out), timeout=900,
                )  # fmt: skip
                if done.returncode != 0:
                    raise SystemExit(done.stderr[-3000:])
                found = json.loads(out.read_text())
            assert found["messages"] == args.messages, found
            rates[workers] = found["messages"] / found["best_s"]
            busy = cpu.cores_busy(*found["best_window"])
            print(f"{workers} executor(s) of 1 core: read {found['messages']:,} messages in "
                  f"{found['best_s']:.2f}s, {rates[workers]:,.0f} msgs/s "
                  f"({found['executors']} executors; {busy:.2f} of the machine's "
                  f"{os.cpu_count()} cores busy meanwhile)", flush=True)  # fmt: skip
        print(f"two executors / one: {rates[2] / rates[1]:.2f}x")


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
