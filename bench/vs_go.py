"""nsqpy's nsqd against Go nsqd 1.3.0, judged by NSQ's own bench tools; prints, asserts nothing.

Starts Go's ``nsqd`` and nsqpy's ``nsqd`` (each a process with a fresh data dir and ports of
its own) and, for ``--rounds`` rounds, alternating Go then nsqpy on a fresh topic each time:

  - ``bench_writer --batch-size=200``: MPUB msgs/s
  - ``bench_writer --batch-size=1``: single-PUB msgs/s
  - ``bench_reader`` (go-nsq: RDY 2500, one FIN per message) draining the backlog the MPUB
    run left: msgs/s, and the daemon's CPU seconds per million messages while it drains

then the median of each daemon's rounds and the nsqpy/Go ratio. With ``--rss`` it also
fills one topic with ``--backlog`` messages on each and reports the peak RSS. The tools
come from ``--go-tools`` or ``$NSQ_GO_TOOLS`` (how to build them: ``GO_TOOLS_HELP``).

    .venv/bin/python bench/vs_go.py [--rounds 3] [--runfor 5s] [--rss --backlog 1000000]
    .venv/bin/python bench/vs_go.py --only nsqpy --phase sub   # one daemon, one phase
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from nsqpy.testing import nsqd_process

# NSQ 1.3.0's Go programs (nsqd, nsqlookupd, bench_writer, bench_reader, nsq_tail, to_nsq):
# the folder named by --go-tools or $NSQ_GO_TOOLS. Built from NSQ's source with Go:
#   git clone --branch v1.3.0 https://github.com/nsqio/nsq && cd nsq && make &&
#   go build -o build/ ./bench/bench_writer ./bench/bench_reader   # then: NSQ_GO_TOOLS=$PWD/build
GO_TOOLS_ENV = "NSQ_GO_TOOLS"
TOOLS = Path(os.environ.get(GO_TOOLS_ENV) or "nsq-go-tools-not-set")
GO_TOOLS_HELP = (
    f"a folder of NSQ 1.3.0's Go programs (default ${GO_TOOLS_ENV}); build them from NSQ's "
    "source: git clone --branch v1.3.0 https://github.com/nsqio/nsq && cd nsq && make && "
    "go build -o build/ ./bench/bench_writer ./bench/bench_reader"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    return sum(cpu_split(pid))


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far: its own code, and the kernel's work
    for it (system calls, the network stack, the page cache, context switches)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident set size in MiB."""
    now = peak = 0.0
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return now, peak


class Daemon:
    def __init__(self, name: str, tools: Path, data: Path) -> None:
        self.name = name
        if name == "go":
            self.tcp, http = free_port(), free_port()
            self.proc = subprocess.Popen(
                [str(tools / "nsqd"), f"--tcp-address=127.0.0.1:{self.tcp}",
                 f"--http-address=127.0.0.1:{http}", f"--https-address=127.0.0.1:{free_port()}",
                 f"--data-path={data}", "--log-level=warn"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            self.pid = self.proc.pid
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", self.tcp), 0.2).close()
                    break
                except OSError:
                    time.sleep(0.05)
        else:
            self.nsqpy = nsqd_process(data).start()
            self.tcp, self.pid = self.nsqpy.tcp_port, self.nsqpy.pid

    def stop(self) -> None:
        if self.name == "go":
            self.proc.terminate()
            self.proc.wait(15)
        else:
            self.nsqpy.stop()


def run_tool(tools: Path, tool: str, *args: str) -> float:
    done = subprocess.run([str(tools / tool), *args], capture_output=True, text=True, timeout=300)
    found = re.findall(r"([0-9.]+)ops/s", done.stdout + done.stderr)
    if not found:
        raise RuntimeError(f"{tool}: no ops/s in: {(done.stdout + done.stderr)[-500:]}")
    return float(found[-1])


def one_round(d: Daemon, tools: Path, n: int, runfor: str, phases: set[str]) -> dict[str, float]:
    common = [f"--nsqd-tcp-address=127.0.0.1:{d.tcp}", f"--runfor={runfor}", "--size=200"]
    out: dict[str, float] = {}
    topic = f"bench_{n}"
    if "mpub" in phases:
        out["mpub"] = run_tool(tools, "bench_writer", *common, f"--topic={topic}",
                               "--batch-size=200")  # fmt: skip
    if "pub" in phases:
        out["pub"] = run_tool(tools, "bench_writer", *common, f"--topic={topic}_1",
                              "--batch-size=1")  # fmt: skip
    if "sub" in phases:  # a backlog that outlasts the reader: written for twice as long
        seconds = float(runfor.rstrip("s"))
        fill = [a for a in common if not a.startswith("--runfor")]
        run_tool(tools, "bench_writer", *fill, f"--runfor={2 * seconds}s",
                 f"--topic={topic}_sub", "--batch-size=200")  # fmt: skip
        before = cpu_seconds(d.pid)
        out["sub"] = run_tool(tools, "bench_reader", *common, f"--topic={topic}_sub")
        out["sub_cpu_s_per_m"] = (cpu_seconds(d.pid) - before) / (out["sub"] * seconds) * 1e6
    return out


def backlog_rss(d: Daemon, tools: Path, backlog: int) -> tuple[float, float]:
    """Fill a topic (no channel: both keep it all) with ``backlog`` messages: RSS after."""
    sent = 0
    while sent < backlog:
        rate = run_tool(tools, "bench_writer", f"--nsqd-tcp-address=127.0.0.1:{d.tcp}",
                        "--runfor=2s", "--size=200", "--topic=backlog", "--batch-size=200")  # fmt: skip
        sent += int(rate * 2)
    time.sleep(2)
    return rss_mb(d.pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runfor", default="5s")
    parser.add_argument("--go-tools", default=str(TOOLS), help=GO_TOOLS_HELP)
    parser.add_argument("--only", choices=["go", "nsqpy"], default=None)
    parser.add_argument("--phase", action="append", choices=["mpub", "pub", "sub"])
    parser.add_argument("--rss", action="store_true", help="also the RSS with a backlog")
    parser.add_argument("--backlog", type=int, default=1_000_000)
    args = parser.parse_args()
    tools = Path(args.go_tools)
    if not (tools / "bench_reader").exists():
        sys.exit(f"no NSQ bench tools in {tools}: --go-tools is {GO_TOOLS_HELP}")
    phases = set(args.phase or ["mpub", "pub", "sub"])
    names = [args.only] if args.only else ["go", "nsqpy"]
    print(f"# {os.cpu_count()} cpus; rounds {args.rounds}, runfor {args.runfor}, 200-byte messages")
    results: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="vs-go-") as tmp:
        for n in names:
            (Path(tmp) / n).mkdir()
        daemons = {n: Daemon(n, tools, Path(tmp) / n) for n in names}
        try:
            for r in range(args.rounds):
                for name, d in daemons.items():
                    got = one_round(d, tools, r, args.runfor, phases)
                    results[name].append(got)
                    shown = ", ".join(f"{k} {v:,.0f}" for k, v in got.items())
                    print(f"round {r} {name:<6} {shown}", flush=True)
            if args.rss:
                for name, d in daemons.items():
                    now, peak = backlog_rss(d, tools, args.backlog)
                    print(f"{name:<6} RSS with a {args.backlog:,} backlog: {now:.0f} MiB "
                          f"(peak {peak:.0f} MiB)")  # fmt: skip
        finally:
            for d in daemons.values():
                d.stop()
    med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in results.items()}
    for name, m in med.items():
        print(f"median {name:<6} " + ", ".join(f"{k} {v:,.1f}" for k, v in m.items()))
    if len(med) == 2:
        for k in med["go"]:
            print(f"nsqpy / go {k:<16} {med['nsqpy'][k] / med['go'][k]:.2f}x")


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    main()
