"""The real ``nsqlookupd`` console script: start on port 0, serve, exit 0 on signals; bad flags."""

from __future__ import annotations

import json
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from nsqpy.lookupd.app import NsqLookupdOptions, parse_args
from nsqpy.testing import DaemonProcess, http_get

BIN = str(Path(sys.executable).with_name("nsqlookupd"))
LOOPBACK = [
    "--tcp-address=127.0.0.1:0",
    "--http-address=127.0.0.1:0",
    "--broadcast-address=127.0.0.1",
]


def v1_request(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    return sock.recv(size, socket.MSG_WAITALL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_console_script_serves_and_exits_cleanly(sig: int) -> None:
    with DaemonProcess("nsqlookupd", LOOPBACK) as proc:
        status, body, _ = http_get(f"{proc.http}/ping")
        assert (status, body) == (200, b"OK")
        with socket.create_connection(("127.0.0.1", proc.tcp_port), timeout=5) as sock:
            sock.sendall(b"  V1")
            info = json.dumps(
                {"version": "1.3.0", "tcp_port": 1, "http_port": 2, "broadcast_address": "b"}
            )
            reply = json.loads(
                v1_request(sock, b"IDENTIFY\n" + struct.pack(">i", len(info)) + info.encode())
            )
            assert (reply["tcp_port"], reply["http_port"]) == (proc.tcp_port, proc.http_port)
            assert v1_request(sock, b"REGISTER t\n") == b"OK"
            lookup = json.loads(http_get(f"{proc.http}/lookup?topic=t")[1])
            assert [p["broadcast_address"] for p in lookup["producers"]] == ["b"]
        proc.signal(sig)
        assert proc.wait() == 0
    assert any(line.startswith("[nsqlookupd] ") for line in proc.log_lines)
    assert not any("Traceback" in line for line in proc.log_lines)


@pytest.mark.parametrize(
    ("flag", "needle"),
    [
        ("--inactive-producer-timeout=abc", "inactive-producer-timeout"),
        ("--tcp-address=nope", "tcp-address"),
        ("--log-level=loud", "log-level"),
        ("--no-such-flag", "no-such-flag"),
    ],
)
def test_bad_flags_exit_2_without_traceback(flag: str, needle: str) -> None:
    proc = subprocess.run([BIN, *LOOPBACK, flag], capture_output=True, timeout=30)
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert needle in err and "Traceback" not in err


def test_port_in_use_exits_1_without_traceback() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [BIN, f"--tcp-address=127.0.0.1:{port}", "--http-address=127.0.0.1:0"],
            capture_output=True,
            timeout=30,
        )
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "FATAL" in err and "Traceback" not in err


def test_version_flag() -> None:
    proc = subprocess.run([BIN, "--version"], capture_output=True, timeout=30)
    assert proc.returncode == 0
    assert proc.stdout.decode().startswith("nsqlookupd v1.3.0")


def test_flags_and_config_file_map_onto_options(tmp_path: Path) -> None:
    config = tmp_path / "nsqlookupd.cfg"
    config.write_text(
        'tombstone_lifetime = "10s"\ninactive_producer_timeout = "1m30s"\nlog_level = "debug"\n'
    )
    opts = parse_args(
        [f"--config={config}", "-tcp-address", "127.0.0.1:0", "--tombstone-lifetime=250ms"]
    )
    assert opts.tombstone_lifetime_ms == 250  # the flag wins over the file
    assert opts.inactive_producer_timeout_ms == 90_000
    assert opts.log_level == "debug"
    assert opts.tcp_address == "127.0.0.1:0"
    defaults = NsqLookupdOptions()
    assert (defaults.tcp_address, defaults.http_address) == ("0.0.0.0:4160", "0.0.0.0:4161")
    assert (defaults.inactive_producer_timeout_ms, defaults.tombstone_lifetime_ms) == (
        300_000,
        45_000,
    )
    assert (defaults.log_prefix, defaults.broadcast_address) == (
        "[nsqlookupd] ",
        socket.gethostname(),
    )


@pytest.mark.parametrize(
    "args", [["--http-address=:99999"], ["--broadcast-tcp-port=-1"], ["--tombstone-lifetime=5x"]]
)
def test_parse_args_refuses_bad_values(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(args)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err
