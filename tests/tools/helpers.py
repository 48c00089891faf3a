"""Helpers for the utilities' tests: run the real console scripts, publish, consume, receive HTTP.

Every address is on 127.0.0.1. Waiting is by polling with a deadline (``wait_for``).
"""

from __future__ import annotations

import itertools
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from nsqpy.testing import DaemonProcess, WireClient, http_request, nsqd_stats

BIN = Path(sys.executable).parent
_counter = itertools.count()
RUNNING: list[Tool] = []


def unique(prefix: str) -> str:
    """A topic/channel name no other test uses."""
    return f"{prefix}_{os.getpid()}_{next(_counter)}"


def tool_path(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"console script {name} is not installed in {BIN}"
    return str(path)


def run_tool(
    name: str, args: Sequence[str], *, stdin: bytes | None = None, timeout: float = 20.0
) -> subprocess.CompletedProcess[bytes]:
    """Run a console script to completion."""
    return subprocess.run(
        [tool_path(name), *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


class Tool:
    """A console script running in the background; stdout and stderr go to files."""

    def __init__(self, name: str, args: Sequence[str], workdir: Path) -> None:
        self.name = name
        self.stdout_path = workdir / f"{name}.{next(_counter)}.out"
        self.stderr_path = self.stdout_path.with_suffix(".err")
        self._out = open(self.stdout_path, "wb")  # noqa: SIM115 - closed in wait()
        self._err = open(self.stderr_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [tool_path(name), *args], stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL
        )
        RUNNING.append(self)

    @property
    def stdout(self) -> bytes:
        return self.stdout_path.read_bytes()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def running(self) -> bool:
        return self.proc.poll() is None

    def send(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout: float = 20.0) -> int:
        try:
            code = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._out.close()
            self._err.close()
            if self in RUNNING:
                RUNNING.remove(self)
        return code

    def kill(self) -> None:
        """Teardown: whatever the test did, leave no process or open file behind."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait(10.0)


def publish(nsqd: DaemonProcess, topic: str, bodies: Sequence[bytes]) -> None:
    """MPUB over HTTP in chunks."""
    for start in range(0, len(bodies), 500):
        chunk = b"\n".join(bodies[start : start + 500])
        status, body, _ = http_request("POST", f"{nsqd.http}/mpub?topic={topic}", chunk)
        assert status == 200, body


def create_channel(nsqd: DaemonProcess, topic: str, channel: str) -> None:
    status, body, _ = http_request(
        "POST", f"{nsqd.http}/channel/create?topic={topic}&channel={channel}"
    )
    if status == 404:  # the topic must exist first
        http_request("POST", f"{nsqd.http}/topic/create?topic={topic}")
        status, body, _ = http_request(
            "POST", f"{nsqd.http}/channel/create?topic={topic}&channel={channel}"
        )
    assert status == 200, body


def stats(nsqd: DaemonProcess, topic: str) -> dict[str, Any] | None:
    """The topic's /stats entry, or None while nsqd has no such topic."""
    topics = nsqd_stats(nsqd.http, topic)["topics"] or []
    return topics[0] if topics else None


def find_channel(nsqd: DaemonProcess, topic: str, channel: str) -> dict[str, int] | None:
    entry = stats(nsqd, topic)
    for ch in entry["channels"] if entry else []:
        if ch["channel_name"] == channel:
            return ch  # type: ignore[no-any-return]
    return None


def drained(nsqd: DaemonProcess, topic: str, channel: str) -> bool:
    """The channel exists and holds nothing: no depth, nothing in flight or deferred."""
    ch = find_channel(nsqd, topic, channel)
    return ch is not None and ch["depth"] == ch["in_flight_count"] == ch["deferred_count"] == 0


def consume_until(
    port: int,
    topic: str,
    channel: str,
    done: Callable[[list[bytes]], bool],
    timeout: float = 15.0,
) -> list[bytes]:
    """SUB with a raw V2 client, FIN everything, until ``done(bodies)``."""
    client = WireClient(port)
    client.send(b"  V2")
    client.send(f"SUB {topic} {channel}\n".encode())
    assert client.read_frame() == (0, b"OK")
    client.send(b"RDY 500\n")
    bodies: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while not done(bodies):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"got {len(bodies)} messages from {topic}; condition not met")
            client.sock.settimeout(remaining)
            frame_type, data = client.read_frame()
            assert frame_type == 2, data
            struct.unpack(">qH", data[:10])  # timestamp, attempts
            bodies.append(data[26:])
            client.send(b"FIN " + data[10:26] + b"\n")
    finally:
        client.close()
    return bodies


def assert_clean_error(result: subprocess.CompletedProcess[bytes], code: int | None = None) -> str:
    """Non-zero exit, no traceback, one line on stderr; returns that line."""
    err = result.stderr.decode(errors="replace")
    assert result.returncode != 0, err
    if code is not None:
        assert result.returncode == code, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1:0 recording every request; ``respond`` picks the status."""

    respond: Callable[[Request], int] = lambda req: 200
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else b""
                req = Request(self.command, self.path, dict(self.headers.items()), body)
                status = receiver.respond(req)
                with receiver.lock:
                    receiver.requests.append(req)
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = _handle
            do_POST = _handle

            def log_message(self, format: str, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that gave up (request timeout) is part of the tests

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def snapshot(self) -> list[Request]:
        with self.lock:
            return list(self.requests)
