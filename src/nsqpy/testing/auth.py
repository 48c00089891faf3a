"""An HTTP auth server for tests against a real nsqd, and clients that AUTH with it.

``AuthStub`` answers nsqd's ``GET /auth?secret=...`` from a table of replies keyed by the
secret (a thread on 127.0.0.1:0; a context manager). ``authed_client`` connects to nsqd and
AUTHs; ``auth_reply`` sends AUTH and returns nsqd's answer; ``timed_pub`` publishes and says
how long the answer took.
"""

from __future__ import annotations

import json
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from nsqpy.testing import WireClient, pub


def grant(topic: str, *permissions: str) -> dict[str, Any]:
    """An auth reply granting ``permissions`` (publish by default) on topics matching ``topic``."""
    return {
        "ttl": 3600,
        "identity": "fault-test",
        "authorizations": [
            {"topic": topic, "channels": [".*"], "permissions": list(permissions or ["publish"])}
        ],
    }


class AuthStub:
    """nsqd's auth server: replies by secret (404 for an unknown one)."""

    def __init__(self) -> None:
        self.replies: dict[str, dict[str, Any]] = {}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                reply = stub.replies.get(query.get("secret", [""])[0])
                body = json.dumps(reply).encode() if reply is not None else b"no"
                self.send_response(200 if reply is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> AuthStub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5.0)

    def __enter__(self) -> AuthStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def auth_reply(client: WireClient, secret: str) -> tuple[int, bytes]:
    """Send the magic and AUTH with ``secret`` on a new connection; nsqd's answer."""
    client.send(b"  V2AUTH\n" + struct.pack(">i", len(secret)) + secret.encode())
    return client.read_frame()


def authed_client(port: int, secret: str, timeout: float = 5.0) -> WireClient:
    """A V2 connection to nsqd that has AUTHed with ``secret`` (and was granted something)."""
    client = WireClient(port, timeout=timeout)
    ftype, data = auth_reply(client, secret)
    assert ftype == 0 and b"permission_count" in data, data
    return client


def timed_pub(client: WireClient, topic: str, body: bytes = b"x") -> float:
    """Publish one message; the seconds until nsqd answered OK."""
    started = time.monotonic()
    client.send(pub(topic, body))
    assert client.read_frame() == (0, b"OK")
    return time.monotonic() - started
