"""Descriptors: thousands of topics under a small open-files limit (issue 16, point 7).

A partition's segment files and delayed store are opened when used and closed when the
storage layer's budget (half the process's open-files limit) needs room, so the number of
topics is not bounded by the descriptor limit; a failure to get a resource at start is one
clear fatal line and an exit code."""

from __future__ import annotations

import http.client
from pathlib import Path

from nsqpy.testing import (
    DaemonProcess,
    StartNsqd,
    WireClient,
    channel_stats,
    nsqd_process,
    nsqd_stats,
    pub,
    wait_for,
)

from .wire import receive, subscribe

LIMIT = 256
TOPICS = 1500


def post_all(nsqd: DaemonProcess, paths: list[str]) -> list[int]:
    conn = http.client.HTTPConnection("127.0.0.1", nsqd.http_port, timeout=10)
    statuses = []
    for path in paths:
        conn.request("POST", path, body=b"m")
        resp = conn.getresponse()
        resp.read()
        statuses.append(resp.status)
    conn.close()
    return statuses


def test_thousands_of_topics_with_channels_and_deferred_messages_under_a_small_limit(
    start_nsqd: StartNsqd, data_path: Path
) -> None:
    nsqd = start_nsqd(nofile=LIMIT)
    statuses = post_all(nsqd, [f"/pub?topic=t{i}" for i in range(TOPICS)])
    assert statuses == [200] * TOPICS
    every_tenth = range(0, TOPICS, 10)
    assert post_all(nsqd, [f"/channel/create?topic=t{i}&channel=c" for i in every_tenth]) == [
        200
    ] * len(every_tenth)
    assert post_all(nsqd, [f"/pub?topic=t{i}&defer=3600000" for i in every_tenth]) == [200] * len(
        every_tenth
    )
    assert nsqd.open_fds() < LIMIT
    nsqd.stop()

    again = start_nsqd(nofile=LIMIT)  # and all of it loads again at start
    assert again.open_fds() < LIMIT
    producer = WireClient(again.tcp_port)
    producer.send(b"  V2" + pub("t990", b"after the restart"))
    assert producer.read_frame() == (0, b"OK")
    consumer = subscribe(again, "t990", "c", 10)
    assert {body for _, body in receive(consumer, 2)} == {b"m", b"after the restart"}
    assert len(nsqd_stats(again.http)["topics"]) == TOPICS
    assert channel_stats(again.http, "t990", "c")["deferred_count"] == 1


def test_a_resource_failure_at_start_is_one_fatal_line_and_an_exit_code(
    data_path: Path,
) -> None:
    proc = nsqd_process(data_path, nofile=12)  # not even enough for the listeners
    try:
        proc.start(timeout=20)
    except RuntimeError:
        pass
    code = proc.wait(timeout=20)
    assert code == 1
    fatal = [line for line in proc.log_lines if "FATAL" in line]
    assert len(fatal) == 1 and "open files limit is 12" in fatal[0], proc.log_lines
    assert len(proc.log_lines) == 1, proc.log_lines  # no traceback, no other noise


def test_running_out_of_descriptors_for_clients_is_logged_and_recovers(
    start_nsqd: StartNsqd,
) -> None:
    nsqd = start_nsqd(nofile=96)
    clients = []
    for _ in range(100):  # the event loop accepts and closes what it has no room for
        client = WireClient(nsqd.tcp_port)
        client.send(b"  V2NOP\n")
        clients.append(client)
    wait_for(lambda: any("descriptors this process may open are in use" in line
                         for line in nsqd.log_lines), 15)  # fmt: skip
    for client in clients:
        client.close()
    wait_for(lambda: any("below 90% of the limit again" in line for line in nsqd.log_lines), 15)
    producer = WireClient(nsqd.tcp_port)
    producer.send(b"  V2" + pub("t", b"x"))
    assert producer.read_frame() == (0, b"OK")
