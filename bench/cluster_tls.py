"""Benchmark: replicated publishing with mutual TLS between the daemons against without,
same machine, same run, alternated (plain, TLS, plain, TLS, ...).

Each round starts a ``LocalCluster`` (etcd, one nsqlookupd, three nsqd on this machine),
plain or with ``--cluster-tls-*`` (a CA and certificates made for it), creates a topic of
one partition with three replicas, and publishes MPUB batches to its leader (one pipelined
connection, ``--inflight`` batches outstanding; a batch counts once acknowledged, i.e. once
both followers have it over their replication links), then with NSQ's own ``bench_writer``
when it is found (``--go-tools``). Prints messages/s of each round and the TLS / plain
ratio of the best of each. Clients publish in plain TCP both times: what TLS costs here is
the replication links' (and nothing else is on TLS in this topology).

    .venv/bin/python bench/cluster_tls.py [--rounds 2] [--batches 1500]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_publish import ops, publish, run_tool
from nsqpy.testing.cluster import LocalCluster
from vs_go import GO_TOOLS_HELP, TOOLS

TOPIC = "tls_bench"


def one_round(secure: bool, args: argparse.Namespace) -> tuple[float, float | None]:
    """(msgs/s of the Python publisher, bench_writer's ops/s or None) on a fresh cluster."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(tmp, lookupds=1, lease_ttl="10s", secure=secure) as cluster,
    ):
        for topic in (TOPIC, f"go_{TOPIC}"):
            status, _ = cluster.post(f"/topic/create?topic={topic}&partition_num=1&replicator=3")
            assert status == 200, status
            cluster.wait_for(
                lambda t=topic: len(cluster.partitions(t)[0]["isr"]) == 3,  # type: ignore[misc]
                30, f"the ISR of {topic} full",
            )  # fmt: skip
        leader = cluster.nodes[cluster.node_index(cluster.partitions(TOPIC)[0]["id"])]
        # (a warm-up, not timed: etcd names the ISR at once, but a follower takes a new
        # partition up at its member's next round, up to a second later, and the first
        # publishes wait for it)
        publish(leader.ports["TCP"], TOPIC, 20, args.batch, args.size, args.inflight)
        rate = publish(leader.ports["TCP"], TOPIC, args.batches, args.batch, args.size,
                       args.inflight)  # fmt: skip
        tools = Path(args.go_tools)
        if not (tools / "bench_writer").exists():
            return rate, None
        node = cluster.nodes[cluster.node_index(cluster.partitions(f"go_{TOPIC}")[0]["id"])]
        wrote = ops(run_tool(tools / "bench_writer",
                             f"--nsqd-tcp-address=127.0.0.1:{node.ports['TCP']}",
                             f"--topic=go_{TOPIC}", f"--runfor={args.runfor}",
                             f"--size={args.size}", f"--batch-size={args.batch}"))  # fmt: skip
        return rate, wrote


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="of each, alternated")
    parser.add_argument("--batches", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--inflight", type=int, default=16)
    parser.add_argument("--runfor", default="5s", help="bench_writer's duration")
    parser.add_argument(
        "--go-tools",
        default=str(TOOLS),
        help=f"{GO_TOOLS_HELP} (skipped when absent)",
    )
    args = parser.parse_args()
    print(f"# {platform.machine()} {platform.python_implementation()} {platform.python_version()}, "
          f"3 nsqd + nsqlookupd + etcd on this machine; topic of 1 partition x 3 replicas; "
          f"MPUB x{args.batch} of {args.size} B, {args.inflight} in flight")  # fmt: skip
    results: dict[bool, list[tuple[float, float | None]]] = {False: [], True: []}
    for n in range(args.rounds):
        for secure in (False, True):
            rate, wrote = one_round(secure, args)
            results[secure].append((rate, wrote))
            go = f", bench_writer {wrote:,.0f} msgs/s" if wrote is not None else ""
            print(f"round {n + 1} {'TLS  ' if secure else 'plain'}: {rate:,.0f} msgs/s{go}")
    best = {s: max(r for r, _ in results[s]) for s in results}
    print(f"TLS / plain (nsqpy publisher, best of {args.rounds}): {best[True] / best[False]:.2f}x")
    if all(w is not None for rs in results.values() for _, w in rs):
        go_best = {s: max(w or 0.0 for _, w in results[s]) for s in results}
        print(f"TLS / plain (bench_writer, best of {args.rounds}): "
              f"{go_best[True] / go_best[False]:.2f}x")  # fmt: skip


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
