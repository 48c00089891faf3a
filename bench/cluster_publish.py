"""Benchmark: publishing to a replicated partition against an unreplicated one, same
cluster, same run (replication must not undo group commit).

Starts a ``LocalCluster`` (etcd, 2 nsqlookupd, 3 nsqd, all on this machine), creates
topics with one, two and three replicas (one partition each), and publishes MPUB batches
to each topic's leader over one pipelined TCP connection (``--inflight`` batches
outstanding), counting only acknowledged messages. Prints messages/s and the
replicated/plain ratios. Then, when NSQ's own ``bench_writer`` and ``bench_reader`` are
found (``--go-tools`` or ``$NSQ_GO_TOOLS``, see ``vs_go.GO_TOOLS_HELP``), the same with
them against fresh topics: publishing (go-nsq, MPUB of ``--batch``) for ``--runfor``,
then consuming what it wrote (RDY 2500, a FIN per message) for ``--readfor``, short
enough that the reader never runs out of messages; with ``bench_writer``, also the CPU
each nsqd spent per batch written (from ``/proc``: the leader, then the others; user and
system apart) and ``bench_writer``'s own, then what replication adds per batch against a
single node's batch and the tool's, and the ratio a CPU-bound machine would give with it
and without its user-space part (the kernel's part: sockets, wake-ups, the followers'
writes and fsyncs).
``--sync-every`` etc. are nsqd's defaults (fsync on its schedule, not per batch).
"""

from __future__ import annotations

import argparse
import platform
import re
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.wire import mpub

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_go import GO_TOOLS_HELP, TOOLS, cpu_split


def publish(port: int, topic: str, batches: int, batch: int, size: int, inflight: int) -> float:
    body = b"x" * size
    frame = mpub(topic, [body] * batch)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"  V2")
    buf = bytearray()
    sent = acked = 0
    started = time.perf_counter()
    while acked < batches:
        while sent < batches and sent - acked < inflight:
            sock.sendall(frame)
            sent += 1
        buf += sock.recv(1 << 16)
        while len(buf) >= 8:
            (length,) = struct.unpack(">I", buf[:4])
            if len(buf) < 4 + length:
                break
            kind, data = struct.unpack(">I", buf[4:8])[0], bytes(buf[8 : 4 + length])
            del buf[: 4 + length]
            if kind == 0 and data == b"_heartbeat_":
                sock.sendall(b"NOP\n")
                continue
            assert kind == 0 and data == b"OK", (kind, data)
            acked += 1
    elapsed = time.perf_counter() - started
    sock.close()
    return batches * batch / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--inflight", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--go-tools",
        default=str(TOOLS),
        help=f"{GO_TOOLS_HELP} (skipped when absent)",
    )
    parser.add_argument("--runfor", default="5s", help="bench_writer's duration")
    parser.add_argument(
        "--readfor",
        default="2s",
        help="bench_reader's duration: shorter than it takes to drain what bench_writer wrote"
        " (or the figure is what was written, not how fast it is read)",
    )
    args = parser.parse_args()
    print(f"# {platform.machine()} {platform.python_implementation()} {platform.python_version()}, "
          f"3 nsqd + 2 nsqlookupd + etcd on this machine; MPUB x{args.batch} of {args.size} B, "
          f"{args.inflight} in flight")  # fmt: skip
    topics = {"plain": 1, "replicated2": 2, "replicated3": 3}
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(tmp, lease_ttl="10s") as cluster:
        for name, replicas in topics.items():
            status, _ = cluster.post(
                f"/topic/create?topic={name}&partition_num=1&replicator={replicas}"
            )
            assert status == 200, status
        cluster.wait_for(
            lambda: all(len(cluster.partitions(n)[0]["isr"]) == r for n, r in topics.items()),
            30,
            "every ISR full",
        )
        leader = {name: cluster.nodes[cluster.node_index(cluster.partitions(name)[0]["id"])]
                  for name in topics}  # fmt: skip
        results: dict[str, list[float]] = {name: [] for name in topics}
        for _ in range(args.rounds):
            for name in topics:
                port = leader[name].ports["TCP"]
                rate = publish(port, name, args.batches, args.batch, args.size, args.inflight)
                results[name].append(rate)
        for name, rates in results.items():
            shown = " / ".join(f"{r:,.0f}" for r in rates)
            print(f"{name:<12} {shown} msgs/s")
        for name in topics:
            if name != "plain":
                ratio = max(results[name]) / max(results["plain"])
                print(f"{name} / plain: {ratio:.2f}x (best of {args.rounds})")
        tools = Path(args.go_tools)
        if not (tools / "bench_writer").exists():
            print(f"# no NSQ bench tools in {tools}: skipped")
            return
        go: dict[str, tuple[float, float]] = {}
        costs: dict[str, tuple[list[tuple[float, float]], float]] = {}
        for name, replicas in topics.items():
            topic = f"go_{name}"  # (a fresh topic: bench_reader drains what bench_writer wrote)
            status, _ = cluster.post(
                f"/topic/create?topic={topic}&partition_num=1&replicator={replicas}"
            )
            assert status == 200, status
            cluster.wait_for(
                lambda t=topic, r=replicas: len(cluster.partitions(t)[0]["isr"]) == r,  # type: ignore[misc]
                30,
                f"the ISR of {topic} full",
            )
            lead = cluster.node_index(cluster.partitions(topic)[0]["id"])
            node = cluster.nodes[lead]
            common = [f"--nsqd-tcp-address=127.0.0.1:{node.ports['TCP']}", f"--topic={topic}",
                      f"--size={args.size}"]  # fmt: skip
            # (each nsqd's CPU per batch written, from /proc: the leader first)
            pids = [n.proc.pid for i, n in sorted(enumerate(cluster.nodes), key=lambda x: x[0] != lead)
                    if n.proc is not None]  # fmt: skip
            before = [cpu_split(pid) for pid in pids]
            tool_before = children_cpu()
            started = time.perf_counter()
            wrote = ops(run_tool(tools / "bench_writer", *common, f"--runfor={args.runfor}",
                                 f"--batch-size={args.batch}"))  # fmt: skip
            batches = wrote * (time.perf_counter() - started) / args.batch
            per = 1e6 / batches
            cpu = [
                ((u - bu) * per, (k - bk) * per)
                for (u, k), (bu, bk) in zip(map(cpu_split, pids), before, strict=True)
            ]
            tool = (children_cpu() - tool_before) * per
            costs[name] = (cpu, tool)
            shown = [f"{u + k:.0f} (user {u:.0f}, system {k:.0f})" for u, k in cpu]
            print(f"bench_writer {name}: CPU per batch of {args.batch}: leader {shown[0]}, "
                  f"the others {', '.join(shown[1:])}; bench_writer {tool:.0f} µs")  # fmt: skip
            read = ops(run_tool(tools / "bench_reader", *common, f"--runfor={args.readfor}"))
            go[name] = (wrote, read)
            print(f"bench_writer / bench_reader {name:<12} {wrote:>12,.0f} / {read:>10,.0f} ops/s")
        for name in topics:
            if name != "plain":
                print(
                    f"NSQ tools, {name} / plain: publish {go[name][0] / go['plain'][0]:.2f}x,"
                    f" consume {go[name][1] / go['plain'][1]:.2f}x"
                )
        print_budget(costs)


def children_cpu() -> float:
    """CPU seconds of the child processes waited for so far (the bench tools)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def print_budget(costs: dict[str, tuple[list[tuple[float, float]], float]]) -> None:
    """What replication adds per batch with ``bench_writer``, split into user and system
    CPU, against what a single node's batch costs with the tool's own: on a machine the
    processes keep busy, a ratio near (single + tool) / (single + tool + added). The
    kernel's share of what replication adds (sockets between the nsqd, their wake-ups, the
    followers' page cache writes and fsyncs) is the part leaner nsqd code does not remove
    (fewer wake-ups would remove some of it)."""
    plain_cpu, plain_tool = costs["plain"]
    plain_leader = plain_cpu[0]
    base = sum(plain_leader) + plain_tool
    for name, (cpu, _tool) in costs.items():
        if name == "plain":
            continue
        user = cpu[0][0] - plain_leader[0] + sum(u for u, _ in cpu[1:])
        system = cpu[0][1] - plain_leader[1] + sum(k for _, k in cpu[1:])
        print(f"{name}: replication adds {user + system:.0f} µs of CPU per batch (user "
              f"{user:.0f}, system {system:.0f}) to a single node's {base:.0f} with "
              f"bench_writer's; CPU-bound model: {base / (base + user + system):.2f}x, "
              f"{base / (base + system):.2f}x with no user-space cost of replication")  # fmt: skip


def run_tool(tool: Path, *args: str) -> str:
    done = subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def ops(output: str) -> float:
    """The ops/s of an NSQ bench tool's last line."""
    found = re.findall(r"([0-9.]+)ops/s", output)
    if not found:
        raise RuntimeError(f"no ops/s in: {output[-500:]}")
    return float(found[-1])


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
