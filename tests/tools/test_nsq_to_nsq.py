"""nsq_to_nsq, the real console script between two real nsqd: forwarding, filters, SIGTERM."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from nsqpy.testing import DaemonProcess, channel_stats, free_ports, nsqd_process, wait_for

from .helpers import (
    Tool,
    assert_clean_error,
    consume_until,
    drained,
    publish,
    run_tool,
    stats,
    unique,
)


def forwarded(daemon: DaemonProcess, topic: str) -> int:
    entry = stats(daemon, topic)
    return 0 if entry is None else int(entry["message_count"])


def test_forwards_with_a_new_topic_name(
    nsqd: DaemonProcess, nsqd2: DaemonProcess, tmp_path: Path
) -> None:
    source, dest = unique("fwd"), unique("fwddest")
    bodies = [f"fwd {i}".encode() for i in range(300)]
    publish(nsqd, source, bodies)
    tool = Tool(
        "nsq_to_nsq",
        [f"--topic={source}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}",
         f"--destination-nsqd-tcp-address=127.0.0.1:{nsqd2.tcp_port}", f"--destination-topic={dest}",
         "--status-every=100"],
        tmp_path,
    )  # fmt: skip
    wait_for(lambda: forwarded(nsqd2, dest) == 300, what="300 forwarded")
    wait_for(lambda: drained(nsqd, source, "nsq_to_nsq"), what="FINs")
    assert tool.stop() == 0, tool.stderr
    assert sorted(consume_until(nsqd2.tcp_port, dest, "check", lambda b: len(b) == 300)) == sorted(
        bodies
    )
    assert "[aggregate]: finished 100" in tool.stderr


def test_sigterm_mid_stream_loses_nothing(
    nsqd: DaemonProcess, nsqd2: DaemonProcess, tmp_path: Path
) -> None:
    source = unique("fwdsig")
    bodies = [f"s{i:06d}".encode() for i in range(8000)]
    publish(nsqd, source, bodies)
    args = [f"--topic={source}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}",
            f"--destination-nsqd-tcp-address=127.0.0.1:{nsqd2.tcp_port}", "--max-in-flight=20"]  # fmt: skip
    first = Tool("nsq_to_nsq", args, tmp_path)
    wait_for(lambda: forwarded(nsqd2, source) >= 200, what="forwarding to start")
    assert first.stop(signal.SIGTERM) == 0, first.stderr
    after_first = channel_stats(nsqd.http, source, "nsq_to_nsq")
    sent = forwarded(nsqd2, source)
    assert 0 < sent < len(bodies), "SIGTERM did not land mid-stream"
    assert after_first["in_flight_count"] == 0
    # nothing FIN'd without having been acknowledged by the destination
    assert after_first["depth"] + after_first["deferred_count"] >= len(bodies) - sent

    second = Tool("nsq_to_nsq", args, tmp_path)
    wait_for(
        lambda: drained(nsqd, source, "nsq_to_nsq"), timeout=30, what="the source channel drained"
    )
    assert second.stop(signal.SIGINT) == 0, second.stderr
    total = forwarded(nsqd2, source)
    got = consume_until(nsqd2.tcp_port, source, "check", lambda b: len(b) == total, timeout=30)
    assert set(got) == set(bodies)  # duplicates allowed, losses not


def test_json_filters(nsqd: DaemonProcess, nsqd2: DaemonProcess, tmp_path: Path) -> None:
    source, dest = unique("fwdjson"), unique("fwdjsondest")
    docs = [
        {"kind": "click", "id": 1, "secret": "x"},
        {"kind": "view", "id": 2},
        {"kind": "click", "id": 3.0, "extra": [1]},
    ]
    publish(nsqd, source, [json.dumps(d).encode() for d in docs] + [b"not json"])
    tool = Tool(
        "nsq_to_nsq",
        [f"--topic={source}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}",
         f"--destination-nsqd-tcp-address=127.0.0.1:{nsqd2.tcp_port}", f"--destination-topic={dest}",
         "--require-json-field=kind", "--require-json-value=click",
         "--whitelist-json-field=id", "--whitelist-json-field=kind"],
        tmp_path,
    )  # fmt: skip
    wait_for(
        lambda: forwarded(nsqd2, dest) == 2 and drained(nsqd, source, "nsq_to_nsq"),
        what="all handled",
    )
    assert tool.stop() == 0, tool.stderr
    got = consume_until(nsqd2.tcp_port, dest, "check", lambda b: len(b) == 2)
    assert sorted(got) == [b'{"id":1,"kind":"click"}', b'{"id":3,"kind":"click"}']
    assert forwarded(nsqd2, dest) == 2


def test_round_robin_over_two_destinations(
    nsqd: DaemonProcess, nsqd2: DaemonProcess, tmp_path: Path
) -> None:
    source, dest = unique("fwdrr"), unique("fwdrrdest")
    publish(nsqd, source, [b"%d" % i for i in range(40)])
    tool = Tool(
        "nsq_to_nsq",
        [f"--topic={source}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", "--mode=round-robin",
         f"--destination-nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}",
         f"--destination-nsqd-tcp-address=127.0.0.1:{nsqd2.tcp_port}", f"--destination-topic={dest}"],
        tmp_path,
    )  # fmt: skip
    wait_for(lambda: forwarded(nsqd, dest) + forwarded(nsqd2, dest) == 40, what="40 forwarded")
    assert tool.stop() == 0, tool.stderr
    assert forwarded(nsqd, dest) == 20 and forwarded(nsqd2, dest) == 20


def test_unreachable_destination_is_one_clear_error(nsqd: DaemonProcess) -> None:
    result = run_tool(
        "nsq_to_nsq",
        [
            "--topic=t",
            f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}",
            "--destination-nsqd-tcp-address=127.0.0.1:1",
        ],
    )
    assert "cannot connect to --destination-nsqd-tcp-address 127.0.0.1:1" in assert_clean_error(
        result, 1
    )


def test_destination_dying_mid_stream_requeues_and_loses_nothing(
    nsqd: DaemonProcess, tmp_path: Path
) -> None:
    """The destination nsqd is SIGKILLed mid-stream: failed PUBs are REQ'd at the source,
    and once it is back on the same address every message arrives."""
    source = unique("fwddie")
    bodies = [f"d{i:05d}".encode() for i in range(3000)]
    publish(nsqd, source, bodies)
    ports = tuple(free_ports(2))
    dest_flags = [f"--tcp-address=127.0.0.1:{ports[0]}", f"--http-address=127.0.0.1:{ports[1]}"]
    data = tmp_path / "dest"
    dest = nsqd_process(data, *dest_flags).start()
    tool = Tool(
        "nsq_to_nsq",
        [f"--topic={source}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}",
         f"--destination-nsqd-tcp-address=127.0.0.1:{ports[0]}", "--max-in-flight=20",
         "--consumer-opt=default_requeue_delay,50ms", "--consumer-opt=backoff_multiplier,10ms",
         "--consumer-opt=max_attempts,0"],
        tmp_path,
    )  # fmt: skip
    try:
        wait_for(lambda: forwarded(dest, source) >= 300, what="forwarding under way")
        dest.kill()  # SIGKILL: PUBs in flight fail, nothing acknowledged is lost
        wait_for(
            lambda: channel_stats(nsqd.http, source, "nsq_to_nsq")["requeue_count"] > 0,
            what="failed forwards requeued at the source",
        )
        assert tool.running()
        dest = nsqd_process(data, *dest_flags).start()
        wait_for(lambda: drained(nsqd, source, "nsq_to_nsq"), timeout=60, what="every FIN")
        assert tool.stop() == 0, tool.stderr
        got = consume_until(
            dest.tcp_port, source, "check", lambda b: set(b) == set(bodies), timeout=30
        )
        assert set(got) == set(bodies)  # duplicates are allowed (at least once), loss is not
        assert "Traceback" not in tool.stderr
    finally:
        dest.kill()
