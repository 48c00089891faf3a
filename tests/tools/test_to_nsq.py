"""to_nsq, the real console script: stdin in, messages out on one or more real nsqd."""

from __future__ import annotations

import signal
import subprocess
import time

from nsqpy.testing import DaemonProcess, wait_for

from .helpers import assert_clean_error, consume_until, run_tool, stats, tool_path, unique


def test_publishes_each_line_and_exits_at_end_of_input(nsqd: DaemonProcess) -> None:
    topic = unique("tonsq")
    lines = [f"message {i}".encode() for i in range(3000)]
    stdin = b"\n".join(lines[:1500]) + b"\n\n\n" + b"\n".join(lines[1500:])  # blank lines skipped
    result = run_tool(
        "to_nsq", [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}"], stdin=stdin
    )
    assert result.returncode == 0, result.stderr
    entry = stats(nsqd, topic)
    assert entry is not None and entry["message_count"] == 3000  # all acknowledged before exit
    got = consume_until(nsqd.tcp_port, topic, "check", lambda b: len(b) == 3000)
    assert got == lines  # one connection, pipelined in order; the last line had no newline


def test_delimiter_and_every_address(nsqd: DaemonProcess, nsqd2: DaemonProcess) -> None:
    topic = unique("tonsqd")
    result = run_tool(
        "to_nsq",
        ["--topic", topic, "--delimiter", ",",
         "--nsqd-tcp-address", f"127.0.0.1:{nsqd.tcp_port}",
         "--nsqd-tcp-address", f"127.0.0.1:{nsqd2.tcp_port}"],
        stdin=b"a,b,,c\nd,",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for daemon in (nsqd, nsqd2):
        got = consume_until(daemon.tcp_port, topic, "check", lambda b: len(b) == 3)
        assert got == [b"a", b"b", b"c\nd"]


def test_rate_limits_publishing(nsqd: DaemonProcess) -> None:
    topic = unique("tonsqrate")
    start = time.monotonic()
    result = run_tool(
        "to_nsq",
        [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", "--rate=20"],
        stdin=b"\n".join(b"x%d" % i for i in range(9)),
    )
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    assert elapsed >= 8 / 20  # first message at once, then one every 50 ms
    entry = stats(nsqd, topic)
    assert entry is not None and entry["message_count"] == 9


def test_unreachable_nsqd_is_one_clear_error() -> None:
    result = run_tool("to_nsq", ["--topic=t", "--nsqd-tcp-address=127.0.0.1:1"], stdin=b"x\n")
    line = assert_clean_error(result, 1)
    assert "cannot connect to --nsqd-tcp-address 127.0.0.1:1" in line


def test_sigterm_publishes_every_line_already_read_then_exits_0(nsqd: DaemonProcess) -> None:
    """Throttled to 10/s with 40 lines waiting: SIGTERM stops reading, the lines already read
    are published (unthrottled), the unterminated tail is dropped, and the exit status is 0."""
    topic = unique("tonsqsig")
    proc = subprocess.Popen(
        [
            tool_path("to_nsq"),
            f"--topic={topic}",
            f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}",
            "--rate=10",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdin is not None
        lines = [f"line {i}".encode() for i in range(40)]
        proc.stdin.write(b"\n".join(lines) + b"\npartial-without-newline")
        proc.stdin.flush()  # stdin stays open: to_nsq is still reading when the signal comes
        wait_for(lambda: (stats(nsqd, topic) or {}).get("message_count", 0) >= 2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert b"Traceback" not in err
    entry = stats(nsqd, topic)
    assert entry is not None and entry["message_count"] == 40  # acknowledged before the exit
    got = consume_until(nsqd.tcp_port, topic, "check", lambda b: len(b) == 40)
    assert got == lines
