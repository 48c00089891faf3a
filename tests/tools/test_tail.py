"""nsq_tail, the real console script against a real nsqd (and the real nsqlookupd)."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from nsqpy.testing import DaemonProcess, http_request, wait_for

from .conftest import LookupStack
from .helpers import Tool, publish, run_tool, stats, unique


def test_prints_n_messages_then_exits(nsqd: DaemonProcess) -> None:
    topic = unique("tail")
    bodies = [f"line {i}".encode() for i in range(10)]
    publish(nsqd, topic, bodies)
    result = run_tool(
        "nsq_tail", [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", "-n", "4"]
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4
    assert set(lines) <= set(bodies)
    # the default channel is ephemeral ("tail<6 digits>#ephemeral") and goes away with its client
    assert re.search(rb"on channel tail\d{6}#ephemeral", result.stderr), result.stderr
    entry = stats(nsqd, topic)
    assert entry is not None and entry["channels"] == []


def test_print_topic_with_two_topics(nsqd: DaemonProcess) -> None:
    first, second = unique("tailA"), unique("tailB")
    publish(nsqd, first, [b"one", b"two"])
    publish(nsqd, second, [b"three"])
    result = run_tool(
        "nsq_tail",
        ["--topic", first, "--topic", second, "--print-topic", "--channel=c",
         f"-nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", "--n=3"],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == sorted(
        [f"{first} | one".encode(), f"{first} | two".encode(), f"{second} | three".encode()]
    )


def test_runs_until_sigterm_and_exits_cleanly(nsqd: DaemonProcess, tmp_path: Path) -> None:
    topic = unique("tailsig")
    tool = Tool(
        "nsq_tail", [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}"], tmp_path
    )
    wait_for(lambda: b"connected" in tool.stderr.encode(), what="nsq_tail to connect")
    publish(nsqd, topic, [b"live 1", b"live 2"])
    wait_for(lambda: tool.stdout.count(b"\n") == 2, what="two lines")
    assert tool.stop(signal.SIGTERM) == 0, tool.stderr
    assert sorted(tool.stdout.splitlines()) == [b"live 1", b"live 2"]
    assert "Traceback" not in tool.stderr


def test_discovers_nsqd_through_lookupd(lookupd_stack: LookupStack) -> None:
    topic = unique("taillk")
    publish(lookupd_stack.nsqd, topic, [b"found via lookupd"])
    wait_for(
        lambda: (
            http_request("GET", f"http://{lookupd_stack.lookupd_http}/lookup?topic={topic}")[0]
            == 200
        ),
        what="lookupd registration",
    )
    result = run_tool(
        "nsq_tail",
        [f"--topic={topic}", f"--lookupd-http-address={lookupd_stack.lookupd_http}", "-n", "1"],
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"found via lookupd\n"
