"""Helpers of nsqadmin's tests: the live stack's handle, an HTTP client to an in-process
nsqadmin, the real nsqadmin program as a subprocess, and polling with a deadline.

Every test uses its own topic names (``unique``), so tests share one stack safely.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from nsqpy.nsqadmin.app import NsqAdmin
from nsqpy.testing import DaemonProcess, eventually, http_get, http_request

LISTEN = re.compile(r"HTTP: listening on 127\.0\.0\.1:(\d+)")


@dataclass
class Stack:
    lookupd: DaemonProcess
    nsqd: list[DaemonProcess]

    @property
    def lookupd_http(self) -> str:
        return f"127.0.0.1:{self.lookupd.http_port}"

    def nsqd_http(self, i: int) -> str:
        return f"127.0.0.1:{self.nsqd[i].http_port}"

    def node(self, i: int) -> str:
        """nsqadmin's node id: broadcast address (127.0.0.1) and HTTP port."""
        return self.nsqd_http(i)

    # -- driving nsqd and lookupd directly (the ground truth the tests check against) ----

    def pub(self, i: int, topic: str, *bodies: bytes) -> None:
        for body in bodies:
            status, data, _ = http_request(
                "POST", f"http://{self.nsqd_http(i)}/pub?topic={topic}", body
            )
            assert status == 200, data

    def nsqd_post(self, i: int, path: str) -> None:
        status, data, _ = http_request("POST", f"http://{self.nsqd_http(i)}{path}", b"")
        assert status == 200, data

    def topic_stats(self, i: int, topic: str) -> dict[str, Any] | None:
        """nsqd ``i``'s /stats entry for ``topic`` (None when it does not have it)."""
        status, data, _ = http_get(f"http://{self.nsqd_http(i)}/stats?format=json&topic={topic}")
        assert status == 200, data
        for t in json.loads(data)["topics"] or []:
            if t["topic_name"] == topic:
                return dict(t)
        return None

    def channel_stats(self, i: int, topic: str, channel: str) -> dict[str, Any] | None:
        t = self.topic_stats(i, topic)
        found = [c for c in (t or {}).get("channels", []) if c["channel_name"] == channel]
        return dict(found[0]) if found else None

    def lookupd_get(self, path: str) -> tuple[int, Any]:
        status, data, _ = http_get(f"http://{self.lookupd_http}{path}")
        return status, json.loads(data) if data else None


def start_all(daemons: list[DaemonProcess]) -> None:
    """Start daemons concurrently (each start blocks until its ports are logged)."""
    errors: list[BaseException] = []

    def start(d: DaemonProcess) -> None:
        try:
            d.start()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(d,)) for d in daemons]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class AdminClient:
    """An in-process nsqadmin and an HTTP session to it."""

    admin: NsqAdmin
    session: aiohttp.ClientSession
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        base = "" if self.admin.opts.base_path == "/" else self.admin.opts.base_path
        return f"http://127.0.0.1:{self.admin.http_port}{base}"

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        async with self.session.request(
            method, self.url + path, data=data, headers={**self.headers, **(headers or {})}
        ) as resp:
            text = await resp.read()
            if resp.content_type == "application/json":
                return resp.status, json.loads(text)
            return resp.status, text.decode("latin-1")

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return await self.call("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.call("POST", path, body, **kw)

    async def delete(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.call("DELETE", path, body, **kw)


MakeAdmin = Callable[..., Awaitable[AdminClient]]


async def registered(stack: Stack, topic: str, nodes: int = 1) -> None:
    """Wait until lookupd lists ``nodes`` producers of ``topic``."""

    def check() -> bool:
        status, doc = stack.lookupd_get(f"/lookup?topic={topic}")
        return status == 200 and len(doc["producers"]) >= nodes

    await eventually(check, what=f"{topic} registered on {nodes} nodes")


# -- the real program ----------------------------------------------------------------------


class AdminProgram:
    """``python -m nsqpy.nsqadmin`` as a subprocess (the ``nsqadmin`` console script's main)."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nsqpy.nsqadmin", "--http-address=127.0.0.1:0", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.port = 0
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip())
            m = LISTEN.search(line)
            if m:
                self.port = int(m.group(1))
                break
        if not self.port:
            raise RuntimeError(f"nsqadmin did not start: {self.lines}")
        self._drain = threading.Thread(target=self._read, daemon=True)
        self._drain.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the program and wait for its exit code (killed if it does not exit)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._drain.join(5)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return code
