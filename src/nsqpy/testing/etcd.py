"""Real etcd members for tests: ``EtcdCluster`` runs 1 or 3 ``/usr/bin/etcd`` processes
(Debian's ``etcd-server``, v3 API) on free loopback ports, each with its data directory and
log file under a directory the caller owns, and lets a test kill, stop, restart, pause and
resume any member.

Members use small raft timings (heartbeat 50 ms, election 500 ms) so elections finish fast.
With ``$NSQPY_TEST_ETCD_IN_MEMORY`` set to ``1`` (the test suite sets it) their data
directories are on ``/dev/shm`` (a tmpfs, when it has 1 GiB free), their logs still under
``directory``: etcd fsyncs every write, and on a disk that other processes are writing
hundreds of MB to, an fsync can wait seconds, longer than the 2 s leases of the test
clusters (a node or the coordinator then loses its lease). A member killed and started
again finds its data as before; the folder goes at ``close()`` (or, after a process killed
before it, when the next such member starts). etcd preallocates its write-ahead log (64
MB a file), which takes memory there: some 130 MB a member.
``close()`` kills every member it started, also when ``start`` failed, and runs at exit as
a last resort.

Secure members, when asked: ``tls`` (a ``CertFiles`` of ``nsqpy.testing.certs``) serves
clients over TLS only and wants their certificate signed by that CA (``https://`` client
URLs, ``--client-cert-auth``; peers stay plain); ``auth_token_ttl`` sets how long etcd's
simple tokens live; ``add_user`` (a user whose role may read and write one key prefix
only) and ``enable_auth`` (the root user, then auth on) go through the JSON gateway without
a token: every ``add_user`` comes before ``enable_auth``. With TLS and auth on, etcd 3.4's
gateway refuses any client certificate with a common name: ``status`` and ``leader`` then
answer None (``/health`` still answers). Imports only the standard library and
``nsqpy.testing.processes``.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from nsqpy.testing.processes import die_with_parent, free_ports, pid_alive

if TYPE_CHECKING:
    from nsqpy.testing.certs import CertFiles

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
IN_MEMORY_ENV = "NSQPY_TEST_ETCD_IN_MEMORY"
SHM = Path("/dev/shm")
START_TIMEOUT = 20.0  # seconds: a fresh 3-member cluster elects in well under 2 s


class EtcdCluster:
    """``size`` etcd members on ``host`` (127.0.0.1) with data and logs under ``directory``.

    ``start()`` (or ``await astart()``) returns once every member answers ``/health``;
    ``endpoints`` lists the members' client addresses as ``"127.0.0.1:port"``. ``tls`` and
    ``auth_token_ttl``: see the module docstring.
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
        tls: CertFiles | None = None,
        auth_token_ttl: int | None = None,
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
        self.tls = tls
        self.auth_token_ttl = auth_token_ttl
        self.scheme = "https" if tls is not None else "http"
        ports = free_ports(2 * size)
        self.client_ports = ports[:size]
        self.peer_ports = ports[size:]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * size
        self._logs: list[IO[bytes] | None] = [None] * size
        self._paused: set[int] = set()
        self._tmp: str | None = None
        self._data_tmp: str | None = None  # (the members' data on /dev/shm)
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

    def data_dir(self, i: int) -> Path:
        """Member ``i``'s data directory (on /dev/shm or not: see the module docstring)."""
        return self._data_root() / self.name(i)

    def _data_root(self) -> Path:
        if self._data_tmp is None and os.environ.get(IN_MEMORY_ENV) == "1" and shm_has_room():
            import tempfile

            _remove_stale_data()
            self._data_tmp = tempfile.mkdtemp(prefix=f"nsqpy-etcd-{os.getpid()}-", dir=SHM)
        return Path(self._data_tmp) if self._data_tmp is not None else self._root()

    def _args(self, i: int) -> list[str]:
        peers = ",".join(
            f"{self.name(j)}=http://{self.host}:{self.peer_ports[j]}" for j in range(self.size)
        )
        client = f"{self.scheme}://{self.host}:{self.client_ports[i]}"
        peer = f"http://{self.host}:{self.peer_ports[i]}"
        secure = []
        if self.tls is not None:
            secure += [
                f"--cert-file={self.tls.server_cert}",
                f"--key-file={self.tls.server_key}",
                f"--trusted-ca-file={self.tls.ca}",
                "--client-cert-auth",
            ]
        if self.auth_token_ttl is not None:
            secure.append(f"--auth-token-ttl={self.auth_token_ttl}")
        return [
            *self.prefix,
            ETCD,
            f"--name={self.name(i)}",
            f"--data-dir={self.data_dir(i)}",
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
            *secure,
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
        for tmp in (self._tmp, self._data_tmp):
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        self._tmp = self._data_tmp = None
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
        try:
            with self._open(i, "/health", None, timeout) as resp:
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
        try:
            with self._open(i, "/v3/maintenance/status", {}, timeout) as resp:
                found = json.loads(resp.read())
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def revision(self) -> int:
        """etcd's current revision, as the first member that answers says (RuntimeError
        when none does)."""
        for i in range(self.size):
            status = self.status(i)
            header = status.get("header") if status is not None else None
            if isinstance(header, dict) and "revision" in header:
                return int(header["revision"])
        raise RuntimeError("no etcd member answers")

    def get(self, key: str, revision: int = 0) -> tuple[bytes, int] | None:
        """The value of ``key`` and its mod_revision (JSON gateway, first running member;
        as of ``revision`` when given), or None when it has none. RuntimeError with etcd's
        message when it refuses (a revision compacted away, say)."""
        i = next(j for j in range(self.size) if self.running(j))
        body = {"key": _b64(key.encode()), **({"revision": revision} if revision else {})}
        try:
            with self._open(i, "/v3/kv/range", body, 5.0) as resp:
                found = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            with exc:
                text = exc.read().decode()
            raise RuntimeError(f"etcd range {key}: {exc.code} {text!r}") from None
        kvs = found.get("kvs") or []
        if not kvs:
            return None
        return base64.b64decode(kvs[0].get("value", "")), int(kvs[0]["mod_revision"])

    def put(self, key: str, value: bytes) -> None:
        """``key`` set to ``value`` (JSON gateway, first running member)."""
        self._post("/v3/kv/put", {"key": _b64(key.encode()), "value": _b64(value)})

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

    # -- the JSON gateway, users -------------------------------------------------------

    def _open(self, i: int, path: str, body: dict[str, Any] | None, timeout: float) -> Any:
        """GET ``path`` of member ``i`` (POST of ``body`` as JSON when given), over TLS with
        the client certificate when the members serve TLS."""
        context = None
        if self.tls is not None:
            context = ssl.create_default_context(cafile=self.tls.ca)
            context.load_cert_chain(self.tls.client_cert, self.tls.client_key)
        request = urllib.request.Request(
            f"{self.scheme}://{self.host}:{self.client_ports[i]}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method="GET" if body is None else "POST",
        )
        return urllib.request.urlopen(request, timeout=timeout, context=context)

    def _post(self, path: str, body: dict[str, Any]) -> None:
        """POST ``body`` to the first running member's gateway; RuntimeError unless 200."""
        i = next(j for j in range(self.size) if self.running(j))
        try:
            with self._open(i, path, body, 10.0) as resp:
                resp.read()
        except urllib.error.HTTPError as exc:
            with exc:
                text = exc.read().decode()
            raise RuntimeError(f"etcd {path}: {exc.code} {text!r}") from None

    def add_user(self, name: str, password: str, prefix: str) -> None:
        """User ``name`` whose role (also ``name``) may read and write the keys under
        ``prefix`` and nothing else (``etcdctl role grant-permission --prefix=true``)."""
        start = prefix.encode()
        end = start[:-1] + bytes([start[-1] + 1])  # (etcd's range end of a prefix)
        self._post("/v3/auth/role/add", {"name": name})
        perm = {"permType": "READWRITE", "key": _b64(start), "range_end": _b64(end)}
        self._post("/v3/auth/role/grant", {"name": name, "perm": perm})
        self._post("/v3/auth/user/add", {"name": name, "password": password})
        self._post("/v3/auth/user/grant", {"user": name, "role": name})

    def enable_auth(self, root_password: str = "root") -> None:
        """The user ``root`` (role ``root``, as etcd wants before auth goes on), then auth
        on: from now on every call needs a user's token (or a certificate's common name)."""
        self._post("/v3/auth/user/add", {"name": "root", "password": root_password})
        self._post("/v3/auth/user/grant", {"user": "root", "role": "root"})
        self._post("/v3/auth/enable", {})

    def log_tail(self, i: int, lines: int = 15) -> str:
        try:
            text = self.log_path(i).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def shm_has_room() -> bool:
    """/dev/shm is a tmpfs with 1 GiB free (a container's is often 64 MB)."""
    try:
        st = os.statvfs(SHM)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize >= 1 << 30


def _remove_stale_data() -> None:
    """Members' data on /dev/shm left by a process that is gone (killed before ``close``)."""
    for folder in SHM.glob("nsqpy-etcd-*-*"):
        pid = folder.name.split("-")[2]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
