"""--tcp-address / --http-address as unix socket paths (nsqd 1.3.0, SPEC 5.1), bad ones refused."""

from __future__ import annotations

import http.client
import json
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from nsqpy.options import listen_address
from nsqpy.protocol.frames import FrameDecoder
from nsqpy.testing import wait_for

NSQD = str(Path(sys.executable).with_name("nsqd"))


class UnixWire:
    """A protocol V2 client over a unix socket."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(str(path))
        self.decoder = FrameDecoder()
        self.frames: list[tuple[int, bytes]] = []
        self.sock.sendall(b"  V2")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()

    def read_frame(self) -> tuple[int, bytes]:
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.frames.extend(self.decoder.feed(data))
        return self.frames.pop(0)


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=10)
        self.path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(self.path)
        self.sock = sock


def http_get(path: Path, url: str) -> tuple[int, bytes]:
    conn = UnixHTTPConnection(path)
    try:
        conn.request("GET", url)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_nsqd_serves_tcp_and_http_on_unix_sockets(tmp_path: Path) -> None:
    tcp, web = tmp_path / "nsqd-tcp.sock", tmp_path / "nsqd-http.sock"
    proc = subprocess.Popen(
        [NSQD, f"--tcp-address={tcp}", f"--http-address={web}", f"--data-path={tmp_path}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: (tcp.is_socket() and web.is_socket()) or proc.poll() is not None)
        assert proc.poll() is None
        producer = UnixWire(tcp)
        body = b"over a unix socket"
        producer.send(b"PUB t\n" + struct.pack(">i", len(body)) + body)
        assert producer.read_frame() == (0, b"OK")
        ident = json.dumps({"feature_negotiation": True, "client_id": "unix"}).encode()
        consumer = UnixWire(tcp)
        consumer.send(b"IDENTIFY\n" + struct.pack(">i", len(ident)) + ident)
        ftype, reply = consumer.read_frame()
        assert ftype == 0 and json.loads(reply)["version"] == "1.3.0"
        consumer.send(b"SUB t c\n")
        assert consumer.read_frame() == (0, b"OK")
        consumer.send(b"RDY 1\n")
        ftype, data = consumer.read_frame()
        assert ftype == 2 and data[26:] == body
        consumer.send(b"FIN " + data[10:26] + b"\n")
        status, info = http_get(web, "/info")
        assert status == 200
        doc = json.loads(info)
        assert (doc["tcp_port"], doc["http_port"]) == (-1, -1)
        status, stats = http_get(web, "/stats?format=json")
        (channel,) = json.loads(stats)["topics"][0]["channels"]
        assert channel["client_count"] == 1
        producer.close()
        consumer.close()
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
        assert proc.stderr is not None
        proc.stderr.close()
    assert not tcp.exists() and not web.exists()  # removed on shutdown, as Go does


@pytest.mark.parametrize(
    "flag",
    [
        "--tcp-address=127.0.0.1:99999",
        "--tcp-address=127.0.0.1:http",
        "--http-address=[::1]:x",
        "--http-address=localhost:-1",
    ],
)
def test_a_bad_address_is_one_line_and_exit_2(tmp_path: Path, flag: str) -> None:
    proc = subprocess.run([NSQD, flag, f"--data-path={tmp_path}"], capture_output=True, timeout=30)
    assert proc.returncode == 2
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "not a port" in lines[0], lines
    assert not (tmp_path / "nsqd.dat").exists()


def test_listen_address_reads_addresses_as_nsqd_does() -> None:
    assert listen_address("a", "127.0.0.1:4150") == ("127.0.0.1", 4150)
    assert listen_address("a", ":0") == ("0.0.0.0", 0)
    assert listen_address("a", "[::1]:5") == ("::1", 5)
    # What Go's SplitHostPort cannot split is a unix socket path.
    assert listen_address("a", "/tmp/nsqd.sock") == "/tmp/nsqd.sock"
    assert listen_address("a", "nsqd.sock") == "nsqd.sock"
    assert listen_address("a", "./a:1") == "./a:1"
