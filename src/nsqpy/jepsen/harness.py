"""One Jepsen run, from inside the clients' namespace: ``python -m nsqpy.jepsen.harness``.

``nsqpy jepsen`` (``jepsen.cli``) makes the network (``netns.Network``) and runs this module
inside host ``c``'s namespace, so that every socket it and its workers open reaches the
hosts at their 10.77.0.x addresses and nothing of this machine's own network. Here:

1. etcd on host ``e1``, nsqlookupd on ``l1`` and ``l2``, nsqd on ``n1``.. (each in its
   namespace, ``--etcd-lease-ttl`` and every other flag at its default), each nsqd's data on
   a tmpfs of its own (mounted in this process's mount namespace: it goes away with the
   run's processes, whatever happens), logs under the run directory;
2. the topic, ``partition_num`` and 3 replicas, made through lookupd; then the consumers
   (channel ``nsqpy``: nsqpy's client; channel ``plain``: the plain protocol), then the
   producers (nsqpy's client, PUB and MPUB; the plain protocol, PUB);
3. the nemesis schedule (``schedule.make_schedule``), each step written to the history;
4. everything healed, a quiet while, the producers stopped, the consumers given
   ``profile.drain`` seconds to read what was acknowledged;
5. the histories merged, checked (``checker.check``) and reported (``report``).

Exit status 0 when the check is valid, 1 when it is not, 2 when the run could not be made.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nsqpy.jepsen.history import HistoryWriter, read_history, write_history
from nsqpy.jepsen.netns import Network
from nsqpy.jepsen.schedule import PROFILES, Profile, Step, make_schedule
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.disks import SmallDisk
from nsqpy.testing.etcd import EtcdCluster
from nsqpy.testing.processes import DaemonProcess, die_with_parent

TOPIC = "jepsen"
CHANNELS = ("nsqpy", "plain")
CLUSTER_ID = "jepsen"
DISK_BYTES = 512 << 20
UNSAFE_ENV = "NSQPY_UNSAFE_ACK_BEFORE_REPLICATION"  # the test-only broken build (nsqd)
READY_TIMEOUT = 60.0


@dataclass
class RunConfig:
    profile: str
    seed: int
    out: str
    prefix: str  # the namespaces' prefix (netns.Network)
    hosts: list[str]
    netem: bool = False  # whether the kernel has netem (the network probed it)
    unsafe_ack: bool = False
    kinds: list[str] = field(default_factory=list)  # only these nemeses (default: all)
    cycles: int = 0  # steps of each kind (default: the profile's)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    def run_profile(self) -> Profile:
        """The profile with this run's ``kinds`` and ``cycles``, when given."""
        profile = PROFILES[self.profile]
        if self.kinds:
            profile = replace(profile, kinds=tuple(self.kinds))
        if self.cycles > 0:
            profile = replace(profile, cycles=self.cycles)
        return profile

    def steps(self) -> list[Step]:
        nodes = sum(h.startswith("n") for h in self.hosts)
        return make_schedule(self.run_profile(), self.seed, nodes=nodes)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls(**json.loads(text))


def hosts_for(nodes: int) -> list[str]:
    return [*(f"n{i + 1}" for i in range(nodes)), "l1", "l2", "e1", "c"]


def _get(address: str, path: str, timeout: float = 2.0) -> Any:
    import urllib.request

    with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def _post(address: str, path: str) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"http://{address}{path}", method="POST", data=b"")
    try:
        with urllib.request.urlopen(req, timeout=10.0) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


wait_for = LocalCluster.wait_for  # (OSError, ValueError, KeyError: not yet; TimeoutError)


class Cluster:
    """etcd, two nsqlookupd and the nsqd of a run, each in its host's namespace."""

    def __init__(self, config: RunConfig, net: Network, out: Path) -> None:
        self.config = config
        self.net = net
        self.out = out
        self.nodes = [h for h in config.hosts if h.startswith("n")]
        self.lookupd_hosts = ["l1", "l2"]
        self.etcd = EtcdCluster(
            1, out / "etcd", heartbeat_ms=100, election_ms=1000,
            host=net.address("e1"), prefix=net.exec_prefix("e1"),
        )  # fmt: skip
        self.disks = {
            h: SmallDisk(Path(f"/tmp/{net.prefix}disks/{h}"), DISK_BYTES) for h in self.nodes
        }
        self.nsqd: dict[str, DaemonProcess] = {}
        self.lookupd: dict[str, DaemonProcess] = {}
        self.paused: set[str] = set()

    @property
    def etcd_endpoint(self) -> str:
        return self.etcd.endpoints[0]

    def lookupd_http(self) -> list[str]:
        return [f"{self.net.address(h)}:4161" for h in self.lookupd_hosts]

    def _lookupd_process(self, host: str) -> DaemonProcess:
        addr = self.net.address(host)
        return DaemonProcess(
            "nsqlookupd",
            [f"--tcp-address={addr}:4160", f"--http-address={addr}:4161",
             f"--broadcast-address={addr}", f"--etcd-endpoints={self.etcd_endpoint}",
             f"--cluster-id={CLUSTER_ID}"],
            prefix=self.net.exec_prefix(host), log_path=self.out / "logs" / f"{host}.log",
        )  # fmt: skip

    def _nsqd_process(self, host: str) -> DaemonProcess:
        addr = self.net.address(host)
        env = {UNSAFE_ENV: "1"} if self.config.unsafe_ack else None
        return DaemonProcess(
            "nsqd",
            [f"--tcp-address={addr}:4150", f"--http-address={addr}:4151",
             f"--rpc-address={addr}:4250", f"--broadcast-address={addr}",
             f"--data-path={self.disks[host].path}", f"--etcd-endpoints={self.etcd_endpoint}",
             f"--cluster-id={CLUSTER_ID}", f"--node-id={self.nodes.index(host) + 1}"],
            env=env, prefix=self.net.exec_prefix(host),
            log_path=self.out / "logs" / f"{host}.log",
        )  # fmt: skip

    def start(self) -> None:
        (self.out / "logs").mkdir(parents=True, exist_ok=True)
        self.etcd.start()
        for host in self.lookupd_hosts:
            self.lookupd[host] = self._lookupd_process(host).start(30.0)
        for host in self.nodes:
            self.disks[host].mount()
            self.nsqd[host] = self._nsqd_process(host).start(30.0)
        self.wait_ready()

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        def ready() -> bool:
            stats = self.lookupd_json("/cluster/stats")
            leader = self.lookupd_json("/listlookup").get("lookupdleader", {}).get("ID")
            return len(stats["node_stat_list"]) == len(self.nodes) and bool(leader)

        wait_for(ready, timeout, f"{len(self.nodes)} nsqd registered and a coordinator")

    def lookupd_json(self, path: str) -> Any:
        last: BaseException | None = None
        for address in self.lookupd_http():
            try:
                return _get(address, path)
            except (OSError, ValueError) as exc:
                last = exc
        raise OSError(f"no lookupd answered {path}: {last}")

    def create_topic(self, partitions: int) -> None:
        query = (
            f"/topic/create?topic={TOPIC}&partition_num={partitions}&replicator=3&multipart=true"
        )
        answers: list[tuple[int, bytes]] = []

        def created() -> bool:
            answers.append(_post(self.lookupd_http()[0], query))
            return answers[-1][0] == 200

        try:
            wait_for(created, 30, "topic created")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; lookupd answered {answers[-1:]}") from None

        def placed() -> bool:
            doc = self.lookupd_json(f"/lookup?topic={TOPIC}&metainfo=true&access=r")
            parts = doc.get("partitions") or {}
            return len(parts) == partitions and all(
                len(p.get("isr") or []) == 3 for p in parts.values()
            )

        wait_for(placed, 30, f"{partitions} partitions with 3 replicas in sync")

    def leader_of(self, partition: int) -> str | None:
        """The host leading ``partition`` as lookupd says now (None when none answers)."""
        try:
            doc = self.lookupd_json(f"/lookup?topic={TOPIC}&metainfo=true&access=r")
            node_id = str(doc["partitions"][str(partition)]["id"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return self.net.host_of(node_id.split(":")[0])

    def coordinator(self) -> str | None:
        try:
            found = str(self.lookupd_json("/listlookup").get("lookupdleader", {}).get("ID", ""))
        except (OSError, ValueError):
            return None
        for host in self.lookupd_hosts:
            if f"{self.net.address(host)}:" in found:
                return host
        return None

    def kill(self, host: str) -> None:
        self.resume(host)
        self.nsqd[host].kill()

    def restart(self, host: str) -> None:
        self.nsqd[host].kill()
        self.nsqd[host] = self._nsqd_process(host).start(30.0)

    def pause(self, host: str) -> None:
        os.kill(self.nsqd[host].pid, signal.SIGSTOP)
        self.paused.add(host)

    def resume(self, host: str) -> None:
        if host in self.paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.nsqd[host].pid, signal.SIGCONT)
            self.paused.discard(host)

    def close(self) -> None:
        for host in list(self.paused):
            self.resume(host)
        for proc in [*self.nsqd.values(), *self.lookupd.values()]:
            with contextlib.suppress(OSError, ValueError):
                proc.kill()
        self.etcd.close()
        for disk in self.disks.values():
            disk.unmount()


class Nemesis:
    """Does and undoes each kind of fault of ``schedule.KINDS`` on the run's cluster."""

    def __init__(self, cluster: Cluster, net: Network) -> None:
        self.cluster = cluster
        self.net = net
        self.killed: set[str] = set()

    def _target(self, params: dict[str, Any]) -> str:
        if "leader_of" in params:
            return self.cluster.leader_of(int(params["leader_of"])) or self.cluster.nodes[0]
        return str(params["node"])

    def start(self, step: Step) -> tuple[str, Any]:
        """Begin the fault; what it did (for the history) and what ``stop`` needs."""
        p, kind = step.params, step.kind
        if kind == "halves":
            self.net.cut(p["a"], p["b"])
            return f"{'+'.join(p['a'])} | {'+'.join(p['b'])}", None
        if kind == "isolate-leader":
            host = self.cluster.leader_of(int(p["partition"])) or self.cluster.nodes[0]
            self.net.isolate(host, keep=["c"])
            return f"{host} (leader of partition {p['partition']}) cut from every server", host
        if kind == "isolate-coordinator":
            host = self.cluster.coordinator() or "l1"
            self.net.isolate(host, keep=["c"])
            return f"{host} (coordinator) cut from every server", host
        if kind == "etcd-minority":
            self.net.cut(p["nodes"], ["e1"])
            return f"{'+'.join(p['nodes'])} cut from etcd", None
        if kind == "kill":
            host = self._target(p)
            self.cluster.kill(host)
            self.killed.add(host)
            return f"SIGKILL {host}", host
        if kind == "pause":
            host = self._target(p)
            self.cluster.pause(host)
            return f"SIGSTOP {host}", host
        if kind == "lossy":
            what = self.net.lossy(
                p["node"], int(p["loss"]), int(p["delay_ms"]), int(p["rate_kbit"])
            )
            return f"{p['node']}: {what}", None
        if kind == "disk-full":
            self.cluster.disks[p["node"]].fill()
            return f"{p['node']}'s disk filled", None
        raise ValueError(f"unknown nemesis {kind!r}")

    def stop(self, step: Step, state: Any) -> None:
        kind = step.kind
        if kind == "kill":
            self.cluster.restart(state)
            self.killed.discard(state)
        elif kind == "pause":
            self.cluster.resume(state)
        elif kind == "disk-full":
            self.cluster.disks[step.params["node"]].free()
        else:
            self.net.heal()

    def heal_all(self) -> None:
        self.net.heal()
        for host in list(self.cluster.paused):
            self.cluster.resume(host)
        for host in list(self.killed):
            self.cluster.restart(host)
            self.killed.discard(host)
        for disk in self.cluster.disks.values():
            disk.free()


class Workers:
    """The client processes of a run (``jepsen.worker``), each with its history file."""

    def __init__(self, cluster: Cluster, out: Path, origin: float, profile: Profile) -> None:
        self.cluster = cluster
        self.out = out
        self.origin = origin
        self.profile = profile
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.kinds: dict[str, str] = {}

    def history_path(self, name: str) -> Path:
        return self.out / "histories" / f"{name}.jsonl"

    def start(self, name: str, kind: str, ident: int, *extra: str) -> None:
        (self.out / "histories").mkdir(parents=True, exist_ok=True)
        lookupds = [f"--lookupd={a}" for a in self.cluster.lookupd_http()]
        argv = [sys.executable, "-m", "nsqpy.jepsen.worker", kind, f"--id={ident}",
                f"--name={name}", *lookupds, f"--topic={TOPIC}",
                f"--history={self.history_path(name)}", f"--origin={self.origin}", *extra]  # fmt: skip
        log = open(self.out / "logs" / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.procs[name] = subprocess.Popen(die_with_parent(argv), stdout=log, stderr=log)
        log.close()
        self.kinds[name] = kind

    def start_consumers(self) -> None:
        self.start("nsqpy-consumer", "nsqpy-consumer", 0, "--channel=nsqpy")
        self.start("plain-consumer", "plain-consumer", 0, "--channel=plain")

    def start_producers(self) -> None:
        rate = f"--rate={self.profile.producer_rate}"
        self.start("nsqpy-pub", "nsqpy-producer", 1, rate)
        self.start("nsqpy-mpub", "nsqpy-producer", 2, rate, "--batch=5")
        self.start("plain-pub-1", "plain-producer", 3, rate)
        self.start("plain-pub-2", "plain-producer", 4, rate)

    def stop(self, names: Sequence[str]) -> None:
        for name in names:
            with contextlib.suppress(ProcessLookupError):
                self.procs[name].send_signal(signal.SIGTERM)
        for name in names:
            try:
                self.procs[name].wait(30)
            except subprocess.TimeoutExpired:
                self.procs[name].kill()
                self.procs[name].wait()

    def producers(self) -> list[str]:
        return [n for n, k in self.kinds.items() if k.endswith("producer")]

    def consumers(self) -> list[str]:
        return [n for n, k in self.kinds.items() if k.endswith("consumer")]

    def histories(self) -> list[Path]:
        return [self.history_path(n) for n in self.procs if self.history_path(n).exists()]


def _acknowledged(paths: Sequence[Path]) -> set[int]:
    return {
        v for e in read_history(paths) if e["op"] == "pub" and e.get("r") == "ok" for v in e["v"]
    }


def _received(paths: Sequence[Path]) -> dict[str, set[int]]:
    seen: dict[str, set[int]] = {ch: set() for ch in CHANNELS}
    for e in read_history(paths):
        if e["op"] == "recv":
            seen.setdefault(str(e["ch"]), set()).add(int(e["v"]))
    return seen


def drain(workers: Workers, profile: Profile, say: Callable[[str], None]) -> None:
    """Wait until every channel has every acknowledged value, or ``profile.drain`` seconds
    (or 20 s without a new value on any channel)."""
    acked = _acknowledged([workers.history_path(n) for n in workers.producers()])
    deadline = time.monotonic() + profile.drain
    last_count, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        seen = _received([workers.history_path(n) for n in workers.consumers()])
        missing = {ch: len(acked - seen[ch]) for ch in CHANNELS}
        if not any(missing.values()):
            say(f"drain: every channel has all {len(acked)} acknowledged values")
            return
        count = sum(len(s) for s in seen.values())
        if count != last_count:
            last_count, last_change = count, time.monotonic()
        elif time.monotonic() - last_change > 20:
            break
    say(f"drain ended with values missing: {missing}")


def run(config: RunConfig) -> int:
    from nsqpy.jepsen.checker import check
    from nsqpy.jepsen.report import summary_text, write_report

    profile = config.run_profile()
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    net = Network(config.hosts, prefix=config.prefix)  # made by the caller: only used here
    net.netem = config.netem
    steps = config.steps()
    (out / "schedule.json").write_text(json.dumps([s.to_json() for s in steps], indent=1))
    origin = time.monotonic()
    (out / "histories").mkdir(parents=True, exist_ok=True)
    nemesis_history = HistoryWriter(out / "histories" / "nemesis.jsonl", "nemesis", origin)

    def say(msg: str) -> None:
        nemesis_history.log(msg)
        print(f"[jepsen {nemesis_history.now():7.1f}s] {msg}", flush=True)

    cluster = Cluster(config, net, out)
    workers = Workers(cluster, out, origin, profile)
    try:
        say(f"profile {profile.name}, seed {config.seed}, {len(steps)} steps; starting the cluster")
        cluster.start()
        cluster.create_topic(profile.partitions)
        workers.start_consumers()
        time.sleep(3.0)  # the channels exist before the first publish
        workers.start_producers()
        say("cluster up, topic made, clients running")
        nemesis = Nemesis(cluster, net)
        begun = time.monotonic()  # the schedule's times count from here (warmup first)
        for step in steps:
            _sleep_until(begun + step.at)
            detail, state = nemesis.start(step)
            nemesis_history.nemesis("start", step.kind, step.index, detail)
            say(f"step {step.index}: {step.kind}: {detail} for {step.duration:.1f}s")
            _sleep_until(begun + step.at + step.duration)
            nemesis.stop(step, state)
            nemesis_history.nemesis("stop", step.kind, step.index, detail)
        nemesis.heal_all()
        say("schedule done, everything healed")
        cluster.wait_ready()
        time.sleep(10.0)
        workers.stop(workers.producers())
        say("producers stopped; draining")
        drain(workers, profile, say)
        workers.stop(workers.consumers())
    except (TimeoutError, OSError, RuntimeError) as exc:
        say(f"run failed: {exc}")
        for proc in workers.procs.values():
            proc.kill()
        nemesis_history.close()
        return 2
    finally:
        for proc in workers.procs.values():
            if proc.poll() is None:
                proc.kill()
        cluster.close()
    nemesis_history.close()
    events = read_history([*workers.histories(), out / "histories" / "nemesis.jsonl"])
    write_history(events, out / "history.jsonl")
    result = check(events, CHANNELS)
    title = f"nsqpy jepsen, profile {profile.name}, seed {config.seed}"
    if config.unsafe_ack:
        title += " (UNSAFE build: acknowledges before replication)"
    write_report(out, events, result, title=title)
    print(summary_text(result, title), flush=True)
    return 0 if result.valid else 1


def _sleep_until(when: float) -> None:
    delay = when - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nsqpy.jepsen.harness")
    p.add_argument("config", help="the run's RunConfig as JSON (jepsen.cli makes it)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    return run(RunConfig.from_json(args.config))


if __name__ == "__main__":
    sys.exit(main())
