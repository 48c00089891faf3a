"""Test kit shipped as public API: a fake clock, daemons as subprocesses, a wire client.

Product code never imports this package. Tests and benchmarks do.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from nsqpy.options import NsqdOptions
from nsqpy.protocol.frames import FrameDecoder


def nsqd_options(tmp_path: Path, **overrides: object) -> NsqdOptions:
    """Options for an in-process nsqd on loopback ephemeral ports, data under ``tmp_path``,
    with a fast queue scan; ``overrides`` set any other field."""
    opts = NsqdOptions(
        tcp_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        data_path=str(tmp_path / "data"),
        broadcast_address="127.0.0.1",
        queue_scan_interval_ms=10,
    )
    for key, value in overrides.items():
        setattr(opts, key, value)
    return opts


def free_ports(n: int = 1) -> list[int]:
    """``n`` distinct loopback ports free at the time of asking: every socket is held
    open until all are picked, so the kernel cannot hand the same port out twice."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


class FrameSink:
    """A client connection as the broker sees it (``Client.sink``): keeps the message
    frames it is sent, for tests and benchmarks that drive a broker without sockets."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.closed = False

    def send_message(self, frame: bytes) -> None:
        self.frames.append(frame)

    def close_by_server(self) -> None:
        self.closed = True

    def bodies(self) -> list[bytes]:
        """The message bodies sent, in order (frames carry size, type, then the message)."""
        from nsqpy.protocol.message import decode_message

        return [decode_message(frame[8:]).body for frame in self.frames]


class FakeClock:
    """A clock in nanoseconds that moves only when told to."""

    def __init__(self, start_ns: int = 1_700_000_000_000_000_000) -> None:
        self.now = start_ns

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += int(ms * 1_000_000)


def wait_for(predicate: object, timeout: float = 10.0, interval: float = 0.02) -> object:
    """Poll ``predicate()`` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()  # type: ignore[operator]
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout}s")
        time.sleep(interval)


_LISTEN = re.compile(r"(TCP|HTTP|HTTPS): listening on (\S+):(\d+)")


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
    ) -> None:
        self.program = program
        self.args = list(args)
        self.env = env
        self.nofile = nofile  # RLIMIT_NOFILE (soft and hard) of the process, when given
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}
        self.log_lines: list[str] = []
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    def start(self, timeout: float = 15.0) -> DaemonProcess:
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        self.ports = {}
        self._ready.clear()
        self.proc = subprocess.Popen(
            [_bin(self.program), *self.args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=self._limit if self.nofile is not None else None,
        )
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
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
        return {"TCP", "HTTP"} if self.program != "nsqadmin" else {"HTTP"}

    def _read_log(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        want = self._wanted()
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.log_lines.append(line)
            m = _LISTEN.search(line)
            if m:
                self.ports[m.group(1)] = int(m.group(3))
                if want <= set(self.ports):
                    self._ready.set()
        self.proc.stderr.close()
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
            raise

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
    return DaemonProcess(
        "nsqd",
        [
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            f"--data-path={data_path}",
            "--broadcast-address=127.0.0.1",
            *extra,
        ],
        env=env,
        nofile=nofile,
    )


def simulate_reboot(data_path: str | Path) -> int:
    """Make every partition log under ``data_path`` look as if written before a reboot (the
    boot id in its ``reserved`` file), as after a power loss; returns how many were
    changed. Pair it with cutting the logs' unsynced tails to simulate what a power loss
    does to the files."""
    changed = 0
    for path in Path(data_path).rglob("reserved"):
        fields = path.read_text().split()
        if len(fields) == 6 and fields[4] == "boot":
            fields[5] = "an-earlier-boot"
            path.write_text(" ".join(fields) + "\n")
            changed += 1
    return changed


class SmallDisk:
    """A tmpfs of ``size_bytes`` mounted at ``path`` (root only): a disk that can be filled.

    ``fill()`` writes a filler file until the disk is full (another process taking the
    space, as far as a daemon on it can tell); ``free()`` removes it. ``unmount()`` (or
    leaving the ``with`` block) lazily unmounts, also when a daemon still holds files."""

    def __init__(self, path: str | Path, size_bytes: int) -> None:
        self.path = Path(path)
        self.size_bytes = size_bytes
        self.mounted = False

    def mount(self) -> SmallDisk:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes}", "tmpfs", str(self.path)],
            check=True,
            capture_output=True,
        )
        self.mounted = True
        return self

    @property
    def filler(self) -> Path:
        return self.path / "filler"

    def fill(self, leave_bytes: int = 0) -> None:
        """Take every free byte but ``leave_bytes`` (rounded down to 4 KiB blocks)."""
        st = os.statvfs(self.path)
        free = st.f_bavail * st.f_frsize - leave_bytes
        block = b"\0" * 65536
        with open(self.filler, "ab") as f:
            try:
                while free > 0:
                    free -= f.write(block[: min(len(block), free)] or block[:4096])
                    f.flush()
            except OSError:
                pass  # full

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)
            self.mounted = False

    def __enter__(self) -> SmallDisk:
        return self.mount()

    def __exit__(self, *exc: object) -> None:
        self.unmount()


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes, dict[str, str]]:
    return http_request("GET", url, timeout=timeout)


def http_request(
    method: str, url: str, body: bytes | None = None, timeout: float = 5.0
) -> tuple[int, bytes, dict[str, str]]:
    """One HTTP request; returns (status, body, headers) also for error statuses."""
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read(), dict(err.headers)


_OPEN_SOCKETS: list[socket.socket] = []


def close_test_connections() -> None:
    """Close every WireClient socket still open (test teardown)."""
    while _OPEN_SOCKETS:
        _OPEN_SOCKETS.pop().close()


class WireClient:
    """A blocking protocol V2 client for wire-transcript tests."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        _OPEN_SOCKETS.append(self.sock)
        self.decoder = FrameDecoder()
        self.frames: list[tuple[int, bytes]] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> tuple[int, bytes]:
        """The next frame, skipping heartbeats (answered with NOP)."""
        while True:
            while not self.frames:
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("connection closed by server")
                self.frames.extend(self.decoder.feed(data))
            frame = self.frames.pop(0)
            if frame == (0, b"_heartbeat_"):
                self.send(b"NOP\n")
                continue
            return frame

    def closed(self, timeout: float = 5.0) -> bool:
        """True when the server closes the connection (after any pending frames)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.frames.extend(self.decoder.feed(data))
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def pub_body(topic: str, body: bytes) -> bytes:
    return f"PUB {topic}\n".encode() + struct.pack(">i", len(body)) + body


_OPEN_WIRES: list[AsyncWire] = []


class AsyncWire:
    """An asyncio protocol V2 client for in-process wire-transcript tests."""

    def __init__(self, reader: object, writer: object) -> None:
        import asyncio

        assert isinstance(reader, asyncio.StreamReader)
        assert isinstance(writer, asyncio.StreamWriter)
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.frames: list[tuple[int, bytes]] = []
        self.answer_heartbeats = True

    @classmethod
    async def connect(cls, port: int, *, magic: bool = True) -> AsyncWire:
        import asyncio

        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        wire = cls(reader, writer)
        _OPEN_WIRES.append(wire)
        if magic:
            await wire.send(b"  V2")
        return wire

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_frame(self, timeout: float = 5.0) -> tuple[int, bytes]:
        """The next frame, skipping heartbeats (answered with NOP when enabled)."""
        import asyncio

        while True:
            while not self.frames:
                data = await asyncio.wait_for(self.reader.read(65536), timeout)
                if not data:
                    raise ConnectionError("connection closed by server")
                self.frames.extend(self.decoder.feed(data))
            frame = self.frames.pop(0)
            if frame == (0, b"_heartbeat_") and self.answer_heartbeats:
                await self.send(b"NOP\n")
                continue
            return frame

    async def expect_closed(self, timeout: float = 5.0) -> None:
        import asyncio

        while True:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                await self.close()
                return
            self.frames.extend(self.decoder.feed(data))

    @classmethod
    async def close_all(cls) -> None:
        """Close every wire opened by ``connect`` (for test teardown)."""
        while _OPEN_WIRES:
            await _OPEN_WIRES.pop().close()

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
