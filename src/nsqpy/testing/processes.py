"""Daemons as real subprocesses on loopback ports: ``DaemonProcess``, with ``nsqd_process``
and ``lookupd_process`` for the usual flags, and ``free_ports`` for tests that must name a
port up front.

A daemon listens on ``127.0.0.1:0`` and the ports it got are read from its log lines.
Imports only the standard library.
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (what a bind to port 0 draws from)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PICK_LOW = 10_000
_handed: set[int] = set()  # ports this process handed out (never twice)


def _worker_slice(low: int, high: int) -> tuple[int, int]:
    """The part of ``[low, high]`` this process draws from: all of it, or, in one of
    several pytest-xdist workers (``PYTEST_XDIST_WORKER`` ``gw<i>`` of
    ``PYTEST_XDIST_WORKER_COUNT``), its own share, so two workers never hand out the
    same port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return low, high
    index, workers = int(worker[2:]), max(1, int(count))
    size = (high - low + 1) // workers
    start = low + (index % workers) * size
    return start, start + size - 1


def free_ports(n: int = 1) -> list[int]:
    """``n`` distinct loopback ports free at the time of asking, for a daemon to bind later.

    They are drawn below the kernel's ephemeral range, so that nothing bound to port 0
    meanwhile (another daemon's own listener, a client's connection) can take one before
    its owner binds it; this process never hands the same port out twice, nor two test
    workers the same port (``_worker_slice``). Where the ephemeral range leaves no room
    below it, the kernel picks (bind to port 0)."""
    low, high = _worker_slice(_PICK_LOW, _ephemeral_low() - 1)
    if high - low < 1000:
        return _kernel_ports(n)
    if len(_handed) > (high - low) // 2:
        _handed.clear()  # (long gone: the tests that used them have ended)
    socks: list[socket.socket] = []
    picked: list[int] = []
    try:
        for _ in range(200 * n):
            if len(picked) == n:
                break
            port = random.randint(low, high)
            if port in _handed or port in picked:
                continue
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            socks.append(sock)
            picked.append(port)
    finally:
        for sock in socks:
            sock.close()
    if len(picked) < n:
        return _kernel_ports(n)
    _handed.update(picked)
    return picked


def _kernel_ports(n: int) -> list[int]:
    """``n`` distinct ports the kernel picks (every socket held until all are bound)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


_LISTEN = re.compile(r"(TCP|HTTP|HTTPS): listening on (\S+):(\d+)")


SETPRIV = shutil.which("setpriv")  # util-linux (Debian's essential set)


def die_with_parent(command: Sequence[str]) -> list[str]:
    """``command`` run so that it gets SIGKILL when the process that started it dies
    (Linux's PR_SET_PDEATHSIG, set by util-linux's ``setpriv`` before it execs the
    command): a test run killed by a timeout leaves no daemon behind. Only from the main
    thread (the signal follows the starting *thread*) and where ``setpriv`` exists. No
    Python runs in the child: forking a process whose other threads are inside gRPC (an
    etcd client) and running Python before exec can kill the child."""
    if SETPRIV is None or threading.current_thread() is not threading.main_thread():
        return list(command)
    return [SETPRIV, "--pdeathsig", "KILL", "--", *command]


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user counts: it is alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _bin(name: str) -> str:
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


class DaemonProcess:
    """A daemon (nsqd, nsqlookupd, nsqadmin) run as a real subprocess on loopback ports.

    Ports are chosen by the daemon (``127.0.0.1:0``) and read from its log lines.
    """

    def __init__(
        self,
        program: str,
        args: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        nofile: int | None = None,
        prefix: Sequence[str] = (),
        log_path: str | Path | None = None,
    ) -> None:
        self.program = program
        self.args = list(args)
        self.env = env
        self.nofile = nofile  # RLIMIT_NOFILE (soft and hard) of the process, when given
        self.prefix = list(prefix)  # runs the program (``ip netns exec <ns>`` …), when given
        self.log_path = Path(log_path) if log_path is not None else None  # log lines also go here
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}
        self.log_lines: list[str] = []
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    def start(self, timeout: float = 15.0) -> DaemonProcess:
        """Run the program and return once it listens (``spawn`` then ``wait_started``)."""
        return self.spawn().wait_started(timeout)

    def spawn(self) -> DaemonProcess:
        """Run the program and return at once (several daemons start side by side:
        most of a start is the interpreter's imports); ``wait_started`` then waits."""
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        self.ports = {}
        self._ready.clear()
        self.proc = subprocess.Popen(
            die_with_parent([*self.prefix, _bin(self.program), *self.args]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=self._limit if self.nofile is not None else None,
        )
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        return self

    def wait_started(self, timeout: float = 15.0) -> DaemonProcess:
        """Wait until the spawned program listens; it is killed if it does not in
        ``timeout`` seconds, and an exit before is an error with its last log lines."""
        assert self.proc is not None
        if not self._ready.wait(timeout):
            self.kill()
            raise TimeoutError(f"{self.program} did not start: {self.log_lines[-20:]}")
        if not self._wanted() <= set(self.ports):  # the log ended: the program exited
            code = self.proc.wait(5.0)
            raise RuntimeError(
                f"{self.program} exited with {code} at start: {self.log_lines[-20:]}"
            )
        return self

    def _limit(self) -> None:
        """In the child before exec: the descriptor limit asked for (soft = hard)."""
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_bytes(self) -> int:
        """The process's resident set size now (VmRSS of /proc/<pid>/status)."""
        return proc_status_kb(self.pid, "VmRSS") * 1024

    def open_fds(self) -> int:
        """How many descriptors the process holds now."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def _wanted(self) -> set[str]:
        """The listeners the program is started once it logs: an nsqd given a certificate,
        its key and an --https-address listens on HTTPS too (logged after TCP and HTTP)."""
        if self.program == "nsqadmin":
            return {"HTTP"}
        last = dict(a.split("=", 1) for a in self.args if a.startswith("--") and "=" in a)
        https = all(last.get(f) for f in ("--tls-cert", "--tls-key", "--https-address"))
        return {"TCP", "HTTP", "HTTPS"} if self.program == "nsqd" and https else {"TCP", "HTTP"}

    def _read_log(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        want = self._wanted()
        copy = open(self.log_path, "a") if self.log_path is not None else None  # noqa: SIM115
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.log_lines.append(line)
            if copy is not None:
                copy.write(line + "\n")
                copy.flush()
            m = _LISTEN.search(line)
            if m:
                self.ports[m.group(1)] = int(m.group(3))
                if want <= set(self.ports):
                    self._ready.set()
        self.proc.stderr.close()
        if copy is not None:
            copy.close()
        self._ready.set()

    def _reap(self) -> None:
        """After exit: let the log reader drain and close the pipe."""
        if self._reader is not None:
            self._reader.join(5.0)

    @property
    def tcp_port(self) -> int:
        return self.ports["TCP"]

    @property
    def http_port(self) -> int:
        return self.ports["HTTP"]

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        self._reap()
        return code

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None:
            return 0
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(
                f"{self.program} did not stop within {timeout}s of SIGTERM: {self.log_lines[-30:]}"
            ) from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reap()

    def __enter__(self) -> DaemonProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def proc_status_kb(pid: int, field: str) -> int:
    """A ``kB`` field (VmRSS, VmHWM …) of /proc/<pid>/status."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def nsqd_process(
    data_path: str | Path,
    *extra: str,
    env: dict[str, str] | None = None,
    nofile: int | None = None,
) -> DaemonProcess:
    """nsqd on loopback ports chosen by it (HTTPS too, when ``extra`` gives it a
    certificate), data under ``data_path``, broadcasting 127.0.0.1; ``extra`` flags are
    appended (a flag given again there wins)."""
    return DaemonProcess(
        "nsqd",
        [
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            "--https-address=127.0.0.1:0",  # (served only with --tls-cert and --tls-key)
            f"--data-path={data_path}",
            "--broadcast-address=127.0.0.1",
            *extra,
        ],
        env=env,
        nofile=nofile,
    )


def lookupd_process(*extra: str, tcp_port: int = 0, http_port: int = 0) -> DaemonProcess:
    """nsqlookupd on loopback (ports chosen by it unless given), broadcasting 127.0.0.1."""
    return DaemonProcess(
        "nsqlookupd",
        [
            f"--tcp-address=127.0.0.1:{tcp_port}",
            f"--http-address=127.0.0.1:{http_port}",
            "--broadcast-address=127.0.0.1",
            *extra,
        ],
    )


StartNsqd = Callable[..., DaemonProcess]
"""The ``start_nsqd`` fixture: ``start_nsqd(*flags, data=..., env=..., nofile=...)``."""


def run_json_script(script: str | Path, *args: object, timeout: float = 60.0) -> dict[str, Any]:
    """Run a Python script (a real client from PyPI driven in its own interpreter) with
    ``args``; its last line of output is a JSON object, returned. AssertionError with its
    output when it fails."""
    proc = subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        capture_output=True,
        timeout=timeout,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(report, dict)
    return report
