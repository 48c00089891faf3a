"""A whole nsqpy cluster on one machine for tests: ``LocalCluster``.

etcd (``EtcdCluster``: 1 or 3 members), ``lookupds`` nsqlookupd and ``nodes`` nsqd, every
one a real subprocess on free loopback ports, every daemon started with
``--etcd-endpoints`` and one ``--cluster-id``, with short leases (``lease_ttl``) so that a
killed node is seen dead in seconds. ``start()`` returns once every nsqd is registered and
a lookupd coordinates; ``close()`` kills whatever runs, also after a failed start. A test
kills, restarts, pauses and resumes any daemon by index and reads the cluster over HTTP
(``lookupd_json``, ``nsqd_json``, ``post``). What ``docs/cluster.md`` runs by hand, in one
object. Extra flags and environment for the daemons (``nsqd_flags``, ``lookupd_flags``,
``nsqd_env``, ``lookupd_env``) and an etcd of the caller's (``etcd``: a secure one, say)
adapt it. Imports only the standard library and the rest of ``nsqpy.testing``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nsqpy.testing.certs import make_certs
from nsqpy.testing.etcd import EtcdCluster
from nsqpy.testing.http import http_request
from nsqpy.testing.processes import DaemonProcess, free_ports, lookupd_process, nsqd_process

START_TIMEOUT = 30.0
SECURE_ENV = "NSQPY_TEST_CLUSTER_TLS"  # "1": every LocalCluster runs with mutual TLS


def _cluster_tls_flags(directory: Path) -> list[str]:
    """``--cluster-tls-*`` with a new CA and a certificate for 127.0.0.1 (``nsqpy cert``'s)."""
    files = make_certs(directory)
    return [
        f"--cluster-tls-root-ca-file={files.ca}",
        f"--cluster-tls-cert={files.server_cert}",
        f"--cluster-tls-key={files.server_key}",
    ]


class LocalCluster:
    """etcd, ``lookupds`` nsqlookupd and ``nodes`` nsqd of cluster ``cluster_id`` (see the
    module docstring); data and logs under ``directory``."""

    def __init__(
        self,
        directory: str | Path | None = None,
        *,
        nodes: int = 3,
        lookupds: int = 2,
        etcd_members: int = 1,
        cluster_id: str = "test",
        lease_ttl: str = "2s",
        nsqd_flags: Sequence[str] = (),
        lookupd_flags: Sequence[str] = (),
        etcd: EtcdCluster | None = None,
        nsqd_env: Mapping[int, Mapping[str, str]] | None = None,
        lookupd_env: Mapping[str, str] | None = None,
        secure: bool | None = None,
    ) -> None:
        self._tmp = None if directory is not None else tempfile.mkdtemp(prefix="nsqpy-cluster-")
        self.directory = Path(directory if directory is not None else self._tmp or ".")
        self.cluster_id = cluster_id
        self.lease_ttl = lease_ttl
        self.nsqd_flags = list(nsqd_flags)
        self.lookupd_flags = list(lookupd_flags)
        # Mutual TLS between the daemons (a CA and one certificate for 127.0.0.1 made here);
        # by default as $NSQPY_TEST_CLUSTER_TLS says ("1": every cluster of a test run).
        given = any(f.startswith("--cluster-tls-") for f in self.nsqd_flags)
        if secure is None:
            secure = given or os.environ.get(SECURE_ENV) == "1"
        self.secure = secure
        if secure and not given:
            tls = _cluster_tls_flags(self.directory / "cluster-certs")
            self.nsqd_flags += tls
            self.lookupd_flags += tls
        if secure and not any(f.startswith("--rpc-address") for f in self.lookupd_flags):
            self.lookupd_flags.append("--rpc-address=127.0.0.1:0")  # (the coordinator's)
        self.nsqd_env = dict(nsqd_env or {})  # node index -> environment it adds
        self.lookupd_env = dict(lookupd_env or {})  # what every nsqlookupd's environment adds
        self._own_etcd = etcd is None
        self.etcd = etcd or EtcdCluster(etcd_members, self.directory / "etcd")
        self.lookupds: list[DaemonProcess] = []
        self.nodes: list[DaemonProcess] = []
        self._node_count = nodes
        self._lookupd_count = lookupds
        self._lookupd_ports = [free_ports(2) for _ in range(lookupds)]
        self._rpc_ports = free_ports(nodes)

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def endpoints(self) -> str:
        return ",".join(self.etcd.endpoints)

    def _cluster_flags(self) -> list[str]:
        return [
            f"--etcd-endpoints={self.endpoints}",
            f"--cluster-id={self.cluster_id}",
            f"--etcd-lease-ttl={self.lease_ttl}",
        ]

    def start(self, timeout: float = START_TIMEOUT) -> LocalCluster:
        try:
            if self._own_etcd:
                self.etcd.start()
            # (side by side: every nsqd registers with every lookupd, so those first; each
            # kept as soon as spawned, so that close() ends it whatever fails after)
            for i in range(self._lookupd_count):
                self.lookupds.append(self._lookupd(i).spawn())
            for proc in self.lookupds:
                proc.wait_started(timeout)
            for i in range(self._node_count):
                self.nodes.append(self._nsqd(i).spawn())
            for proc in self.nodes:
                proc.wait_started(timeout)
            self.wait_ready(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _lookupd(self, i: int) -> DaemonProcess:
        tcp, http = self._lookupd_ports[i]
        proc = lookupd_process(
            *self._cluster_flags(), *self.lookupd_flags, tcp_port=tcp, http_port=http
        )
        proc.env = dict(self.lookupd_env) or None
        proc.log_path = self._log_file(f"nsqlookupd{i}")
        return proc

    def _log_file(self, daemon: str) -> Path:
        """``logs/<daemon>.log`` in the cluster's folder: every line the daemon logs, in all
        its lives, as it logs it (a failed test's kept temporary folder shows what the
        cluster did, also when the test was killed by its timeout)."""
        folder = self.directory / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{daemon}.log"

    def _nsqd(self, i: int) -> DaemonProcess:
        data = self.directory / f"nsqd{i}"
        data.mkdir(parents=True, exist_ok=True)
        proc = nsqd_process(
            data,
            *self._cluster_flags(),
            f"--rpc-address=127.0.0.1:{self._rpc_ports[i]}",
            f"--node-id={i}",
            *self.nsqd_flags,
            env=dict(self.nsqd_env[i]) if i in self.nsqd_env else None,
        )
        proc.log_path = self._log_file(f"nsqd{i}")
        return proc

    def close(self) -> None:
        for proc in [*self.nodes, *self.lookupds]:
            try:
                if proc.proc is not None and proc.proc.poll() is None:
                    proc.kill()
            except (OSError, ValueError):
                pass
        if self._own_etcd:
            self.etcd.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- waiting -----------------------------------------------------------------------

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Every running nsqd registered and a coordinator elected that sees them all (it
        places what is created; its view follows a watch of its own)."""
        want = {self.node_id(i) for i, n in enumerate(self.nodes) if self.running(n)}

        def ready() -> bool:
            if not (want <= set(self.live_nodes()) and self.coordinator()):
                return False
            return want <= set(self.live_nodes(self.coordinator_index()))

        try:
            self.wait_for(
                ready,
                timeout,
                f"nodes {sorted(want)} registered and a coordinator",
            )
        except TimeoutError as exc:  # say what was missing, and what the daemons said
            seen = self._describe()
            raise TimeoutError(f"{exc}; {seen}") from None

    @staticmethod
    def wait_for(check: Callable[[], object], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                found = check()
                if found:
                    return found
            except (OSError, ValueError, KeyError) as exc:
                last = exc
            time.sleep(0.05)
        raise TimeoutError(f"not within {timeout}s: {what} (last error: {last})")

    # -- addresses and HTTP ------------------------------------------------------------

    @staticmethod
    def running(proc: DaemonProcess) -> bool:
        return proc.proc is not None and proc.proc.poll() is None

    def _describe(self) -> str:
        parts = []
        for name, get in (("live nodes", self.live_nodes), ("coordinator", self.coordinator)):
            try:
                parts.append(f"{name}: {get()}")
            except (OSError, ValueError, KeyError) as exc:
                parts.append(f"{name}: ({exc})")
        parts += self.exited()
        for kind, procs in (("nsqlookupd", self.lookupds), ("nsqd", self.nodes)):
            for i, proc in enumerate(procs):
                tail = "\n    ".join(proc.log_lines[-8:])
                parts.append(f"{kind} {i} said:\n    {tail}")
        return "\n".join(parts)

    def exited(self) -> list[str]:
        """Each daemon that has exited, with its exit code and last log lines (for a test
        that finds a node gone without having stopped it)."""
        out = []
        for kind, procs in (("nsqlookupd", self.lookupds), ("nsqd", self.nodes)):
            for i, proc in enumerate(procs):
                if proc.proc is not None and proc.proc.poll() is not None:
                    tail = "\n    ".join(proc.log_lines[-15:])
                    out.append(f"{kind} {i} exited with {proc.proc.returncode}:\n    {tail}")
        return out

    def lookupd_http(self, i: int = 0) -> str:
        return f"127.0.0.1:{self.lookupds[i].ports['HTTP']}"

    def lookupd_https(self) -> list[str]:
        return [self.lookupd_http(i) for i, p in enumerate(self.lookupds) if self.running(p)]

    def nsqd_tcp(self, i: int) -> str:
        return f"127.0.0.1:{self.nodes[i].ports['TCP']}"

    def nsqd_http(self, i: int) -> str:
        return f"127.0.0.1:{self.nodes[i].ports['HTTP']}"

    def node_id(self, i: int) -> str:
        """nsqd ``i``'s cluster node id (as kept in its data path once it has joined)."""
        path = self.directory / f"nsqd{i}" / "cluster.json"
        if path.exists():
            return str(json.loads(path.read_text())["node_id"])
        return f"127.0.0.1:{self._rpc_ports[i]}:{self.nodes[i].ports['TCP']}:{i}"

    def node_index(self, node_id: str) -> int:
        for i in range(len(self.nodes)):
            if self.node_id(i) == node_id:
                return i
        raise KeyError(node_id)

    def request(self, method: str, address: str, path: str) -> tuple[int, Any]:
        status, body, _headers = http_request(method, f"http://{address}{path}", timeout=15.0)
        try:
            return status, json.loads(body) if body else None
        except ValueError:
            return status, body.decode(errors="replace")

    def lookupd_json(self, path: str, i: int | None = None) -> Any:
        """GET ``path`` of lookupd ``i`` (None: the first one running); ValueError unless 200."""
        address = self.lookupd_http(i) if i is not None else self.lookupd_https()[0]
        status, doc = self.request("GET", address, path)
        if status != 200:
            raise ValueError(f"GET {path}: {status} {doc}")
        return doc

    def nsqd_json(self, i: int, path: str) -> Any:
        status, doc = self.request("GET", self.nsqd_http(i), path)
        if status != 200:
            raise ValueError(f"GET {path}: {status} {doc}")
        return doc

    def post(self, path: str, i: int | None = None) -> tuple[int, Any]:
        address = self.lookupd_http(i) if i is not None else self.lookupd_https()[0]
        return self.request("POST", address, path)

    # -- the cluster as lookupd sees it ------------------------------------------------

    def live_nodes(self, i: int | None = None) -> list[str]:
        """The nsqd lookupd ``i`` (None: the first one running) sees registered."""
        stats = self.lookupd_json("/cluster/stats", i)
        return [n["id"] for n in stats["node_stat_list"]]

    def coordinator(self) -> str:
        return str(self.lookupd_json("/listlookup").get("lookupdleader", {}).get("ID", ""))

    def coordinator_index(self) -> int:
        found = self.coordinator()
        for i, proc in enumerate(self.lookupds):
            if self.running(proc) and f":{proc.ports['TCP']}:nsqlookup" in found:
                return i
        raise KeyError(found)

    def partitions(self, topic: str) -> dict[int, dict[str, Any]]:
        """The topic's partitions as /lookup?metainfo answers: leader id, isr, catchup, epoch."""
        doc = self.lookupd_json(f"/lookup?topic={topic}&metainfo=true&access=r")
        return {int(p): info for p, info in doc["partitions"].items()}

    # -- faults ------------------------------------------------------------------------

    def kill_nsqd(self, i: int) -> None:
        self.nodes[i].kill()

    def restart_nsqd(self, i: int, timeout: float = START_TIMEOUT) -> None:
        if self.running(self.nodes[i]):
            self.nodes[i].kill()
        self.nodes[i] = self._nsqd(i).start(timeout)

    def stop_nsqd(self, i: int, timeout: float = START_TIMEOUT) -> int:
        """SIGTERM nsqd ``i`` and wait for it (it leaves the cluster at once); its exit
        status. ``restart_nsqd`` starts it again."""
        return self.nodes[i].stop(timeout)

    def kill_lookupd(self, i: int) -> None:
        self.lookupds[i].kill()

    def restart_lookupd(self, i: int, timeout: float = START_TIMEOUT) -> None:
        if self.running(self.lookupds[i]):
            self.lookupds[i].kill()
        self.lookupds[i] = self._lookupd(i).start(timeout)

    def pause_nsqd(self, i: int) -> None:
        os.kill(self.nodes[i].pid, signal.SIGSTOP)

    def resume_nsqd(self, i: int) -> None:
        os.kill(self.nodes[i].pid, signal.SIGCONT)
