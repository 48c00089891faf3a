"""``nsqpy pipeline <archive|replay|transform>``: the Spark pipelines on the command line.

Owns argument parsing and the SparkSession: ``local[*]`` unless ``--master`` is given or
Spark already has a master (``spark-submit --master``); workers run this interpreter
(``PYSPARK_PYTHON`` defaults to ``sys.executable``); sessions run in UTC so archive
dates are UTC dates. A session that exists already (a notebook, a test) is used and left
running. Also runnable as a file for ``spark-submit``. Imports pyspark and nsqpy.spark
only once the arguments are parsed and PySpark is known to be there: without the
``spark`` extra a run ends with one line saying so.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from nsqpy.errors import NsqError

PROG = "nsqpy pipeline"


def _endpoint_args(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    group = parser.add_mutually_exclusive_group(required=not prefix)
    what = "the target " if prefix else ""
    group.add_argument(
        f"--{prefix}nsqd", default="", help=f"{what}nsqd HTTP address(es), comma-separated"
    )
    group.add_argument(
        f"--{prefix}lookupd", default="", help=f"{what}nsqlookupd HTTP address(es), comma-separated"
    )


def _ssl_args(parser: argparse.ArgumentParser) -> None:
    for name, what in (("cafile", "the CA of nsqd's certificate: HTTPS to nsqd"),
                       ("certfile", "a client certificate for nsqd"),
                       ("keyfile", "the key of --ssl-certfile")):  # fmt: skip
        parser.add_argument(f"--ssl-{name}", default=None, help=f"{what} (nsq.ssl.{name})")


def ssl_options(args: argparse.Namespace) -> dict[str, str]:
    """The source's and sink's ``nsq.ssl.*`` options from ``--ssl-*``."""
    names = ("cafile", "certfile", "keyfile")
    return {f"nsq.ssl.{n}": v for n in names if (v := getattr(args, f"ssl_{n}", None))}


def _spark_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", default=None, help="Spark master (default: local[*])")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting (repeatable)",
    )
    parser.add_argument("--quiet", action="store_true", help="no Spark stage progress bar")


def _stream_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint", required=True, help="checkpoint directory (offsets and state)"
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="process what is there now, then stop (Trigger.AvailableNow)",
    )
    parser.add_argument(
        "--trigger", default="5 seconds", help="micro-batch interval (default: 5 seconds)"
    )
    parser.add_argument(
        "--starting-offsets", default="earliest", help="earliest, latest or JSON (first run only)"
    )
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        default=None,
        help="at most this many messages per micro-batch",
    )
    parser.add_argument(
        "--no-fail-on-data-loss",
        action="store_true",
        help="skip offsets removed by retention with a warning instead of failing",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Spark pipelines over nsqpy topics.")
    sub = parser.add_subparsers(
        dest="pipeline", required=True, metavar="{archive,replay,transform}"
    )

    p = sub.add_parser(
        "archive", help="a topic into date-partitioned Parquet (streaming, exactly-once)"
    )
    p.add_argument("--topic", required=True)
    p.add_argument(
        "--output", required=True, help="Parquet directory (partitioned by date=YYYY-MM-DD)"
    )
    p.add_argument(
        "--writer",
        choices=("auto", "arrow", "spark"),
        default="auto",
        help="who writes the Parquet: the tasks with pyarrow (arrow) or Spark's file sink "
        "(spark); auto: arrow for a local output, spark for others (default: auto)",
    )
    _endpoint_args(p)
    _stream_args(p)
    _ssl_args(p)
    _spark_args(p)

    p = sub.add_parser("replay", help="Parquet rows (their body column) into a topic (batch)")
    p.add_argument("--input", required=True, help="Parquet directory, e.g. an archive")
    p.add_argument("--topic", required=True, help="the topic to publish to")
    p.add_argument("--where", default=None, help="a Spark SQL condition selecting the rows")
    p.add_argument(
        "--unordered", action="store_true", help="publish in parallel, in no particular order"
    )
    _endpoint_args(p)
    _ssl_args(p)
    _spark_args(p)

    p = sub.add_parser(
        "transform", help="a topic through Spark SQL expressions into another topic (streaming)"
    )
    p.add_argument("--topic", required=True, help="the topic to read")
    p.add_argument("--to-topic", required=True, help="the topic to publish to")
    p.add_argument("--select", action="append", default=None, metavar="EXPR",
                   help="a Spark SQL expression giving body (and optionally topic, partition_key, defer_ms); repeatable")  # fmt: skip
    p.add_argument("--where", default=None, help="a Spark SQL condition selecting the messages")
    _endpoint_args(p)
    _endpoint_args(p, prefix="to-")
    _stream_args(p)
    _ssl_args(p)
    _spark_args(p)
    return parser


def spark_session(
    master: str | None, confs: Sequence[str], quiet: bool, app: str
) -> tuple[object, bool]:
    """(session with ``nsq`` registered, whether we created it and so must stop it)."""
    settings = dict(_conf_pair(c) for c in confs)
    # (a session made in this process takes its workers' Python from PYSPARK_PYTHON only:
    # spark.pyspark.python is spark-submit's, so a --conf giving it is applied here)
    if "spark.pyspark.python" in settings:
        os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    from nsqpy.spark.source import NsqDataSource

    session = SparkSession.getActiveSession()
    owned = session is None
    shipped = None
    if session is None and master and not master.startswith("local"):
        # (a cluster's executors get nsqpy's Spark side from the job, as with spark-submit
        # --py-files: nsqpy spark package. The Python workers this driver's JVM starts,
        # which plan the data source, find it on PYTHONPATH, which the JVM inherits.)
        from nsqpy.spark.package import build

        shipped = str(build(Path(tempfile.gettempdir()) / f"nsqpy-spark-{os.getuid()}"))
    path = os.environ.get("PYTHONPATH")
    if shipped is not None and shipped not in (path or "").split(os.pathsep):
        os.environ["PYTHONPATH"] = shipped + (os.pathsep + path if path else "")
    if session is None:
        builder = SparkSession.builder.appName(app)
        if master:
            builder = builder.master(master)
        elif not _under_spark_submit() and not SparkConf().contains("spark.master"):
            builder = builder.master("local[*]")
        builder = builder.config("spark.sql.session.timeZone", "UTC")
        builder = builder.config("spark.ui.showConsoleProgress", str(not quiet).lower())
        for key, value in settings.items():
            builder = builder.config(key, value)
        try:
            session = builder.getOrCreate()
        finally:  # (the JVM took its environment; children of this process need not)
            if path is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = path
        session.sparkContext.setLogLevel("WARN")
        if shipped is not None:
            session.sparkContext.addPyFile(shipped)
    else:
        session.conf.set(
            "spark.sql.session.timeZone", settings.get("spark.sql.session.timeZone", "UTC")
        )
    session.dataSource.register(NsqDataSource)
    return session, owned


def _under_spark_submit() -> bool:
    """True when spark-submit started this driver: its JVM is already running with the
    ``--master`` given there (or spark-submit's own default), which must be left alone.
    spark-submit hands its JVM's gateway to the Python driver in these variables."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _conf_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"{PROG}: --conf wants KEY=VALUE, got {text!r}")
    return key.strip(), value


def run(args: argparse.Namespace, spark: object) -> int:
    from pyspark.sql import SparkSession

    from nsqpy.spark import pipelines as pl

    assert isinstance(spark, SparkSession)
    source = pl.Endpoint(args.nsqd, args.lookupd, ssl_options(args))
    if args.pipeline == "replay":
        n = pl.replay(spark, args.input, source, args.topic, args.where, not args.unordered)
        print(f"replayed {n} messages into {args.topic}", file=sys.stderr)
        return 0
    stream = pl.StreamSettings(
        checkpoint=args.checkpoint,
        once=args.once,
        trigger=args.trigger,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        fail_on_data_loss=not args.no_fail_on_data_loss,
    )
    if args.pipeline == "archive":
        query = pl.archive(spark, source, args.topic, args.output, stream, args.writer)
    else:
        target = pl.Endpoint(args.to_nsqd, args.to_lookupd, ssl_options(args))
        if not target.nsqd and not target.lookupd:
            target = source
        selects = args.select or ["body"]
        query = pl.transform(
            spark, source, args.topic, target, args.to_topic, selects, args.where, stream
        )
    pl.run_stream(query)
    return 0


def missing_spark() -> str | None:
    """Why the ``spark`` extra cannot run here (a module it needs is missing), else None."""
    for module in ("pyspark", "pyarrow", "pandas", "numpy"):
        try:
            importlib.import_module(module)
        except ImportError:
            return (
                f"{module} is not installed; the pipelines need the spark extra: "
                "pip install 'nsqpy[spark]' (and Java 17)"
            )
    return None


def announce(spark: object, pipeline: str) -> None:
    """One line on where the pipeline runs: Spark's version, master and worker Python."""
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    context = spark.sparkContext
    python = context.pythonExec or os.environ.get("PYSPARK_PYTHON", "")
    print(
        f"{PROG} {pipeline}: Spark {spark.version} on {context.master}, "
        f"application {context.applicationId}, workers run {python}",
        file=sys.stderr,
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    why = missing_spark()
    if why is not None:
        print(f"{PROG}: {why}", file=sys.stderr)
        return 1
    spark, owned = spark_session(args.master, args.conf, args.quiet, f"nsqpy {args.pipeline}")
    announce(spark, args.pipeline)
    try:
        return run(args, spark)
    except NsqError as exc:
        print(f"{PROG} {args.pipeline}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if type(exc).__module__.startswith(("pyspark", "py4j")):
            print(f"{PROG} {args.pipeline}: {summarize(str(exc))}", file=sys.stderr)
            return 1
        raise
    finally:
        if owned:
            spark.stop()  # type: ignore[attr-defined]


_CAUSE = re.compile(r"^(nsqpy\.[\w.]+: .+)$", re.MULTILINE)


def summarize(text: str, lines: int = 8) -> str:
    """The cause of a Spark error: our own exception's line when there is one, else the top.

    Spark's messages carry whole Python and JVM traces; an nsqpy error raised in a worker
    shows there as ``nsqpy.<module>.<Class>: <message>``.
    """
    found = _CAUSE.findall(text)
    if found:
        return str(found[-1])
    return "\n".join([line for line in text.splitlines() if line.strip()][:lines])


if __name__ == "__main__":
    sys.exit(main())
