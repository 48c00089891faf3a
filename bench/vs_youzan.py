"""nsqpy's cluster against Youzan's (youzan/nsq, the HA fork), replicated publishing side by
side with NSQ's ``bench_writer``; prints, asserts nothing.

Starts both clusters on this machine, each on loopback ports of its own: nsqpy's
``LocalCluster`` (its own etcd member, two nsqlookupd, three nsqd) and Youzan's (an etcd
member with the v2 API its daemons use, one nsqlookupd, three nsqd). Then, for
``--rounds`` rounds, alternating (Youzan, nsqpy, Youzan, nsqpy, ...), on a fresh topic each
time (deleted after it): a topic of one partition and ``--replicas`` replicas with a channel (Youzan's refuses
publishes to a topic without one; nsqpy's gets one too), an untimed warm-up of one second,
then ``bench_writer`` (MPUB of ``--batch`` bodies of ``--size`` bytes) for ``--runfor``
against the partition's leader. Each round also runs nsqpy's single node (a topic of one
replica on the same cluster), so the round gives both ratios. While one cluster is measured,
the other is idle; the CPU its processes used meanwhile is printed with the figures.

Youzan's ``nsqd`` and ``nsqlookupd`` come from ``--youzan`` or ``$NSQ_YOUZAN`` (a folder
holding both, built from youzan/nsq's source, e.g. its tag v0.3.7-HA.1.12.7, with Go; its
nsqd wants an open-files limit of at least twice its ``reservedFDNum``). NSQ's bench tools
come from ``--go-tools`` or ``$NSQ_GO_TOOLS`` (see ``vs_go.GO_TOOLS_HELP``).

    .venv/bin/python bench/vs_youzan.py [--rounds 2] [--runfor 5s] [--replicas 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster_publish import ops, run_tool
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.etcd import ETCD
from nsqpy.testing.processes import free_ports
from vs_go import GO_TOOLS_HELP, TOOLS, cpu_seconds

YOUZAN_ENV = "NSQ_YOUZAN"
READY_S = 120.0  # how long a Youzan topic may take to get a leader


def _http(method: str, url: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError:
        return 0, b""


def _raise_nofile() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class YouzanCluster:
    """etcd (v2 API on) + one nsqlookupd + three nsqd of Youzan's, in ``directory``."""

    def __init__(self, binaries: Path, directory: Path, nodes: int = 3) -> None:
        self.binaries, self.directory, self.count = binaries, directory, nodes
        self.procs: list[subprocess.Popen[bytes]] = []
        self.nsqd: list[subprocess.Popen[bytes]] = []
        self.tcp: list[int] = []
        self.http: list[int] = []

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.directory / f"{name}.log", "ab")  # noqa: SIM115 (the child's)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=_raise_nofile)  # fmt: skip
        log.close()
        self.procs.append(proc)
        return proc

    def _wait(self, what: str, check: object, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():  # type: ignore[operator]
                return
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"Youzan's {proc.args[0]} exited; logs in {self.directory}")
            time.sleep(0.2)
        raise RuntimeError(f"Youzan's cluster: no {what} after {timeout:.0f} s ({self.directory})")

    def start(self) -> YouzanCluster:
        client, peer, lookup_tcp, lookup_http, lookup_rpc, lookup_metrics = free_ports(6)
        etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self._spawn("etcd", [ETCD, "--name", "yz", "--data-dir", str(self.directory / "etcd"),
                             "--enable-v2=true", "--listen-client-urls", etcd_url,
                             "--advertise-client-urls", etcd_url, "--listen-peer-urls", peer_url,
                             "--initial-advertise-peer-urls", peer_url,
                             "--initial-cluster", f"yz={peer_url}"])  # fmt: skip
        self._wait("etcd", lambda: _http("GET", f"{etcd_url}/health")[0] == 200, 30)
        common = [f"--cluster-id=bench{os.getpid()}", f"--cluster-leadership-addresses={etcd_url}",
                  "--broadcast-interface=lo", "--broadcast-address=127.0.0.1", "--log-level=1",
                  "--logtostderr"]  # fmt: skip
        self.lookupd = f"127.0.0.1:{lookup_http}"
        self._spawn("nsqlookupd", [str(self.binaries / "nsqlookupd"), *common,
                                   f"--tcp-address=127.0.0.1:{lookup_tcp}",
                                   f"--http-address={self.lookupd}", f"--rpc-port={lookup_rpc}",
                                   f"--metric-address=127.0.0.1:{lookup_metrics}"])  # fmt: skip
        for i in range(self.count):
            tcp, http, https, metrics, rpc = free_ports(5)
            data = self.directory / f"nsqd{i}"
            data.mkdir()
            self.nsqd.append(self._spawn(f"nsqd{i}", [
                str(self.binaries / "nsqd"), *common, f"--data-path={data}",
                f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}",
                f"--https-address=127.0.0.1:{https}", f"--metric-address=127.0.0.1:{metrics}",
                f"--rpc-port={rpc}"]))  # fmt: skip
            self.tcp.append(tcp)
            self.http.append(http)

        def registered() -> bool:
            status, body = _http("GET", f"http://{self.lookupd}/nodes")
            return status == 200 and body.count(b'"tcp_port"') >= self.count

        self._wait("nsqd registered with its lookupd", registered, 60)
        return self

    def leader(self, topic: str) -> int | None:
        for i, port in enumerate(self.http):
            status, body = _http("GET", f"http://127.0.0.1:{port}/stats?format=json&topic={topic}")
            if status != 200:
                continue
            for entry in json.loads(body).get("data", {}).get("topics") or []:
                if entry.get("topic_name") == topic and entry.get("is_leader"):
                    return i
        return None

    def create(self, topic: str, replicas: int) -> int:
        """A topic of one partition with a channel; the index of its leader."""
        form = f"topic={topic}&partition_num=1&replicator={replicas}&multipart=true"
        status, body = _http("POST", f"http://{self.lookupd}/topic/create?{form}")
        if status != 200:
            raise RuntimeError(f"Youzan's lookupd refused the topic: {status} {body[:200]!r}")
        self._wait(f"leader of {topic}", lambda: self.leader(topic) is not None, READY_S)
        leader = self.leader(topic)
        assert leader is not None  # (it does not move back: nothing fails here)
        url = f"http://127.0.0.1:{self.http[leader]}/channel/create?topic={topic}&channel=c&partition=0"
        self._wait(f"a channel on {topic}", lambda: _http("POST", url)[0] == 200, 30)

        def writable() -> bool:
            status, body = _http("GET", f"http://{self.lookupd}/lookup?topic={topic}&access=w")
            return status == 200 and b'"tcp_port"' in body

        self._wait(f"{topic} writable", writable, READY_S)
        return leader

    def delete(self, topic: str) -> None:
        _http("POST", f"http://{self.lookupd}/topic/delete?topic={topic}&partition=**")

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def writer(tools: Path, port: int, topic: str, args: argparse.Namespace, runfor: str) -> float:
    return ops(run_tool(tools / "bench_writer", f"--nsqd-tcp-address=127.0.0.1:{port}",
                        f"--topic={topic}", f"--size={args.size}", f"--batch-size={args.batch}",
                        f"--runfor={runfor}"))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--youzan", default=os.environ.get(YOUZAN_ENV, ""),
                        help=f"a folder with Youzan's nsqd and nsqlookupd (default ${YOUZAN_ENV})")  # fmt: skip
    parser.add_argument("--go-tools", default=str(TOOLS), help=GO_TOOLS_HELP)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runfor", default="5s", help="bench_writer's duration")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args()
    youzan, tools = Path(args.youzan), Path(args.go_tools)
    if not args.youzan or not (youzan / "nsqd").exists():
        # (the folder may be the build's root, with the programs in bin/)
        youzan = youzan / "bin"
    if not (youzan / "nsqd").exists() or not (tools / "bench_writer").exists():
        print(f"need Youzan's nsqd (--youzan, ${YOUZAN_ENV}) and NSQ's bench_writer "
              f"(--go-tools: {GO_TOOLS_HELP})", file=sys.stderr)  # fmt: skip
        return 2
    print(f"# both clusters on this machine (nsqpy: etcd, 2 nsqlookupd, 3 nsqd; Youzan: etcd, "
          f"nsqlookupd, 3 nsqd); bench_writer MPUB x{args.batch} of {args.size} B for "
          f"{args.runfor}, replicator={args.replicas}", flush=True)  # fmt: skip
    figures: dict[str, list[float]] = {"youzan": [], "nsqpy": [], "nsqpy single node": []}
    with (
        tempfile.TemporaryDirectory(prefix="nsqpy-vs-youzan-") as tmp,
        LocalCluster(Path(tmp) / "nsqpy", lease_ttl="10s") as ours,
    ):
        theirs = YouzanCluster(youzan, Path(tmp))
        try:
            theirs.start()
            our_pids = [p.pid for p in ours.etcd.procs if p is not None]
            our_pids += [n.proc.pid for n in [*ours.nodes, *ours.lookupds] if n.proc]
            their_pids = [p.pid for p in theirs.procs]
            for r in range(args.rounds):
                for name in figures:
                    topic = f"bench{r}{name[0]}{len(name)}"
                    if name == "youzan":
                        port = theirs.tcp[theirs.create(topic, args.replicas)]
                    else:
                        replicas = 1 if name.endswith("node") else args.replicas
                        ours.post(f"/topic/create?topic={topic}&partition_num=1"
                                  f"&replicator={replicas}")  # fmt: skip
                        ours.wait_for(lambda t=topic, n=replicas: len(ours.partitions(t)[0]["isr"]) == n,  # type: ignore[misc]
                                      60, f"the ISR of {topic}")  # fmt: skip
                        node = ours.node_index(ours.partitions(topic)[0]["id"])
                        ours.request(
                            "POST", ours.nsqd_http(node), f"/channel/create?topic={topic}&channel=c"
                        )
                        port = ours.nodes[node].ports["TCP"]
                    writer(tools, port, topic, args, "1s")  # (warm-up: not counted)
                    idle = their_pids if name.startswith("nsqpy") else our_pids
                    before = sum(cpu_seconds(p) for p in idle)
                    started = time.monotonic()
                    rate = writer(tools, port, topic, args, args.runfor)
                    spent = sum(cpu_seconds(p) for p in idle) - before
                    figures[name].append(rate)
                    # (its files go: their dirty pages are not written back during the
                    # next measurement)
                    if name == "youzan":
                        theirs.delete(topic)
                    else:
                        ours.post(f"/topic/delete?topic={topic}")
                    print(f"round {r + 1} {name:<17} {rate:>10,.0f} msgs/s   (the other "
                          f"cluster used {spent / (time.monotonic() - started):.2f} of a core "
                          f"meanwhile)", flush=True)  # fmt: skip
        finally:
            theirs.close()
    median = {name: statistics.median(rates) for name, rates in figures.items()}
    print("medians: " + ", ".join(f"{k} {v:,.0f}" for k, v in median.items()))
    print(f"nsqpy / Youzan, replicator={args.replicas}: {median['nsqpy'] / median['youzan']:.2f}x "
          f"(per round: " + ", ".join(f"{a / b:.2f}" for a, b in zip(figures["nsqpy"], figures["youzan"], strict=True))
          + ")")  # fmt: skip
    print(f"nsqpy replicator={args.replicas} / its single node: "
          f"{median['nsqpy'] / median['nsqpy single node']:.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    from nsqpy.testing.benchinfo import run_header

    print(run_header(), flush=True)
    sys.exit(main())
