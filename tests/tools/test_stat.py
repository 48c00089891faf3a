"""nsq_stat, the real console script, polling real nsqd (directly and through nsqlookupd)."""

from __future__ import annotations

from nsqpy.testing import DaemonProcess, http_request, wait_for

from .conftest import LookupStack
from .helpers import assert_clean_error, create_channel, publish, run_tool, unique

HEADER_1 = (
    "------rate------+----------------depth----------------+--------------metadata---------------"
)
HEADER_2 = (
    "ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients"
)


def columns(line: str) -> list[int]:
    return [int(x) for x in line.replace("|", " ").split()]


def test_prints_header_then_count_rows(nsqd: DaemonProcess) -> None:
    topic = unique("stat")
    create_channel(nsqd, topic, "ch")
    publish(nsqd, topic, [b"a", b"b", b"c"])
    result = run_tool(
        "nsq_stat",
        [f"--topic={topic}", "--channel=ch", f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}",
         "--interval=50ms", "--count=3"],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines[:2] == [HEADER_1, HEADER_2]
    assert len(lines) == 5
    for row in lines[2:]:
        ingress, egress, total, mem, disk, inflight, deferred, req, timeouts, msgs, clients = (
            columns(row)
        )
        assert (ingress, egress) == (0, 0)
        assert total == 3 and mem + disk == 3
        assert (inflight, deferred, req, timeouts, msgs, clients) == (0, 0, 0, 0, 3, 0)


def test_through_lookupd_and_rates(lookupd_stack: LookupStack) -> None:
    topic = unique("statlk")
    create_channel(lookupd_stack.nsqd, topic, "ch")
    url = f"http://{lookupd_stack.lookupd_http}/lookup?topic={topic}"
    wait_for(lambda: http_request("GET", url)[0] == 200, what="lookupd registration")
    publish(lookupd_stack.nsqd, topic, [b"m"] * 10)
    result = run_tool(
        "nsq_stat",
        [f"--topic={topic}", "--channel=ch", f"--lookupd-http-address={lookupd_stack.lookupd_http}",
         "--interval=100ms", "--count=1"],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines[:2] == [HEADER_1, HEADER_2] and len(lines) == 3
    assert columns(lines[2])[2] == 10 and columns(lines[2])[9] == 10


def test_missing_channel_and_unreachable_nsqd_are_fatal(nsqd: DaemonProcess) -> None:
    topic = unique("statmiss")
    publish(nsqd, topic, [b"a"])
    result = run_tool(
        "nsq_stat",
        [f"--topic={topic}", "--channel=nope", f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}"],
    )
    line = assert_clean_error(result, 1)
    assert f"failed to find channel(nope) in stats metadata for topic({topic})" in line
    result = run_tool("nsq_stat", ["--topic=t", "--channel=c", "--nsqd-http-address=127.0.0.1:1"])
    assert "failed to get nsqd stats" in assert_clean_error(result, 1)
