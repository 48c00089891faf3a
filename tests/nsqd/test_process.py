"""The real ``nsqd`` program: durability across SIGKILL, graceful SIGTERM, bad flags, fuzz."""

from __future__ import annotations

import json
import random
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from nsqpy.testing import WireClient, http_get, http_request, nsqd_process, pub_body, wait_for


def consume_all(port: int, topic: str, channel: str, expect: int, timeout: float = 15.0) -> list[bytes]:
    c = WireClient(port)
    c.send(b"  V2")
    c.send(f"SUB {topic} {channel}\n".encode())
    assert c.read_frame() == (0, b"OK")
    c.send(b"RDY 200\n")
    bodies: list[bytes] = []
    c.sock.settimeout(timeout)
    while len(bodies) < expect:
        ftype, data = c.read_frame()
        assert ftype == 2, data
        bodies.append(data[26:])
        c.send(b"FIN " + data[10:26] + b"\n")
    c.close()
    return bodies


def test_acknowledged_messages_survive_sigkill(tmp_path: Path) -> None:
    acked: list[bytes] = []
    with nsqd_process(tmp_path / "data") as nsqd:
        c = WireClient(nsqd.tcp_port)
        c.send(b"  V2")
        for i in range(300):
            body = f"msg-{i}".encode()
            c.send(pub_body("durable", body))
            assert c.read_frame() == (0, b"OK")
            acked.append(body)
        nsqd.signal(signal.SIGKILL)
        nsqd.wait()
    with nsqd_process(tmp_path / "data") as again:
        got = consume_all(again.tcp_port, "durable", "c", len(acked))
        assert set(got) >= set(acked)


def test_sigterm_shuts_down_cleanly_and_keeps_cursor(tmp_path: Path) -> None:
    nsqd = nsqd_process(tmp_path / "data").start()
    c = WireClient(nsqd.tcp_port)
    c.send(b"  V2")
    for i in range(10):
        c.send(pub_body("t", str(i).encode()))
        assert c.read_frame() == (0, b"OK")
    assert consume_all(nsqd.tcp_port, "t", "c", 4)[:4] == [b"0", b"1", b"2", b"3"]
    # the 4 FINs are applied before the consumer's connection is gone
    wait_for(lambda: json.loads(http_get(f"{nsqd.http}/stats?format=json")[1])["topics"][0]["channels"][0]["depth"] <= 6)
    assert nsqd.stop() == 0
    with nsqd_process(tmp_path / "data") as again:
        stats = json.loads(http_get(f"{again.http}/stats?format=json")[1])
        (topic,) = stats["topics"]
        assert topic["topic_name"] == "t"
        assert [ch["channel_name"] for ch in topic["channels"]] == ["c"]
        got = consume_all(again.tcp_port, "t", "c", 6)
        assert sorted(got) == [b"4", b"5", b"6", b"7", b"8", b"9"]


@pytest.mark.parametrize(
    "args",
    [["--node-id=5000"], ["--msg-timeout=abc"], ["--max-rdy-count=x"], ["--no-such-flag"]],
)
def test_bad_flags_exit_2_without_traceback(args: list[str]) -> None:
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("nsqd")), *args],
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert b"Traceback" not in proc.stderr
    assert proc.stderr.strip()


def test_fuzzed_commands_never_take_the_daemon_down(tmp_path: Path) -> None:
    rng = random.Random(1234)
    verbs = [b"PUB", b"MPUB", b"DPUB", b"SUB", b"RDY", b"FIN", b"REQ", b"TOUCH", b"IDENTIFY",
             b"AUTH", b"CLS", b"NOP", b"\x00\xff", b""]
    with nsqd_process(tmp_path / "data") as nsqd:
        good = WireClient(nsqd.tcp_port)
        good.send(b"  V2")
        good.send(pub_body("safe", b"before"))
        assert good.read_frame() == (0, b"OK")
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", nsqd.tcp_port), timeout=2)
            try:
                payload = b"  V2" if rng.random() < 0.9 else bytes(rng.randrange(256) for _ in range(4))
                for _ in range(rng.randrange(1, 4)):
                    verb = rng.choice(verbs)
                    params = b" ".join(
                        bytes(rng.randrange(33, 127) for _ in range(rng.randrange(0, 20)))
                        for _ in range(rng.randrange(0, 3))
                    )
                    line = verb + (b" " + params if params else b"") + b"\n"
                    body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
                    size = rng.choice([len(body), -1, 0, 2**31 - 1, rng.randrange(100)])
                    payload += line + struct.pack(">i", size) + body
                sock.sendall(payload)
                sock.settimeout(0.05)
                try:
                    sock.recv(65536)
                except (TimeoutError, ConnectionError):
                    pass
            finally:
                sock.close()
        for _ in range(100):
            path = rng.choice(["/pub", "/mpub", "/topic/create", "/channel/empty", "/stats", "/config/x"])
            query = "".join(chr(rng.randrange(33, 127)) for _ in range(rng.randrange(0, 30)))
            status, _, _ = http_request(
                rng.choice(["GET", "POST", "PUT"]),
                f"{nsqd.http}{path}?{query.replace(' ', '')}",
                bytes(rng.randrange(256) for _ in range(rng.randrange(0, 50))),
            )
            assert status < 500 or status == 503
        assert http_get(f"{nsqd.http}/ping")[:2] == (200, b"OK")
        good.send(pub_body("safe", b"after"))
        assert good.read_frame() == (0, b"OK")
        assert sorted(consume_all(nsqd.tcp_port, "safe", "c", 2)) == [b"after", b"before"]
