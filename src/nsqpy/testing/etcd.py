"""Real etcd members for tests: ``EtcdCluster`` runs 1 or 3 ``/usr/bin/etcd`` processes
(Debian's ``etcd-server``, v3 API) on free loopback ports, each with its data directory and
log file under a directory the caller owns, and lets a test kill, stop, restart, pause and
resume any member.

Members use small raft timings (heartbeat 50 ms, election 500 ms) so elections finish fast.
``close()`` kills every member it started, also when ``start`` failed, and runs at exit as
a last resort. Imports only the standard library and ``nsqpy.testing.processes``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from nsqpy.testing.processes import die_with_parent, free_ports

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
START_TIMEOUT = 20.0  # seconds: a fresh 3-member cluster elects in well under 2 s


class EtcdCluster:
    """``size`` etcd members on ``host`` (127.0.0.1) with data and logs under ``directory``.

    ``start()`` (or ``await astart()``) returns once every member answers ``/health``;
    ``endpoints`` lists the members' client addresses as ``"127.0.0.1:port"``.
    """

    def __init__(
        self,
        size: int = 1,
        directory: str | Path | None = None,
        *,
        heartbeat_ms: int = 50,
        election_ms: int = 500,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> None:
        if size < 1:
            raise ValueError(f"an etcd cluster needs at least 1 member, not {size}")
        self.size = size
        self.directory = Path(directory) if directory is not None else None
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.host = (
            host  # the members listen here (another host: a namespace of the Jepsen harness)
        )
        self.prefix = list(prefix)  # runs each member (``ip netns exec <ns>``), when given
        ports = free_ports(2 * size)
        self.client_ports = ports[:size]
        self.peer_ports = ports[size:]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * size
        self._logs: list[IO[bytes] | None] = [None] * size
        self._paused: set[int] = set()
        self._tmp: str | None = None
        atexit.register(self.close)

    # -- addresses ---------------------------------------------------------------------

    @property
    def endpoints(self) -> list[str]:
        """Every member's client address, ``"host:port"``, in member order."""
        return [f"{self.host}:{port}" for port in self.client_ports]

    def endpoint(self, i: int) -> str:
        return self.endpoints[i]

    def name(self, i: int) -> str:
        return f"m{i}"

    def log_path(self, i: int) -> Path:
        return self._root() / f"{self.name(i)}.log"

    def _root(self) -> Path:
        if self.directory is None:
            import tempfile

            self._tmp = self._tmp or tempfile.mkdtemp(prefix="nsqpy-etcd-")
            self.directory = Path(self._tmp)
        return self.directory

    def _args(self, i: int) -> list[str]:
        peers = ",".join(
            f"{self.name(j)}=http://{self.host}:{self.peer_ports[j]}" for j in range(self.size)
        )
        client = f"http://{self.host}:{self.client_ports[i]}"
        peer = f"http://{self.host}:{self.peer_ports[i]}"
        return [
            *self.prefix,
            ETCD,
            f"--name={self.name(i)}",
            f"--data-dir={self._root() / self.name(i)}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={peers}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token=nsqpy-test-{self.peer_ports[0]}",
            f"--heartbeat-interval={self.heartbeat_ms}",
            f"--election-timeout={self.election_ms}",
            "--logger=zap",
            "--log-outputs=stderr",
            "--log-level=warn",
        ]

    # -- life cycle --------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT) -> EtcdCluster:
        """Start every member and wait until all are healthy; on failure everything is
        killed and ``RuntimeError`` carries the logs' tails."""
        try:
            self._root().mkdir(parents=True, exist_ok=True)
            for i in range(self.size):
                self._spawn(i)
            self.wait_healthy(timeout=timeout)
        except BaseException:
            self.close()
            raise
        return self

    async def astart(self, timeout: float = START_TIMEOUT) -> EtcdCluster:
        """``start`` without blocking the running event loop."""
        return await asyncio.to_thread(self.start, timeout)

    def _spawn(self, i: int) -> None:
        if self.running(i):
            raise RuntimeError(f"etcd member {i} is already running")
        log = open(self.log_path(i), "ab")  # noqa: SIM115 - closed by _reap
        self._logs[i] = log
        self.procs[i] = subprocess.Popen(
            die_with_parent(self._args(i)),  # (a test run killed by a timeout: they die too)
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # a Ctrl-C in the test's terminal is not theirs
        )

    def running(self, i: int) -> bool:
        proc = self.procs[i]
        return proc is not None and proc.poll() is None

    def kill(self, i: int) -> None:
        """SIGKILL member ``i`` and reap it."""
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            proc.kill()
        self._reap(i)

    def stop(self, i: int, timeout: float = 10.0) -> None:
        """SIGTERM member ``i`` and wait for it (SIGKILL after ``timeout``)."""
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            self.resume(i)
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._reap(i)

    def restart(self, i: int, timeout: float = START_TIMEOUT) -> None:
        """Start a stopped or killed member again on its ports and data; returns once it
        accepts client connections (it may still be catching up or electing)."""
        self.kill(i)
        self._spawn(i)
        deadline = time.monotonic() + timeout
        while not _accepts(self.host, self.client_ports[i]):
            if not self.running(i):
                raise RuntimeError(f"etcd member {i} exited: {self.log_tail(i)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"etcd member {i} did not listen: {self.log_tail(i)}")
            time.sleep(0.02)

    def pause(self, i: int) -> None:
        """SIGSTOP member ``i``: its sockets stay open, it answers nothing."""
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGSTOP)
            self._paused.add(i)

    def resume(self, i: int) -> None:
        """SIGCONT a paused member."""
        proc = self.procs[i]
        if i in self._paused and proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
        self._paused.discard(i)

    def _reap(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10.0)
        log = self._logs[i]
        if log is not None:
            log.close()
            self._logs[i] = None
        self._paused.discard(i)

    def close(self) -> None:
        """Kill every member (paused ones too). Safe to call more than once."""
        for i in range(self.size):
            proc = self.procs[i]
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            self._reap(i)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        atexit.unregister(self.close)

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state -------------------------------------------------------------------------

    def healthy(self, i: int, timeout: float = 1.0) -> bool:
        """Member ``i`` answers ``/health`` with ``true`` (it is running and has a leader)."""
        if not self.running(i) or i in self._paused:
            return False
        url = f"http://{self.host}:{self.client_ports[i]}/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def wait_healthy(
        self, members: list[int] | None = None, timeout: float = START_TIMEOUT
    ) -> None:
        """Wait until every member in ``members`` (default: all running) is healthy."""
        wanted = (
            members if members is not None else [i for i in range(self.size) if self.running(i)]
        )
        deadline = time.monotonic() + timeout
        while True:
            for i in wanted:
                if self.procs[i] is not None and not self.running(i):
                    raise RuntimeError(f"etcd member {i} exited: {self.log_tail(i)}")
            if all(self.healthy(i) for i in wanted):
                return
            if time.monotonic() > deadline:
                tails = {i: self.log_tail(i) for i in wanted}
                raise TimeoutError(f"etcd members {wanted} not healthy in {timeout}s: {tails}")
            time.sleep(0.05)

    def status(self, i: int, timeout: float = 1.0) -> dict[str, object] | None:
        """Member ``i``'s maintenance status (JSON gateway), or None when it does not answer."""
        if not self.running(i) or i in self._paused:
            return None
        req = urllib.request.Request(
            f"http://{self.host}:{self.client_ports[i]}/v3/maintenance/status",
            data=b"{}",
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                found = json.loads(resp.read())
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def leader(self) -> int | None:
        """The index of the member that is the raft leader now, as that member says, or
        None when no running member says it leads."""
        for i in range(self.size):
            status = self.status(i)
            if status is None:
                continue
            header = status.get("header")
            me = header.get("member_id") if isinstance(header, dict) else None
            if me is not None and me == status.get("leader"):
                return i
        return None

    def wait_leader(self, timeout: float = START_TIMEOUT) -> int:
        """Wait until some member leads; returns its index."""
        deadline = time.monotonic() + timeout
        while (found := self.leader()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no etcd leader within {timeout}s")
            time.sleep(0.05)
        return found

    def log_tail(self, i: int, lines: int = 15) -> str:
        try:
            text = self.log_path(i).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
