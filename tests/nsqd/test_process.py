"""The real ``nsqd`` program: durability across SIGKILL, graceful SIGTERM, bad flags, fuzz."""

from __future__ import annotations

import json
import random
import re
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from nsqpy import errors
from nsqpy.protocol.frames import FrameDecoder
from nsqpy.testing import WireClient, consume, http_get, http_request, nsqd_process, pub, wait_for

ERROR_CODES = {
    cls.code
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, errors.ProtocolError) and cls.code
}
ERROR_FRAME = re.compile(rb"(E_[A-Z_]+)( .*)?", re.DOTALL)


def check_replies(sock: socket.socket, timeout: float = 10.0) -> int:
    """Read what the daemon answers until it closes: ``sock`` is shut for writing first, and
    nsqd answers what it read, then closes (not "until it goes quiet": a busy machine
    answered after the pause and left answers unread and unchecked). Every frame must be a
    well-formed V2 frame and every error frame one of NSQ's E_* codes. Returns how many."""
    decoder = FrameDecoder()
    frames: list[tuple[int, bytes]] = []
    sock.settimeout(timeout)
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # closed by the daemon already
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionError:
            break
        except TimeoutError:
            raise AssertionError(f"nsqd did not close within {timeout}s of our end") from None
        if not data:
            break
        frames += decoder.feed(data)
    for ftype, body in frames:
        assert ftype in (0, 1, 2), (ftype, body)
        if ftype == 1:
            m = ERROR_FRAME.fullmatch(body)
            assert m is not None and m.group(1).decode() in ERROR_CODES, body
            assert m.group(1).decode() in SPEC_CODES | EXTENSION_CODES, body
    return len(frames)


# SPEC 1.7: every code nsqd 1.3.0 sends.
SPEC_CODES = {
    "E_BAD_PROTOCOL", "E_INVALID", "E_BAD_BODY", "E_BAD_TOPIC", "E_BAD_CHANNEL",
    "E_BAD_MESSAGE", "E_PUB_FAILED", "E_MPUB_FAILED", "E_DPUB_FAILED", "E_SUB_FAILED",
    "E_IDENTIFY_FAILED", "E_AUTH_FIRST", "E_AUTH_FAILED", "E_UNAUTHORIZED", "E_AUTH_DISABLED",
    "E_AUTH_ERROR", "E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED",
}  # fmt: skip
# youzan's extensions (docs/partitions.md): "PUB <topic> <partition>" with a partition that
# is not a number, or not one of the topic's, is E_BAD_PARTITION; bad PUB_EXT headers are
# E_INVALID_JSON_HEADER.
EXTENSION_CODES = {"E_BAD_PARTITION", "E_INVALID_JSON_HEADER"}


def test_acknowledged_messages_survive_sigkill(tmp_path: Path) -> None:
    acked: list[bytes] = []
    with nsqd_process(tmp_path / "data") as nsqd:
        c = WireClient(nsqd.tcp_port)
        c.send(b"  V2")
        for i in range(300):
            body = f"msg-{i}".encode()
            c.send(pub("durable", body))
            assert c.read_frame() == (0, b"OK")
            acked.append(body)
        nsqd.signal(signal.SIGKILL)
        nsqd.wait()
    with nsqd_process(tmp_path / "data") as again:
        got = consume(again.tcp_port, "durable", "c", len(acked))
        assert set(got) >= set(acked)


def test_sigterm_shuts_down_cleanly_and_keeps_cursor(tmp_path: Path) -> None:
    nsqd = nsqd_process(tmp_path / "data").start()
    c = WireClient(nsqd.tcp_port)
    c.send(b"  V2")
    for i in range(10):
        c.send(pub("t", str(i).encode()))
        assert c.read_frame() == (0, b"OK")
    assert consume(nsqd.tcp_port, "t", "c", 4)[:4] == [b"0", b"1", b"2", b"3"]
    # the 4 FINs are applied before the consumer's connection is gone
    wait_for(
        lambda: (
            json.loads(http_get(f"{nsqd.http}/stats?format=json")[1])["topics"][0]["channels"][0][
                "depth"
            ]
            <= 6
        )
    )
    assert nsqd.stop() == 0
    with nsqd_process(tmp_path / "data") as again:
        stats = json.loads(http_get(f"{again.http}/stats?format=json")[1])
        (topic,) = stats["topics"]
        assert topic["topic_name"] == "t"
        assert [ch["channel_name"] for ch in topic["channels"]] == ["c"]
        got = consume(again.tcp_port, "t", "c", 6)
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
    verbs = [
        b"PUB",
        b"MPUB",
        b"DPUB",
        b"SUB",
        b"RDY",
        b"FIN",
        b"REQ",
        b"TOUCH",
        b"IDENTIFY",
        b"AUTH",
        b"CLS",
        b"NOP",
        b"\x00\xff",
        b"",
    ]
    replies = 0
    with nsqd_process(tmp_path / "data") as nsqd:
        good = WireClient(nsqd.tcp_port)
        good.send(b"  V2")
        good.send(pub("safe", b"before"))
        assert good.read_frame() == (0, b"OK")
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", nsqd.tcp_port), timeout=2)
            try:
                payload = (
                    b"  V2" if rng.random() < 0.9 else bytes(rng.randrange(256) for _ in range(4))
                )
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
                try:
                    sock.sendall(payload)
                except ConnectionError:
                    pass  # closed on an error before all of it was taken
                replies += check_replies(sock)
            finally:
                sock.close()
        for _ in range(100):
            path = rng.choice(
                ["/pub", "/mpub", "/topic/create", "/channel/empty", "/stats", "/config/x"]
            )
            query = "".join(chr(rng.randrange(33, 127)) for _ in range(rng.randrange(0, 30)))
            status, _, _ = http_request(
                rng.choice(["GET", "POST", "PUT"]),
                f"{nsqd.http}{path}?{query.replace(' ', '')}",
                bytes(rng.randrange(256) for _ in range(rng.randrange(0, 50))),
            )
            assert status < 500 or status == 503
        assert replies > 200  # (most connections were answered, and every answer was checked)
        assert http_get(f"{nsqd.http}/ping")[:2] == (200, b"OK")
        good.send(pub("safe", b"after"))
        assert good.read_frame() == (0, b"OK")
        assert sorted(consume(nsqd.tcp_port, "safe", "c", 2)) == [b"after", b"before"]
