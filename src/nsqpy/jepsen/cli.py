"""``nsqpy jepsen``: run the fault harness, or check a run's history again.

    nsqpy jepsen [--profile short|long] [--seed N] [--nodes 3|5] [--out DIR]
                 [--unsafe-ack-before-replication]
    nsqpy jepsen check DIR            the checker and report again on DIR/history.jsonl

A run needs root: it makes the network namespaces (``netns.Network``), runs
``jepsen.harness`` inside the clients' namespace, and always tears the namespaces down at
the end, also after Ctrl-C, SIGTERM or a crash of the harness (a harness killed with
SIGKILL leaves them for the next run's ``netns.clean_stale``). Results go to ``--out``
(default ``jepsen-results/<profile>-seed<N>``): ``summary.txt``, ``timeline.png``,
``result.json``, ``history.jsonl``, ``schedule.json``, and every daemon's and client's log
under ``logs/``. Exit status: 0 valid, 1 the checker found a violation, 2 no run was made
(the message says why).

``--unsafe-ack-before-replication`` starts nsqd with a test-only switch that answers a
publish before its replicas have it: a run with it must report lost values (the checker's
proof that it can see them).
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from nsqpy.jepsen.harness import RunConfig, hosts_for
from nsqpy.jepsen.netns import Network, clean_stale, preflight
from nsqpy.jepsen.schedule import KINDS, PROFILES, schedule_length
from nsqpy.testing.processes import die_with_parent


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nsqpy jepsen",
        description="Fault-test a three-node nsqpy cluster in network namespaces and check "
        "that no acknowledged message is lost (needs root).",
    )
    p.add_argument("--profile", choices=sorted(PROFILES), default="short")
    p.add_argument("--seed", type=int, default=None, help="the schedule's seed (default: random)")
    p.add_argument("--nodes", type=int, choices=(3, 5), default=3, help="nsqd in the cluster")
    p.add_argument("--out", default=None, help="the run's directory")
    p.add_argument(
        "--cycles", type=int, default=0, help="steps of each kind (default: the profile's)"
    )
    p.add_argument("--kinds", default="", help="only these nemeses, comma-separated "
                   f"(default every kind: {','.join(KINDS)})")  # fmt: skip
    p.add_argument("--unsafe-ack-before-replication", action="store_true",
                   help="test only: nsqd acknowledges before replicating (must lose data)")  # fmt: skip
    return p


def check_again(directory: str) -> int:
    from nsqpy.jepsen.checker import check
    from nsqpy.jepsen.clients import CHANNELS
    from nsqpy.jepsen.history import read_history
    from nsqpy.jepsen.report import summary_text, write_report

    path = Path(directory) / "history.jsonl"
    if not path.exists():
        print(f"nsqpy jepsen check: no {path}", file=sys.stderr)
        return 2
    events = read_history([path])
    result = check(events, CHANNELS)
    write_report(Path(directory), events, result, title=f"nsqpy jepsen, {directory}")
    print(summary_text(result, f"nsqpy jepsen, {directory}"))
    return 0 if result.valid else 1


def _budget(config: RunConfig) -> float:
    """Seconds a run may take at most: its schedule, the drain, and ten minutes for
    starting, healing and reporting (every wait inside has its own bound; this one is
    the last resort)."""
    profile = config.run_profile()
    return schedule_length(config.steps(), profile) + profile.drain + 600.0


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check"]:
        if len(argv) != 2:
            print("usage: nsqpy jepsen check DIR", file=sys.stderr)
            return 2
        return check_again(argv[1])
    args = _parser().parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        print(f"nsqpy jepsen: unknown nemesis {', '.join(unknown)} (kinds: {', '.join(KINDS)})",
              file=sys.stderr)  # fmt: skip
        return 2
    problem = preflight()
    if problem:
        print(f"nsqpy jepsen: {problem}", file=sys.stderr)
        return 2
    for stale in clean_stale():
        print(f"nsqpy jepsen: removed {stale}, left by a harness that died", file=sys.stderr)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    out = Path(args.out or f"jepsen-results/{args.profile}-seed{seed}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _terminate)
    net = Network(hosts_for(args.nodes))
    try:
        net.create()
        config = RunConfig(
            profile=args.profile, seed=seed, out=str(out), prefix=net.prefix,
            hosts=net.hosts, netem=bool(net.netem),
            unsafe_ack=args.unsafe_ack_before_replication, kinds=kinds, cycles=args.cycles,
        )  # fmt: skip
        print(f"nsqpy jepsen: profile {args.profile}, seed {seed}, results in {out}", flush=True)
        inner = [*net.exec_prefix("c"), sys.executable, "-m", "nsqpy.jepsen.harness",
                 config.to_json()]  # fmt: skip
        budget = _budget(config)
        try:
            return subprocess.run(die_with_parent(inner), timeout=budget).returncode
        except subprocess.TimeoutExpired:  # (the child was killed by subprocess.run)
            print(f"nsqpy jepsen: the run took more than {budget:.0f}s; stopped", file=sys.stderr)
            return 2
    finally:
        net.destroy()


if __name__ == "__main__":
    sys.exit(main())
