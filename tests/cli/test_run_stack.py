"""``nsqpy run`` (``make run``) as a real subprocess, and the daemons' logs under garbage HTTP.

The stack runs with every port overridden (0: the daemons pick free ones; never the fixed
4150/4151/4160/4161/4171), publishes through its nsqd, finds the topic through its
nsqlookupd and its nsqadmin, then stops on SIGINT with status 0.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from nsqpy.testing import DaemonProcess, http_get, http_request, nsqd_process, wait_for

BIN = Path(sys.executable).parent
FREE_PORTS = [
    "--nsqd-tcp-port=0",
    "--nsqd-http-port=0",
    "--lookupd-tcp-port=0",
    "--lookupd-http-port=0",
    "--nsqadmin-http-port=0",
]
ROW = re.compile(r"^(nsqlookupd|nsqd|nsqadmin) +(?:TCP (\S+) +)?HTTP http://(\S+)$", re.M)


def test_run_starts_three_daemons_and_stops_on_sigint(tmp_path: Path) -> None:
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [str(BIN / "nsqpy"), "run", *FREE_PORTS, f"--data-path={tmp_path / 'data'}"],
            stdout=stdout,
            stderr=stderr,
        )
        try:
            wait_for(lambda: "Ctrl-C to stop" in out.read_text(), timeout=30)
            rows = {m[1]: (m[2], m[3]) for m in ROW.finditer(out.read_text())}
            assert set(rows) == {"nsqlookupd", "nsqd", "nsqadmin"}, out.read_text()
            nsqd_http, lookupd_http = rows["nsqd"][1], rows["nsqlookupd"][1]
            admin_http = rows["nsqadmin"][1]
            assert f"Open http://{admin_http}/ for nsqadmin" in out.read_text()
            assert all(not addr.endswith((":4150", ":4151", ":4160", ":4161", ":4171"))
                       for row in rows.values() for addr in row if addr)  # fmt: skip
            status, body, _ = http_request("POST", f"http://{nsqd_http}/pub?topic=hello", b"hi")
            assert (status, body) == (200, b"OK")

            def producers() -> list[object]:
                status, body, _ = http_get(f"http://{lookupd_http}/lookup?topic=hello")
                return json.loads(body)["producers"] if status == 200 else []

            (producer,) = wait_for(producers, timeout=15)
            assert f"127.0.0.1:{producer['tcp_port']}" == rows["nsqd"][0]  # type: ignore[index]

            def admin_topics() -> bool:
                status, body, _ = http_get(f"http://{admin_http}/api/topics")
                return status == 200 and "hello" in json.loads(body)["topics"]

            wait_for(admin_topics, timeout=15)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    log = err.read_text()
    assert "Traceback" not in log, log
    lines = [line for line in log.splitlines() if line.strip()]
    assert lines and all(re.match(r"\[(nsqd|nsqlookupd|nsqadmin|nsqpy)\] ", x) for x in lines), log
    for name in ("nsqd", "nsqlookupd", "nsqadmin"):
        assert f"[{name}] " in log
    assert "stopping" in out.read_text()


def test_run_with_a_port_in_use_is_one_line_and_status_1(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [
                str(BIN / "nsqpy"),
                "run",
                *FREE_PORTS,
                f"--nsqd-http-port={port}",
                f"--data-path={tmp_path}",
            ],
            capture_output=True,
            timeout=30,
        )
    assert result.returncode == 1 and result.stdout == b""
    assert result.stderr.decode() == (
        f"nsqpy run: cannot listen on 127.0.0.1:{port}: address already in use "
        "(choose another port with --nsqd-http-port)\n"
    )


GARBAGE = [
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"GARBAGE \x01\x02 HTTP/9\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(40) + b"\r\n\r\n",
    b"POST /pub?topic=t HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
]


def send_garbage(port: int) -> None:
    for data in GARBAGE:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(data)
            sock.recv(4096)  # the 400 answer (or the close)


def test_garbage_http_costs_one_prefixed_log_line(tmp_path: Path) -> None:
    lookupd = DaemonProcess(
        "nsqlookupd", ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]
    )
    with lookupd, nsqd_process(tmp_path) as nsqd:
        for daemon in (nsqd, lookupd):
            send_garbage(daemon.http_port)
        assert http_get(f"{nsqd.http}/ping")[0] == 200  # still serving
        assert nsqd.stop() == 0 and lookupd.stop() == 0
    for daemon, prefix in ((nsqd, "[nsqd] "), (lookupd, "[nsqlookupd] ")):
        log = "\n".join(daemon.log_lines)
        assert "Traceback" not in log, log
        assert all(line.startswith(prefix) for line in daemon.log_lines if line), log
        assert "BadHttpMessage" in log or "Error handling request" in log, log
