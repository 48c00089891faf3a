"""The real ``nsqadmin`` program (``python -m nsqpy.nsqadmin``, the console script's main):
start-up line, signals, flags, config file, and bad flags that never print a traceback."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nsqpy.nsqadmin.app import main
from nsqpy.testing import http_get

from .helpers import AdminProgram, Stack

PROGRAM = [sys.executable, "-m", "nsqpy.nsqadmin"]


def node_ids(body: bytes) -> list[str]:
    return [f"{n['broadcast_address']}:{n['http_port']}" for n in json.loads(body)["nodes"]]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serves_then_exits_0_on_a_signal(stack: Stack, sig: int) -> None:
    program = AdminProgram(f"--nsqd-http-address={stack.nsqd_http(0)}", "--log-level=debug")
    try:
        assert any("HTTP: listening on 127.0.0.1:" in line for line in program.lines)
        assert http_get(program.url + "/ping")[:2] == (200, b"OK")
        status, body, _ = http_get(program.url + "/api/nodes")
        assert status == 200 and node_ids(body) == [stack.node(0)]
    finally:
        code = program.stop(sig)
    assert code == 0
    assert not any("Traceback" in line for line in program.lines)


def test_config_file_and_version(stack: Stack, tmp_path: Path) -> None:
    config = tmp_path / "nsqadmin.toml"
    config.write_text(f'nsqd_http_addresses = ["{stack.nsqd_http(1)}"]\nbase_path = "/ui"\n')
    program = AdminProgram(f"--config={config}")
    try:
        status, body, _ = http_get(program.url + "/ui/api/nodes")
        assert status == 200 and node_ids(body) == [stack.node(1)]
    finally:
        assert program.stop() == 0
    out = subprocess.run([*PROGRAM, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("nsqadmin v1.3.0")


BAD_FLAGS = [
    ([], "--nsqd-http-address or --lookupd-http-address required"),
    (["--nsqd-http-address=a:1", "--lookupd-http-address=b:2"], "not both"),
    (["--nsqd-http-address=a:1", "--http-address=nope"], "--http-address"),
    (["--nsqd-http-address=a:1", "--stats-history-size=lots"], "--stats-history-size"),
    (["--nsqd-http-address=a:1", "--stats-sample-interval=soon"], "--stats-sample-interval"),
    (["--nsqd-http-address=a:1", "--log-level=loud"], "--log-level"),
    (["--nsqd-http-address=a:1", "--no-such-flag"], "unrecognized arguments"),
    (
        ["--nsqd-http-address=a:1", "--notification-http-endpoint=nope"],
        "--notification-http-endpoint",
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD_FLAGS)
def test_bad_flags_exit_2_with_a_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_program_itself_exits_2_on_bad_flags() -> None:
    out = subprocess.run(
        [*PROGRAM, "--nsqd-http-address=a:1", "--lookupd-http-address=b:2"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "not both" in out.stderr and "Traceback" not in out.stderr


def test_a_busy_port_exits_1_without_a_traceback() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run(
            [*PROGRAM, f"--http-address=127.0.0.1:{port}", "--nsqd-http-address=127.0.0.1:1"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert out.returncode == 1 and "FATAL" in out.stderr and "Traceback" not in out.stderr


def test_make_test_keeps_browser_screenshots_as_artifacts() -> None:
    """``make test`` points the browser tests' screenshots at ./test-artifacts (gitignored)."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        ["make", "--dry-run", "--no-print-directory", "test"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    pytest_lines = [line for line in out.stdout.splitlines() if "-m pytest" in line]
    assert pytest_lines and all(
        line.startswith(f"NSQPY_ARTIFACTS={root}/test-artifacts ") for line in pytest_lines
    ), pytest_lines
    assert "/test-artifacts/" in (root / ".gitignore").read_text().splitlines()


GARBAGE = [
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"GARBAGE \x01\x02 HTTP/9\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(40) + b"\r\n\r\n",  # TLS hello
    b"POST /api/topics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
]


def test_garbage_http_costs_one_log_line_each(stack: Stack) -> None:
    program = AdminProgram(f"--nsqd-http-address={stack.nsqd_http(0)}")
    try:
        started = len(program.lines)
        for data in GARBAGE:
            with socket.create_connection(("127.0.0.1", program.port), timeout=5) as sock:
                sock.sendall(data)
                sock.recv(4096)  # a 400 answer, or the close
        assert http_get(program.url + "/ping")[:2] == (200, b"OK")  # still serving
    finally:
        assert program.stop() == 0
    logged = program.lines[started:]
    text = "\n".join(logged)
    assert "Traceback" not in text and 'File "' not in text, text
    assert all(line.startswith("[nsqadmin] ") for line in logged if line), text
    errors = [line for line in logged if " ERROR: " in line]
    assert 1 <= len(errors) <= len(GARBAGE), text
    assert any("BadHttpMessage" in line or "BadStatusLine" in line for line in errors), text
