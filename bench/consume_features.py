"""What the redesign's consumer features cost against plain delivery, over the wire; prints
figures, asserts nothing.

Starts one nsqpy ``nsqd`` (a process, fresh data dir) and measures, each pair side by side
in the same run, alternating plain and featured for ``--rounds`` rounds on fresh topics (a
backlog of ``--messages`` 200-byte messages each, drained to the end, FIN per message):

  - tracing: a channel with tracing on against the same without, filled by NSQ's own
    ``bench_writer`` and read by its ``bench_reader`` (go-nsq, RDY 2500) for ``--runfor``
    seconds when ``$NSQ_GO_TOOLS`` has them (``vs_go.GO_TOOLS_HELP``), else by the Python client below;
  - ``extend_support``: messages published with MPUB_EXT (small JSON headers each) read by
    a client that IDENTIFYs with ``extend_support`` (extended frames carry the headers),
    against plain messages read with plain frames;
  - ordered: SUB_ORDERED over ``--partitions`` partitions, one connection per partition
    (one message in flight each), against plain SUB of the same topic shape with as many
    connections.

The Python client is one thread with a selector over its connections, decoding frames and
answering each message with its FIN in one write per read; it shows as the client cost in
the figures of both sides alike.

    .venv/bin/python bench/consume_features.py [--messages N] [--rounds R] [--partitions P]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import selectors
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from nsqpy.protocol.frames import FrameDecoder
from nsqpy.testing import WireClient, http_get, http_request, nsqd_process
from partitions import answers, publish
from vs_go import TOOLS, cpu_seconds, run_tool

BODY = b"x" * 200
BATCH = 200


def drain(port: int, topic: str, count: int, *, conns: int = 1, verb: str = "SUB",
          extend: bool = False, rdy: int = 2500) -> float:  # fmt: skip
    """msgs/s to receive and FIN ``count`` messages over ``conns`` connections."""
    wires: list[WireClient] = []
    for _ in range(conns):
        wire = WireClient(port, timeout=60)
        wire.send(b"  V2")
        if extend:
            body = json.dumps({"extend_support": True}).encode()
            wire.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
            assert wire.read_frame()[0] == 0
        wire.send(f"{verb} {topic} ch\n".encode())
        assert wire.read_frame() == (0, b"OK")
        wires.append(wire)
    sel = selectors.DefaultSelector()
    for wire in wires:
        wire.sock.setblocking(False)
        sel.register(wire.sock, selectors.EVENT_READ, (wire, FrameDecoder()))
    start = time.perf_counter()
    for wire in wires:
        wire.sock.sendall(f"RDY {rdy}\n".encode())
    got = 0
    while got < count:
        for key, _ in sel.select(10):
            wire, decoder = key.data
            data = wire.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("nsqd closed the connection")
            out, messages = answers(decoder, data)
            got += messages
            if out:
                try:  # (FINs fit a socket buffer: the rest rarely waits)
                    sent = wire.sock.send(out)
                except BlockingIOError:
                    sent = 0
                if sent < len(out):
                    wire.sock.setblocking(True)
                    wire.sock.sendall(out[sent:])
                    wire.sock.setblocking(False)
    elapsed = time.perf_counter() - start
    sel.close()
    for wire in wires:
        wire.close()
    return count / elapsed


def go_traced(port: int, topic: str, seconds: float) -> float:
    """msgs/s of NSQ's ``bench_reader`` (channel ``ch``) over ``seconds``, on a backlog
    ``bench_writer`` wrote for twice as long (so that the reader never runs dry)."""
    common = [f"--nsqd-tcp-address=127.0.0.1:{port}", f"--topic={topic}", "--size=200"]
    run_tool(TOOLS, "bench_writer", *common, f"--runfor={2 * seconds}s", "--batch-size=200")
    return run_tool(TOOLS, "bench_reader", *common, "--channel=ch", f"--runfor={seconds}s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--runfor", type=float, default=3.0, help="bench_reader's read, seconds")
    args = ap.parse_args()
    n, parts = args.messages, args.partitions
    use_go = (TOOLS / "bench_reader").exists()
    print(f"# nsqpy consumer features bench: {platform.node()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; {n:,} x {len(BODY)}-byte messages per run, "
          f"{args.rounds} rounds, medians")  # fmt: skip
    results: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}  # nsqd's CPU microseconds per message
    with tempfile.TemporaryDirectory() as tmp, nsqd_process(Path(tmp) / "data") as nsqd:
        port, http = nsqd.tcp_port, nsqd.http

        def topic(name: str, partitions: int = 1, trace: bool = False) -> str:
            http_request("POST", f"{http}/topic/create?topic={name}&partition_num={partitions}")
            http_request("POST", f"{http}/channel/create?topic={name}&channel=ch")
            if trace:
                http_request("POST", f"{http}/message/trace/enable?topic={name}&channel=ch")
            return name

        def record(label: str, rate: float) -> None:
            results.setdefault(label, []).append(rate)

        def timed(label: str, run: Callable[[], float], messages: int) -> None:
            """``run`` (a drain: msgs/s), and nsqd's CPU time per message meanwhile."""
            before = cpu_seconds(nsqd.pid)
            record(label, run())
            cpu.setdefault(label, []).append((cpu_seconds(nsqd.pid) - before) / messages * 1e6)

        for r in range(args.rounds):
            plain = topic(f"plain{r}")
            publish(port, plain, n, extended=False)
            timed("plain frames", partial(drain, port, plain, n), n)
            ext = topic(f"ext{r}")
            publish(port, ext, n, extended=True)
            timed("extend_support frames", partial(drain, port, ext, n, extend=True), n)
            for verb in ("SUB", "SUB_ORDERED"):
                name = topic(f"{verb.lower()}{r}", parts)
                publish(port, name, n, extended=False)
                timed(f"{parts} partitions x {parts} conns, {verb}",
                      partial(drain, port, name, n, conns=parts, verb=verb), n)  # fmt: skip
            for traced in (False, True):
                name = topic(f"trace{r}{int(traced)}", trace=traced)
                if use_go:
                    rate = go_traced(port, name, args.runfor)
                else:
                    publish(port, name, n, extended=False)
                    rate = drain(port, name, n)
                record(f"tracing {'on ' if traced else 'off'}", rate)
            for _ in range(6):  # the trace writer catches up (a query waits for it, 5 s at most)
                http_get(f"{http}/message/trace?trace_id=1")
            # (each round's topics go: the next round starts from the same disk state)
            for name in (f"trace{r}0", f"trace{r}1", plain, ext, f"sub{r}", f"sub_ordered{r}"):
                http_request("POST", f"{http}/topic/delete?topic={name}")
    print(f"(tracing drained by {'bench_reader' if use_go else 'the Python client'})")
    med = {label: statistics.median(rates) for label, rates in results.items()}
    for label, rate in med.items():
        per = f"  nsqd {statistics.median(cpu[label]):.2f} us CPU/msg" if label in cpu else ""
        print(f"{label:<36} {rate:>10,.0f} msgs/s{per}   rounds: "
              + ", ".join(f"{x:,.0f}" for x in results[label]))  # fmt: skip
    print("ratios:")
    print(f"  tracing on / off                 {med['tracing on '] / med['tracing off']:.2f}x")
    print(f"  extend_support / plain           "
          f"{med['extend_support frames'] / med['plain frames']:.2f}x")  # fmt: skip
    print(f"  SUB_ORDERED / SUB ({parts} partitions) "
          f"{med[f'{parts} partitions x {parts} conns, SUB_ORDERED'] / med[f'{parts} partitions x {parts} conns, SUB']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
