"""The servers of a Jepsen run, each in its host's namespace (``netns.Network``): three
etcd members on ``e1`` ``e2`` ``e3`` (``jepsen.etcd``), nsqlookupd on ``l1`` and ``l2``,
nsqd on ``n1``.. with every flag at its default (``--etcd-endpoints`` lists all three
members) and its data on a tmpfs of its own (``SmallDisk``, mounted in the harness's mount
namespace, so it goes away with the run's processes), logs under the run's ``logs/``.

``Cluster`` starts them, makes the topics, answers what the nemesis needs to know now
(which node leads a partition and which replicate it, which lookupd coordinates), and
kills, restarts, pauses and resumes an nsqd. The nsq daemons are the test kit's
``DaemonProcess`` with a command prefix that runs them inside a namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsqpy.jepsen.etcd import EtcdMembers
from nsqpy.jepsen.layout import ETCD_HOSTS, LOOKUPD_HOSTS, TOPIC
from nsqpy.jepsen.netns import Network
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.disks import SmallDisk
from nsqpy.testing.processes import DaemonProcess
from nsqpy.tools.cert import cert_pem, create_ca, create_leaf, write_key

CLUSTER_ID = "jepsen"
DISK_BYTES = 512 << 20
UNSAFE_ENV = "NSQPY_UNSAFE_ACK_BEFORE_REPLICATION"  # the test-only broken build (nsqd)
READY_TIMEOUT = 60.0


def _get(address: str, path: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def _post(address: str, path: str) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://{address}{path}", method="POST", data=b"")
    try:
        with urllib.request.urlopen(req, timeout=10.0) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def make_run_certs(directory: Path, names: dict[str, list[str]]) -> None:
    """A CA for the run (``directory/ca.pem``) and, for each host, a certificate for the
    addresses given (``directory/<host>/node.pem``, ``node.key``): every daemon's and etcd
    member's, used to serve and to dial."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = create_ca("nsqpy jepsen CA", days=7)
    (directory / "ca.pem").write_bytes(cert_pem(ca.cert))
    for host, addresses in names.items():
        (directory / host).mkdir(exist_ok=True)
        leaf = create_leaf(ca, addresses, days=7)
        (directory / host / "node.pem").write_bytes(cert_pem(leaf.cert))
        write_key(leaf.key, directory / host / "node.key")


wait_for = LocalCluster.wait_for  # (OSError, ValueError, KeyError: not yet; TimeoutError)


@dataclass(frozen=True)
class PartitionHosts:
    """A partition as lookupd says now, by host: its leader, its ISR and those catching up."""

    leader: str
    isr: tuple[str, ...]
    catchup: tuple[str, ...]

    @property
    def replicas(self) -> tuple[str, ...]:
        return (*self.isr, *(h for h in self.catchup if h not in self.isr))

    def describe(self) -> str:
        catchup = f", catching up [{' '.join(self.catchup)}]" if self.catchup else ""
        return f"leader {self.leader}, ISR [{' '.join(self.isr)}]{catchup}"


class Cluster:
    """Three etcd members, two nsqlookupd and the nsqd of a run, each in its host's
    namespace."""

    def __init__(
        self,
        hosts: Sequence[str],
        net: Network,
        out: Path,
        unsafe_ack: bool = False,
        secure: bool = True,
    ) -> None:
        self.unsafe_ack = unsafe_ack
        self.secure = secure  # mutual TLS between the daemons, etcd over TLS (``certs``)
        self.net = net
        self.out = out
        self.nodes = [h for h in hosts if h.startswith("n")]
        self.lookupd_hosts = list(LOOKUPD_HOSTS)
        self.certs = out / "certs"
        if secure:
            # (every etcd member's names all three: one gRPC channel checks one name for
            # every member, the first endpoint's)
            members = [net.address(h) for h in ETCD_HOSTS]
            names = {h: [net.address(h)] for h in [*self.nodes, *self.lookupd_hosts]}
            make_run_certs(self.certs, {**names, **{h: members for h in ETCD_HOSTS}})
        self.etcd = EtcdMembers(
            ETCD_HOSTS, net.address, net.exec_prefix, out / "etcd",
            certs=self.certs if secure else None,
        )  # fmt: skip
        self.disk_root = Path(f"/tmp/{net.prefix}disks")  # (removed by close())
        self.disks = {h: SmallDisk(self.disk_root / h, DISK_BYTES) for h in self.nodes}
        self.nsqd: dict[str, DaemonProcess] = {}
        self.lookupd: dict[str, DaemonProcess] = {}
        self.paused: set[str] = set()

    @property
    def etcd_endpoints(self) -> str:
        """``--etcd-endpoints`` of every nsqd and nsqlookupd: all three members."""
        return ",".join(self.etcd.endpoints)

    def lookupd_http(self) -> list[str]:
        return [f"{self.net.address(h)}:4161" for h in self.lookupd_hosts]

    def _lookupd_process(self, host: str) -> DaemonProcess:
        addr = self.net.address(host)
        return DaemonProcess(
            "nsqlookupd",
            [f"--tcp-address={addr}:4160", f"--http-address={addr}:4161",
             f"--broadcast-address={addr}", f"--etcd-endpoints={self.etcd_endpoints}",
             f"--cluster-id={CLUSTER_ID}", *self._tls_flags(host)],
            prefix=self.net.exec_prefix(host), log_path=self.out / "logs" / f"{host}.log",
        )  # fmt: skip

    def _nsqd_process(self, host: str) -> DaemonProcess:
        addr = self.net.address(host)
        env = {UNSAFE_ENV: "1"} if self.unsafe_ack else None
        return DaemonProcess(
            "nsqd",
            [f"--tcp-address={addr}:4150", f"--http-address={addr}:4151",
             f"--rpc-address={addr}:4250", f"--broadcast-address={addr}",
             f"--data-path={self.disks[host].path}", f"--etcd-endpoints={self.etcd_endpoints}",
             f"--cluster-id={CLUSTER_ID}", f"--node-id={self.nodes.index(host) + 1}",
             *self._tls_flags(host)],
            env=env, prefix=self.net.exec_prefix(host),
            log_path=self.out / "logs" / f"{host}.log",
        )  # fmt: skip

    def _tls_flags(self, host: str) -> list[str]:
        """``host``'s daemon's flags for the run's CA and its certificate: mutual TLS with
        the other daemons and TLS to etcd (none when the run is not secure)."""
        if not self.secure:
            return []
        ca, mine = self.certs / "ca.pem", self.certs / host
        cert, key = mine / "node.pem", mine / "node.key"
        return [f"--cluster-tls-root-ca-file={ca}", f"--cluster-tls-cert={cert}",
                f"--cluster-tls-key={key}", f"--etcd-cacert={ca}", f"--etcd-cert={cert}",
                f"--etcd-key={key}"]  # fmt: skip

    def start(self) -> None:
        (self.out / "logs").mkdir(parents=True, exist_ok=True)
        self.etcd.start()
        for host in self.lookupd_hosts:  # (side by side, lookupds first)
            self.lookupd[host] = self._lookupd_process(host).spawn()
        for proc in self.lookupd.values():
            proc.wait_started(30.0)
        for host in self.nodes:
            self.disks[host].mount()
            self.nsqd[host] = self._nsqd_process(host).spawn()
        for proc in self.nsqd.values():
            proc.wait_started(30.0)
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

    def create_topic(self, topic: str, partitions: int, replicas: int) -> None:
        """Make ``topic`` through lookupd and wait until every partition has ``replicas``
        in sync."""
        query = (
            f"/topic/create?topic={topic}&partition_num={partitions}"
            f"&replicator={replicas}&multipart=true"
        )
        answers: list[tuple[int, bytes]] = []

        def created() -> bool:
            answers.append(_post(self.lookupd_http()[0], query))
            return answers[-1][0] == 200

        try:
            wait_for(created, 30, f"topic {topic} created")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; lookupd answered {answers[-1:]}") from None

        def placed() -> bool:
            doc = self.lookupd_json(f"/lookup?topic={topic}&metainfo=true&access=r")
            parts = doc.get("partitions") or {}
            return len(parts) == partitions and all(
                len(p.get("isr") or []) == replicas for p in parts.values()
            )

        wait_for(placed, 30, f"{topic}: {partitions} partitions with {replicas} replicas in sync")

    def subscribed(self, topics: Sequence[str], channels: Sequence[str]) -> bool:
        """Whether every partition's leader of each of ``topics`` has a consumer on each of
        ``channels`` (so that nothing published from now on is before a channel's start)."""
        return all(self._subscribed(topic, channels) for topic in topics)

    def _subscribed(self, topic: str, channels: Sequence[str]) -> bool:
        doc = self.lookupd_json(f"/lookup?topic={topic}&metainfo=true&access=r")
        for info in (doc.get("partitions") or {}).values():
            stats = _get(f"{info['broadcast_address']}:{info['http_port']}",
                         f"/stats?format=json&topic={topic}")  # fmt: skip
            names = {
                c["channel_name"]
                for t in stats.get("topics") or []
                if t["topic_name"] == topic
                for c in t["channels"]
                if c.get("client_count")
            }
            if not set(channels) <= names:
                return False
        return bool(doc.get("partitions"))

    def _host(self, node_id: object) -> str | None:
        """The host of a node id (``address:...``)."""
        return self.net.host_of(str(node_id).split(":")[0])

    def partition(self, topic: str, partition: int) -> PartitionHosts | None:
        """``topic``'s ``partition`` as lookupd says now (None when none answers, or it
        names no leader or a node that is no host of the run)."""
        try:
            doc = self.lookupd_json(f"/lookup?topic={topic}&metainfo=true&access=r")
            info = doc["partitions"][str(partition)]
            leader = self._host(info["id"])
            isr = [self._host(n) for n in info.get("isr") or []]
            catchup = [self._host(n) for n in info.get("catchup") or []]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        if leader is None:
            return None
        return PartitionHosts(leader, tuple(h for h in isr if h), tuple(h for h in catchup if h))

    def leader_of(self, partition: int, topic: str = TOPIC) -> str | None:
        """The host leading ``partition`` of ``topic`` as lookupd says now (None when none
        answers)."""
        found = self.partition(topic, partition)
        return found.leader if found is not None else None

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
        shutil.rmtree(self.disk_root, ignore_errors=True)
