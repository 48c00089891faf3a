"""A job ``tests/spark/test_standalone.py`` submits with spark-submit to a standalone
cluster: it reads a topic with the ``nsq`` source on the cluster's executors and writes
what it read, and where its tasks ran, as JSON. argv: nsqd HTTP address, topic, output.
Its executors find nsqpy only where spark-submit put it (``--py-files``, or the packed
environment of ``--archives``)."""

from __future__ import annotations

import json
import sys


def where_task_ran(_: object) -> tuple[str, str, str]:
    import pyarrow  # type: ignore[import-untyped]

    import nsqpy

    return sys.executable, nsqpy.__file__ or "", pyarrow.__file__ or ""


def main() -> None:
    from pyspark.sql import SparkSession

    from nsqpy.spark import NsqDataSource

    address, topic, out = sys.argv[1:4]
    spark = SparkSession.builder.appName("nsqpy-standalone").getOrCreate()
    spark.dataSource.register(NsqDataSource)
    frame = spark.read.format("nsq").option("nsqd", address).option("topic", topic).load()
    rows = frame.select("partition", "offset", "body").collect()
    context = spark.sparkContext
    ran = context.parallelize(range(8), 8).map(where_task_ran).distinct().collect()
    with open(out, "w") as f:
        json.dump({
            "rows": [[r["partition"], r["offset"], bytes(r["body"]).decode()] for r in rows],
            "spark_partitions": frame.rdd.getNumPartitions(),
            "executors": context._jsc.sc().getExecutorMemoryStatus().size() - 1,
            "tasks_ran": sorted(map(list, ran)),
        }, f)  # fmt: skip
    spark.stop()


if __name__ == "__main__":
    main()
