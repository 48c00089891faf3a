"""What the features beyond NSQ cost on the broker's delivery path; prints rates, asserts nothing.

An in-process broker (temp data dir, no sockets) publishes N 200-byte messages in MPUB-sized
batches, delivers them to one client with a large RDY window and FINs them all, timed from
the first publish to the last FIN. Runs: no feature (the baseline, measured in the same
run), a topic TTL, a channel attempts limit (dead letters armed, none happen), a topic
depth bound, and channel tracing on (events written by the tracer's thread). Each figure
is the best of ``--repeat`` runs.

    .venv/bin/python bench/features.py [--messages N] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from nsqpy.broker.broker import Broker
from nsqpy.broker.client import Client
from nsqpy.broker.topic import Topic
from nsqpy.options import NsqdOptions
from nsqpy.protocol.message import encode_message_id
from nsqpy.protocol.state import SUBSCRIBED
from nsqpy.testing import FrameSink as Sink

BODY = b"x" * 200
BATCH = 200


Setup = Callable[[Broker, Topic], None]


def run(messages: int, setup: Setup) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(NsqdOptions(data_path=tmp, sync_every=1 << 30, sync_timeout_ms=1 << 30))
        sink = Sink()
        client = Client(sink=sink, ready_count=1 << 30, state=SUBSCRIBED)
        channel = broker.subscribe(client, "bench", "c")
        topic = broker.topics["bench"]
        setup(broker, topic)
        start = time.perf_counter()
        done = 0
        while done < messages:
            n = min(BATCH, messages - done)
            broker.publish(topic, [BODY] * n)
            flushed, _ = broker.flush()
            broker.pump(flushed)
            now = broker.clock()
            for offset in range(done, done + n):
                channel.finish(client, 0, offset, encode_message_id(0, offset), now)
            done += n
        elapsed = time.perf_counter() - start
        assert len(sink.frames) == messages and channel.cursor.confirmed == messages
        broker.close()
        return messages / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cases: list[tuple[str, Setup]] = [
        ("no feature (baseline)", lambda b, t: None),
        ("topic TTL 1h", lambda b, t: b.features.set_ttl(t, 3_600_000)),
        ("channel max_attempts 5", lambda b, t: b.features.set_max_attempts(t, "c", 5, "")),
        ("topic max_depth 10M", lambda b, t: b.features.set_max_depth(t, 10_000_000, "refuse")),
        ("channel tracing on", lambda b, t: b.features.set_trace(t, "c", True)),
    ]
    print(
        f"# nsqpy broker features bench: {platform.node()} {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {args.messages:,} x {len(BODY)}-byte messages, "
        f"publish+deliver+FIN in process, best of {args.repeat}"
    )
    base = 0.0
    for name, setup in cases:
        best = max(run(args.messages, setup) for _ in range(args.repeat))
        base = base or best
        print(f"{name:<26} {best:>12,.0f} msgs/s   {best / base:6.2f} x baseline")


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
