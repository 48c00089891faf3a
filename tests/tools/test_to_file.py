"""nsq_to_file, the real console script against real daemons: files out, nothing lost on SIGTERM."""

from __future__ import annotations

import gzip
import signal
import socket
from pathlib import Path

from nsqpy.testing import DaemonProcess, channel_stats, wait_for

from .conftest import LookupStack
from .helpers import Tool, assert_clean_error, drained, publish, run_tool, unique

SHORT_HOST = socket.gethostname().split(".")[0]


def lines_in(directory: Path) -> list[bytes]:
    out: list[bytes] = []
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name.endswith(".gz"):
                data = gzip.decompress(data)
            out.extend(data.splitlines())
    return out


def test_archives_a_topic_and_moves_files_on_exit(nsqd: DaemonProcess, tmp_path: Path) -> None:
    topic = unique("tofile")
    bodies = [f"record {i}".encode() for i in range(500)]
    publish(nsqd, topic, bodies)
    out, work = tmp_path / "out", tmp_path / "work"
    tool = Tool(
        "nsq_to_file",
        [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}",
         f"--output-dir={out}", f"--work-dir={work}", "--sync-interval=100ms"],
        tmp_path,
    )  # fmt: skip
    wait_for(lambda: len(lines_in(work)) == 500, what="500 lines in the work dir")
    wait_for(lambda: drained(nsqd, topic, "nsq_to_file"), what="all FIN'd")
    assert tool.stop() == 0, tool.stderr
    assert list(work.iterdir()) == []
    files = list(out.iterdir())
    assert [
        f.name.startswith(f"{topic}.{SHORT_HOST}-000000.") and f.name.endswith(".log")
        for f in files
    ] == [True]
    assert sorted(lines_in(out)) == sorted(bodies)


def test_gzip_and_rotate_size(nsqd: DaemonProcess, tmp_path: Path) -> None:
    topic = unique("tofilegz")
    bodies = [f"{i:04d}".encode() * 10 for i in range(400)]  # 41 bytes a line
    publish(nsqd, topic, bodies)
    out = tmp_path / "out"
    tool = Tool(
        "nsq_to_file",
        [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", f"--output-dir={out}",
         "--gzip", "--gzip-level=1", "--rotate-size=4000", "--sync-interval=100ms",
         "--filename-format=<TOPIC>/<REV>.<PID>.<DATETIME>.log", "--datetime-format=%Y"],
        tmp_path,
    )  # fmt: skip
    wait_for(lambda: drained(nsqd, topic, "nsq_to_file"), what="all FIN'd")
    assert tool.stop() == 0, tool.stderr
    files = sorted((out / topic).iterdir())
    assert len(files) >= 4  # 16 400 bytes in files of ~4 000
    assert files[0].name.startswith("-000000.") and files[1].name.startswith("-000001.")
    assert all(f.name.endswith(".log.gz") and f".{tool.proc.pid}." in f.name for f in files)
    assert sorted(lines_in(out)) == sorted(bodies)


def test_sigterm_mid_stream_loses_nothing(nsqd: DaemonProcess, tmp_path: Path) -> None:
    topic = unique("tofilesig")
    bodies = [f"m{i:06d}".encode() for i in range(8000)]
    publish(nsqd, topic, bodies)
    out, work = tmp_path / "out", tmp_path / "work"
    args = [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", f"--output-dir={out}",
            f"--work-dir={work}", "--max-in-flight=50", "--sync-interval=50ms"]  # fmt: skip
    first = Tool("nsq_to_file", args, tmp_path)
    wait_for(lambda: len(lines_in(work)) >= 200, what="nsq_to_file to start writing")
    assert first.stop(signal.SIGTERM) == 0, first.stderr
    written = lines_in(out)
    assert list(work.iterdir()) == []  # closed and moved
    assert 0 < len(set(written)) < len(bodies), "SIGTERM did not land mid-stream"
    after_first = channel_stats(nsqd.http, topic, "nsq_to_file")
    assert after_first["in_flight_count"] == 0  # FIN'd (written) or REQ'd (not written)
    # each message was either written once and FIN'd, or not written and is still in nsqd
    assert len(written) == len(set(written))
    assert after_first["depth"] + after_first["deferred_count"] == len(bodies) - len(written)

    second = Tool("nsq_to_file", args, tmp_path)
    wait_for(
        lambda: set(lines_in(out) + lines_in(work)) == set(bodies), timeout=30, what="every message"
    )
    assert second.stop(signal.SIGINT) == 0, second.stderr
    assert set(lines_in(out)) == set(bodies)
    assert "Traceback" not in first.stderr + second.stderr


def test_topic_pattern_discovers_topics_from_lookupd(
    lookupd_stack: LookupStack, tmp_path: Path
) -> None:
    prefix = unique("pat")
    wanted, other = f"{prefix}_yes", f"{prefix}_no"
    publish(lookupd_stack.nsqd, wanted, [b"wanted 1", b"wanted 2"])
    publish(lookupd_stack.nsqd, other, [b"other"])
    out = tmp_path / "out"
    tool = Tool(
        "nsq_to_file",
        [f"--lookupd-http-address={lookupd_stack.lookupd_http}", f"--topic-pattern=^{prefix}_y",
         f"--output-dir={out}", "--sync-interval=100ms", "--topic-refresh=200ms",
         "--consumer-opt=lookupd_poll_interval,200ms"],
        tmp_path,
    )  # fmt: skip
    wait_for(
        lambda: sorted(lines_in(out)) == [b"wanted 1", b"wanted 2"],
        what="the matching topic's file",
    )
    late = f"{prefix}_yes_late"
    publish(lookupd_stack.nsqd, late, [b"late"])  # found by the next refresh
    wait_for(lambda: b"late" in lines_in(out), what="the topic created later")
    assert tool.stop() == 0, tool.stderr
    names = {p.name.split(".")[0] for p in out.iterdir()}
    assert names == {wanted, late}


def test_sighup_closes_and_reopens(nsqd: DaemonProcess, tmp_path: Path) -> None:
    topic = unique("tofilehup")
    out, work = tmp_path / "out", tmp_path / "work"
    tool = Tool(
        "nsq_to_file",
        [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", f"--output-dir={out}",
         f"--work-dir={work}", "--sync-interval=50ms", "--skip-empty-files"],
        tmp_path,
    )  # fmt: skip
    wait_for(lambda: "connected" in tool.stderr, what="connect")
    publish(nsqd, topic, [b"before hup"])
    wait_for(lambda: lines_in(work) == [b"before hup"], what="first line")
    tool.send(signal.SIGHUP)
    wait_for(
        lambda: lines_in(out) == [b"before hup"] and not list(work.iterdir()), what="file moved"
    )
    publish(nsqd, topic, [b"after hup"])
    wait_for(lambda: lines_in(work) == [b"after hup"], what="a new file")
    assert tool.stop() == 0, tool.stderr
    assert len(list(out.iterdir())) == 2


def test_bad_setups_are_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cases = [
        (["--topic=t", "--nsqd-tcp-address=127.0.0.1:1", f"--output-dir={tmp_path}"], "cannot connect to nsqd"),
        (["--topic=t", "--nsqd-tcp-address=127.0.0.1:1", f"--output-dir={blocker}/x"], "cannot create --output-dir"),
        (["--topic-pattern=(", "--lookupd-http-address=127.0.0.1:1"], "--topic-pattern is invalid"),
        (["--topic-pattern=x", "--lookupd-http-address=127.0.0.1:1", f"--output-dir={tmp_path}"],
         "could not retrieve topic list"),
        (["--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--gzip", "--filename-format=<TOPIC>.log"],
         "missing <REV>"),
    ]  # fmt: skip
    for args, message in cases:
        assert message in assert_clean_error(run_tool("nsq_to_file", args), 1)
