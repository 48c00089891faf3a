"""Reading a topic on a standalone Spark cluster: one executor against two.

Publishes ``--messages`` messages of ``--size`` bytes over ``--partitions`` partitions to
one nsqd, then for 1 and 2 workers (one core each; a standalone master and its workers from
the pyspark package, ``nsqpy.testing.spark``) submits a job with ``spark-submit --master
spark://... --py-files <nsqpy spark package>`` that reads the whole topic with the ``nsq``
source ``--rounds`` times and reports the best read's rate (the read only: the driver's
and executors' start-up are left out, the first read warms them). Prints both rates and
their ratio. Everything runs on this machine, nsqd included, so the ratio says how the
read spreads over executors here, not what separate machines would give.

    .venv/bin/python bench/spark_standalone.py --messages 1000000
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
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
times = []
for _ in range(rounds + 1):
    start = time.perf_counter()
    count = frame.selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()[0]
    times.append(time.perf_counter() - start)
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
json.dump({"messages": count.n, "bytes": count.b, "best_s": min(times[1:]),
           "executors": executors}, open(out, "w"))
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
            with StandaloneSpark(root / f"spark{workers}", workers=workers) as spark:
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
            print(f"{workers} executor(s) of 1 core: read {found['messages']:,} messages in "
                  f"{found['best_s']:.2f}s, {rates[workers]:,.0f} msgs/s "
                  f"({found['executors']} executors)", flush=True)  # fmt: skip
        print(f"two executors / one: {rates[2] / rates[1]:.2f}x")


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
