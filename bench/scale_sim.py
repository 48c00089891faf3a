"""Benchmark: the control plane's decisions at scale, in the deterministic simulation.

Runs ``nsqpy.testing.control_sim.run_scale``: ``--nodes`` nodes, ``--topics`` x
``--partitions`` partitions of 3 replicas placed by the real placement, a simulated etcd
and nodes (leases, log ends, catch-up), and the real coordinator decisions (``plan``,
``rebalance``) on a watched view, each written change checked (no two leaders of an epoch,
epochs grow, level-triggered). The node leading most partitions is killed; then
``--joining`` new nodes join and the rebalancer runs. Prints the placement's evenness, the
CPU of a coordinator round (healthy, during the failover, the slowest of the run), the
rounds (simulated seconds) until every partition is led and every ISR full again, the
rebalancer's moves, and flaps (a partition's leader and ISR changed back to what they just
were). Not run in CI.

    .venv/bin/python bench/scale_sim.py                         # 100 nodes, 10,000 partitions
    .venv/bin/python bench/scale_sim.py --busy                  # each partition its traffic
    .venv/bin/python bench/scale_sim.py --nodes 20 --partitions 50
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from nsqpy.testing.control_sim import run_scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--topics", type=int, default=40)
    parser.add_argument("--partitions", type=int, default=250, help="per topic")
    parser.add_argument("--joining", type=int, default=2)
    parser.add_argument("--rebalance-rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--busy",
        action="store_true",
        help="every partition has its own traffic, which the rebalancer weighs",
    )
    args = parser.parse_args()
    print(f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}")
    started = time.perf_counter()
    out = run_scale(
        nodes=args.nodes, topics=args.topics, partitions=args.partitions,
        joining=args.joining, seed=args.seed, rebalance_rounds=args.rebalance_rounds,
        busy=args.busy,
    )  # fmt: skip
    ms = 1000
    print(f"{out.nodes} nodes, {out.partitions} partitions x 3 replicas, "
          f"{'each with its own traffic' if args.busy else 'idle'} "
          f"(simulated in {time.perf_counter() - started:.0f} s)")  # fmt: skip
    print(f"  placement: {out.place_cpu_s * ms:.0f} ms CPU; replicas per node "
          f"{out.replicas_per_node[0]}..{out.replicas_per_node[1]}, leads per node "
          f"{out.leaders_per_node[0]}..{out.leaders_per_node[1]}")  # fmt: skip
    print(f"  coordinator round, healthy: {out.steady_round_cpu_s * ms:.0f} ms CPU")
    print(f"  killed a node leading {out.killed_leading} partitions: every one led again "
          f"{out.failover_rounds} round(s) after its lease expired, {out.failover_changes} "
          f"changes; slowest round {out.failover_round_cpu_s * ms:.0f} ms CPU")  # fmt: skip
    print(f"  every ISR full again after {out.repair_rounds} more rounds (repair delay 6 s)")
    print(f"  {out.joined} nodes joined: {out.rebalance_moves} moves in "
          f"{out.rebalance_rounds} rounds; replicas per node now "
          f"{out.balanced_replicas_per_node[0]}..{out.balanced_replicas_per_node[1]}")  # fmt: skip
    print(f"  slowest coordinator round of the run: {out.round_cpu_s * ms:.0f} ms CPU; "
          f"flaps: {out.flaps}")  # fmt: skip


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
