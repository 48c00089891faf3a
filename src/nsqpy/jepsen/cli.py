"""``nsqpy jepsen``: run the fault harness, or check a run's history again.

    nsqpy jepsen [--profile short|long] [--seed N] [--nodes 3|5] [--out DIR]
                 [--unsafe-ack-before-replication]
    nsqpy jepsen check PATH [--out DIR]   the checker and report again on a history
    nsqpy jepsen publish RUN PREFIX       a run stored as PREFIX.png, PREFIX.history.jsonl.xz,
                                          PREFIX.result.json.xz, PREFIX.run.json

``check`` takes a run's directory (its ``history.jsonl``, also compressed) or a history
file (``.jsonl``, ``.jsonl.gz``, ``.jsonl.xz``). It prints the summary, writes the report
into ``--out`` (default: into the directory it was given; nowhere for a file) and, when a
result is stored with the history (``archive.stored_result``), says whether the new check
agrees with it; its status is 1 when the history is invalid or disagrees.

A run needs root: it makes the network namespaces (``netns.Network``), runs
``jepsen.harness`` inside the clients' namespace, and always tears the namespaces down at
the end, also after Ctrl-C, SIGTERM or a crash of the harness (a harness killed with
SIGKILL leaves them for the next run's ``netns.clean_stale``). Results go to ``--out``
(default ``jepsen-results/<profile>-seed<N>``): ``summary.txt``, ``timeline.png``,
``result.json``, ``history.jsonl``, ``schedule.json``, ``run.json`` (the commit and the wall
time), and every daemon's and client's log under ``logs/``. Exit status: 0 valid, 1 the checker found a violation, 2 no run was made
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

from nsqpy.jepsen.harness import RunConfig
from nsqpy.jepsen.layout import hosts_for
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
    p.add_argument("--insecure", action="store_true",
                   help="the daemons' links in plain TCP (default: mutual TLS, nsqpy cert's)")  # fmt: skip
    p.add_argument("--unsafe-ack-before-replication", action="store_true",
                   help="test only: nsqd acknowledges before replicating (must lose data)")  # fmt: skip
    return p


def check_again(argv: Sequence[str]) -> int:
    """``nsqpy jepsen check PATH [--out DIR]`` (see the module docstring)."""
    from nsqpy.jepsen.archive import (
        differences,
        find_history,
        read_result,
        run_title,
        stored_result,
    )
    from nsqpy.jepsen.checker import check
    from nsqpy.jepsen.clients import CHANNELS
    from nsqpy.jepsen.history import read_history
    from nsqpy.jepsen.report import summary_text, write_report

    p = argparse.ArgumentParser(prog="nsqpy jepsen check")
    p.add_argument("path", help="a run's directory, or a history file (.jsonl, .gz, .xz)")
    p.add_argument("--out", default=None, help="write the report here")
    args = p.parse_args(argv)
    history = find_history(args.path)
    if history is None:
        print(f"nsqpy jepsen check: no history at {args.path}", file=sys.stderr)
        return 2
    stored_path = stored_result(history)
    stored = read_result(stored_path) if stored_path is not None else None
    events = read_history([history])
    result = check(events, CHANNELS)
    title = run_title(history) or f"nsqpy jepsen, {args.path}"
    out = args.out or (args.path if Path(args.path).is_dir() else None)
    if out is not None:
        write_report(Path(out), events, result, title=title)
    print(summary_text(result, title), end="")
    if stored is None:
        return 0 if result.valid else 1
    found = differences(stored, result.to_json())
    if found:
        print(f"DIFFERS from the stored result {stored_path}:")
        print("\n".join(f"  {line}" for line in found))
    else:
        print(f"the same as the stored result {stored_path}")
    return 0 if result.valid and not found else 1


def publish(argv: Sequence[str]) -> int:
    """``nsqpy jepsen publish RUN PREFIX`` (see the module docstring)."""
    from nsqpy.jepsen.archive import publish as store

    p = argparse.ArgumentParser(prog="nsqpy jepsen publish")
    p.add_argument("run", help="a finished run's directory (--out of the run)")
    p.add_argument("prefix", help="where to store it, e.g. docs/jepsen/long-seed20261126")
    args = p.parse_args(argv)
    try:
        written = store(args.run, args.prefix)
    except FileNotFoundError as exc:
        print(f"nsqpy jepsen publish: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"{path} ({path.stat().st_size} bytes)")
    return 0


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
        return check_again(argv[1:])
    if argv[:1] == ["publish"]:
        return publish(argv[1:])
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
            unsafe_ack=args.unsafe_ack_before_replication, insecure=args.insecure, kinds=kinds,
            cycles=args.cycles,
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
