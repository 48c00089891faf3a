"""Benchmark partitions, extended frames and ordered channels: prints figures, asserts nothing.

Starts a real ``nsqd`` (data in a temp dir), creates a topic with P partitions, publishes
N 200-byte messages with MPUB (batches of 200 in turn over the partitions) and N with
MPUB_EXT (a small JSON header each, spread by key), and drains them with one client per
run, on its own channel, RDY 500:

  - SUB + FIN of the plain messages: msgs/s
  - SUB + FIN of the messages with headers, plain frames: msgs/s
  - the same with ``extend_support`` (extended frames with the headers): msgs/s
  - SUB_ORDERED + FIN (one message in flight per partition): msgs/s

and a baseline of the same drain on a single-partition topic of plain messages.

Usage: .venv/bin/python bench/partitions.py [--messages N] [--partitions P]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from nsqpy.protocol.extend import encode_mpub_ext
from nsqpy.protocol.frames import FrameDecoder
from nsqpy.testing import WireClient, http_request, nsqd_process

BODY = b"x" * 200
BATCH = 200


def publish(port: int, topic: str, count: int, extended: bool) -> None:
    wire = WireClient(port, timeout=60)
    wire.send(b"  V2")
    sent = 0
    while sent < count:
        n = min(BATCH, count - sent)
        if extended:
            batch = [({"##partition_key": f"k{(sent + i) % 64}", "app": "bench"}, BODY)
                     for i in range(n)]  # fmt: skip
            wire.send(encode_mpub_ext(topic, batch))
        else:
            payload = struct.pack(">i", n) + (struct.pack(">i", len(BODY)) + BODY) * n
            wire.send(f"MPUB {topic}\n".encode() + struct.pack(">i", len(payload)) + payload)
        assert wire.read_frame() == (0, b"OK")
        sent += n
    wire.close()


def answers(decoder: FrameDecoder, data: bytes) -> tuple[bytes, int]:
    """What a consumer answers to ``data``: a FIN per message, a NOP per heartbeat; and how
    many messages it held."""
    out = []
    messages = 0
    for ftype, frame in decoder.feed(data):
        if ftype == 2:
            out.append(b"FIN " + frame[10:26] + b"\n")
            messages += 1
        elif frame == b"_heartbeat_":
            out.append(b"NOP\n")
    return b"".join(out), messages


def drain(port: int, topic: str, channel: str, count: int, verb: str, extend: bool) -> float:
    """Seconds to receive and FIN ``count`` messages with one connection."""
    wire = WireClient(port, timeout=60)
    wire.send(b"  V2")
    if extend:
        body = json.dumps({"extend_support": True}).encode()
        wire.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        assert wire.read_frame() == (0, b"OK")
    wire.send(f"{verb} {topic} {channel}\n".encode())
    assert wire.read_frame() == (0, b"OK")
    decoder = FrameDecoder()
    start = time.perf_counter()
    wire.send(b"RDY 500\n")
    got = 0
    while got < count:
        fins, messages = answers(decoder, wire.sock.recv(1 << 20))
        got += messages
        if fins:
            wire.send(fins)
    elapsed = time.perf_counter() - start
    wire.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    n, parts = args.messages, args.partitions
    print(f"# nsqpy partitions bench: {platform.node()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; {n} messages of {len(BODY)} bytes")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, nsqd_process(Path(tmp) / "data") as nsqd:
        base = f"{nsqd.http}/topic/create?topic="
        http_request("POST", f"{base}plain")
        http_request("POST", f"{base}parts&partition_num={parts}")
        http_request("POST", f"{base}spread&partition_num={parts}")
        http_request("POST", f"{nsqd.http}/channel/create?topic=spread&channel=c")
        for channel in ("plain", "ext", "ordered"):
            http_request("POST", f"{nsqd.http}/channel/create?topic=parts&channel={channel}")
        http_request("POST", f"{nsqd.http}/channel/create?topic=plain&channel=c")
        publish(nsqd.tcp_port, "plain", n, extended=False)
        publish(nsqd.tcp_port, "spread", n, extended=False)
        publish(nsqd.tcp_port, "parts", n, extended=True)
        runs = [
            ("1 partition, plain SUB (baseline)", "plain", "c", "SUB", False),
            (f"{parts} partitions, plain SUB", "spread", "c", "SUB", False),
            (f"{parts} partitions, headers, plain SUB", "parts", "plain", "SUB", False),
            (f"{parts} partitions, headers, SUB extend_support", "parts", "ext", "SUB", True),
            (
                f"{parts} partitions, headers, SUB_ORDERED",
                "parts",
                "ordered",
                "SUB_ORDERED",
                False,
            ),
        ]
        for label, topic, channel, verb, extend in runs:
            seconds = drain(nsqd.tcp_port, topic, channel, n, verb, extend)
            print(f"{label:<40} {n / seconds:>10,.0f} msgs/s")


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
