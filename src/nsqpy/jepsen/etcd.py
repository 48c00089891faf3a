"""The etcd of a Jepsen run: three members, each in the namespace of its own host
(``layout.ETCD_HOSTS``: e1, e2, e3), so that the network faults can cut one member from
the others (``etcd-minority``: a real minority, the other two keep the quorum) and cut
nodes from some or all of them.

Each member listens on its host's address, clients on ``CLIENT_PORT`` and peers on
``PEER_PORT``, with its data and log under the run's ``etcd/`` directory (the data, some
hundred MB of preallocated WAL, is deleted at ``close``; the logs stay). Flags are the
installed etcd's defaults but for the names and addresses (heartbeat 100 ms, election
1000 ms). ``start`` returns once every member answers ``/health``; ``close`` kills every
member, also when ``start`` failed (and each dies with the harness: ``PR_SET_PDEATHSIG``).
Only the standard library and the test kit's ``die_with_parent``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from nsqpy.testing.processes import die_with_parent

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
CLIENT_PORT = 2379
PEER_PORT = 2380
START_TIMEOUT = 30.0  # seconds for three members to elect and answer /health


class EtcdMembers:
    """One etcd member on each of ``hosts``. ``address(host)`` is the host's IPv4
    address, ``exec_prefix(host)`` the argv prefix that runs a command in its namespace
    (``netns.Network``'s)."""

    def __init__(
        self,
        hosts: Sequence[str],
        address: Callable[[str], str],
        exec_prefix: Callable[[str], list[str]],
        directory: Path,
        *,
        heartbeat_ms: int = 100,
        election_ms: int = 1000,
        certs: Path | None = None,
    ) -> None:
        self.hosts = list(hosts)
        # With ``certs`` (``ca.pem``, ``<host>/node.pem``, ``node.key``): TLS for clients and
        # peers, each side showing a certificate of that CA (etcd's --client-cert-auth and
        # --peer-client-cert-auth).
        self.certs = certs
        self.scheme = "https" if certs is not None else "http"
        self.address = address
        self.exec_prefix = exec_prefix
        self.directory = directory
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, IO[bytes]] = {}

    @property
    def endpoints(self) -> list[str]:
        """Every member's client address, ``host:port``, in member order."""
        return [f"{self.address(h)}:{CLIENT_PORT}" for h in self.hosts]

    def log_path(self, host: str) -> Path:
        return self.directory / f"{host}.log"

    def argv(self, host: str) -> list[str]:
        """The command that runs ``host``'s member, inside its namespace."""
        scheme = self.scheme
        cluster = ",".join(f"{h}={scheme}://{self.address(h)}:{PEER_PORT}" for h in self.hosts)
        client = f"{scheme}://{self.address(host)}:{CLIENT_PORT}"
        peer = f"{scheme}://{self.address(host)}:{PEER_PORT}"
        tls: list[str] = []
        if self.certs is not None:
            ca, cert, key = (self.certs / "ca.pem", self.certs / host / "node.pem",
                             self.certs / host / "node.key")  # fmt: skip
            tls = [f"--cert-file={cert}", f"--key-file={key}", f"--trusted-ca-file={ca}",
                   "--client-cert-auth", f"--peer-cert-file={cert}", f"--peer-key-file={key}",
                   f"--peer-trusted-ca-file={ca}", "--peer-client-cert-auth"]  # fmt: skip
        return [
            *self.exec_prefix(host), ETCD, f"--name={host}",
            f"--data-dir={self.directory / host}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={cluster}", "--initial-cluster-state=new",
            "--initial-cluster-token=nsqpy-jepsen",
            f"--heartbeat-interval={self.heartbeat_ms}",
            f"--election-timeout={self.election_ms}",
            "--logger=zap", "--log-outputs=stderr", "--log-level=warn", *tls,
        ]  # fmt: skip

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start every member and wait until each is healthy; on failure every member is
        killed and the error carries the logs' tails."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for host in self.hosts:
                log = open(self.log_path(host), "ab")  # noqa: SIM115 - closed by close()
                self._logs[host] = log
                self.procs[host] = subprocess.Popen(
                    die_with_parent(self.argv(host)),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                )  # fmt: skip
            self._wait_healthy(timeout)
        except BaseException:
            self.close()
            raise

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not all(self.healthy(h) for h in self.hosts):
            for host, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"etcd on {host} exited: {self.log_tail(host)}")
            if time.monotonic() > deadline:
                tails = {h: self.log_tail(h) for h in self.hosts}
                raise TimeoutError(f"etcd members not healthy in {timeout}s: {tails}")
            time.sleep(0.1)

    def healthy(self, host: str, timeout: float = 1.0) -> bool:
        """``host``'s member answers ``/health`` with true (it runs and has a leader)."""
        url = f"{self.scheme}://{self.address(host)}:{CLIENT_PORT}/health"
        context = None
        if self.certs is not None:
            context = ssl.create_default_context(cafile=str(self.certs / "ca.pem"))
            context.load_cert_chain(self.certs / host / "node.pem", self.certs / host / "node.key")
        try:
            with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def log_tail(self, host: str, lines: int = 10) -> str:
        try:
            text = self.log_path(host).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Kill every member, reap it and delete its data. Safe to call more than once."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10.0)
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        for host in self.procs:
            shutil.rmtree(self.directory / host, ignore_errors=True)
