"""nsq_to_http, the real console script: messages from a real nsqd to a test HTTP receiver."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from nsqpy.testing import DaemonProcess, channel_stats, wait_for

from .helpers import (
    Receiver,
    Request,
    Tool,
    assert_clean_error,
    find_channel,
    publish,
    run_tool,
    unique,
)

FAST_RETRY = ["--consumer-opt=default_requeue_delay,0s", "--consumer-opt=backoff_multiplier,10ms"]


def all_fin(nsqd: DaemonProcess, topic: str) -> bool:
    """Every message was handed to nsq_to_http and FIN'd."""
    ch = find_channel(nsqd, topic, "nsq_to_http")
    return ch is not None and ch["depth"] == ch["in_flight_count"] == ch["deferred_count"] == 0


def test_post_with_content_type_and_headers(
    nsqd: DaemonProcess, receiver: Receiver, tmp_path: Path
) -> None:
    topic = unique("http")
    bodies = [f"body {i}".encode() for i in range(50)]
    publish(nsqd, topic, bodies)
    tool = Tool(
        "nsq_to_http",
        [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", f"--post={receiver.url}/in",
         "--content-type=text/plain", "--header=X-Trace: abc", "-n", "4"],
        tmp_path,
    )  # fmt: skip
    wait_for(
        lambda: len(receiver.snapshot()) >= 50 and all_fin(nsqd, topic), what="every message FIN'd"
    )
    assert tool.stop() == 0, tool.stderr
    requests = receiver.snapshot()
    assert sorted(r.body for r in requests) == sorted(bodies)
    assert {
        (r.method, r.path, r.headers["Content-Type"], r.headers["X-Trace"]) for r in requests
    } == {("POST", "/in", "text/plain", "abc")}
    assert requests[0].headers["User-Agent"].startswith("nsq_to_http/1.3.0")


def test_get_escapes_the_body_and_round_robin_uses_every_endpoint(
    nsqd: DaemonProcess, receiver: Receiver, tmp_path: Path
) -> None:
    topic = unique("httpget")
    bodies = [b"a b&c=%d/\xc3\xa9" % i for i in range(20)]
    publish(nsqd, topic, bodies)
    tool = Tool(
        "nsq_to_http",
        [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", "--mode=round-robin",
         f"--get={receiver.url}/one?data=%s", f"--get={receiver.url}/two?data=%s&x=1"],
        tmp_path,
    )  # fmt: skip
    wait_for(
        lambda: len(receiver.snapshot()) >= 20 and all_fin(nsqd, topic), what="every message FIN'd"
    )
    assert tool.stop() == 0, tool.stderr
    requests = receiver.snapshot()
    assert {r.method for r in requests} == {"GET"}
    paths = [urlsplit(r.path) for r in requests]
    assert sorted(p.path for p in paths).count("/one") == 10  # strictly alternating
    decoded = sorted(parse_qs(p.query)["data"][0].encode() for p in paths)
    assert decoded == sorted(bodies)


def test_multicast_sends_every_message_to_every_destination_and_retries_failures(
    nsqd: DaemonProcess, receiver: Receiver, tmp_path: Path
) -> None:
    topic = unique("httpfan")
    bodies = [b"m%d" % i for i in range(10)] + [b"bad"]
    refused: list[str] = []
    lock = threading.Lock()

    def respond(req: Request) -> int:
        with lock:
            if req.body == b"bad" and req.path == "/two" and not refused:
                refused.append(req.path)
                return 503  # the whole message is requeued and sent to both again
        return 200

    receiver.respond = respond
    publish(nsqd, topic, bodies)
    tool = Tool(
        "nsq_to_http",
        [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", "--mode=multicast",
         f"--post={receiver.url}/one", f"--post={receiver.url}/two", *FAST_RETRY],
        tmp_path,
    )  # fmt: skip
    wait_for(
        lambda: len(receiver.snapshot()) >= 2 * len(bodies) + 2 and all_fin(nsqd, topic),
        what="every message at both destinations and FIN'd",
    )
    assert tool.stop() == 0, tool.stderr
    got: dict[str, list[bytes]] = {"/one": [], "/two": []}
    for r in receiver.snapshot():
        got[r.path].append(r.body)
    for path in ("/one", "/two"):
        assert sorted(got[path]) == sorted([*bodies, b"bad"])  # "bad" went out twice
    assert refused == ["/two"]


def test_failures_and_timeouts_are_requeued_until_delivered(
    nsqd: DaemonProcess, receiver: Receiver, tmp_path: Path
) -> None:
    topic = unique("httpfail")
    seen: dict[bytes, int] = {}
    lock = threading.Lock()
    release = threading.Event()

    def respond(req: Request) -> int:
        with lock:
            seen[req.body] = seen.get(req.body, 0) + 1
            attempt = seen[req.body]
        if req.body == b"slow" and attempt == 1:
            release.wait(5)  # longer than the request timeout
        if req.body == b"bad" and attempt <= 2:
            return 503
        return 201

    receiver.respond = respond
    publish(nsqd, topic, [b"bad", b"slow", b"fine"])
    tool = Tool(
        "nsq_to_http",
        [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", f"--post={receiver.url}/",
         "--http-client-request-timeout=300ms", *FAST_RETRY],
        tmp_path,
    )  # fmt: skip
    try:
        wait_for(lambda: seen.get(b"bad") == 3 and all_fin(nsqd, topic), what="every message FIN'd")
    finally:
        release.set()
    assert tool.stop() == 0, tool.stderr
    assert seen[b"bad"] == 3 and seen[b"slow"] >= 2 and seen[b"fine"] == 1
    assert channel_stats(nsqd.http, topic, "nsq_to_http")["requeue_count"] >= 3
    assert "got status code 503" in tool.stderr


def test_sample_zero_sends_nothing_but_finishes_everything(
    nsqd: DaemonProcess, receiver: Receiver, tmp_path: Path
) -> None:
    topic = unique("httpsample")
    publish(nsqd, topic, [b"x"] * 10)
    tool = Tool(
        "nsq_to_http",
        [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", f"--post={receiver.url}/",
         "--sample=0"],
        tmp_path,
    )  # fmt: skip
    wait_for(lambda: all_fin(nsqd, topic), what="every message FIN'd")
    assert tool.stop() == 0, tool.stderr
    assert receiver.snapshot() == []


def test_unreachable_endpoint_and_bad_urls_are_one_clear_error(nsqd: DaemonProcess) -> None:
    base = ["--topic=t", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}"]
    result = run_tool("nsq_to_http", [*base, "--post=http://127.0.0.1:1/x"])
    assert "cannot connect to http://127.0.0.1:1/x" in assert_clean_error(result, 1)
    result = run_tool("nsq_to_http", [*base, "--get=http://127.0.0.1:1/no-placeholder"])
    assert "must be a printf string" in assert_clean_error(result, 1)
    result = run_tool("nsq_to_http", [*base, "--get=http://h/%s", "--post=http://h/"])
    assert "use --get or --post not both" in assert_clean_error(result, 1)
    result = run_tool("nsq_to_http", [*base, "--post=http://h/", "--mode=broadcast"])
    assert (
        "--mode must be one of round-robin, hostpool, epsilon-greedy, multicast, fanout"
        in assert_clean_error(result, 1)
    )


def test_sigterm_mid_stream_loses_nothing(
    nsqd: DaemonProcess, receiver: Receiver, tmp_path: Path
) -> None:
    """SIGTERM while requests are running: the tool exits 0 with nothing left in flight, every
    message not delivered is still in nsqd, and a second run delivers the rest."""
    topic = unique("httpsig")
    bodies = [f"h{i:05d}".encode() for i in range(1200)]
    publish(nsqd, topic, bodies)
    slow = threading.Event()

    def respond(req: Request) -> int:
        slow.wait(0.002)  # a slow endpoint: the signal lands mid-stream
        return 200

    receiver.respond = respond
    args = [f"--topic={topic}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}",
            f"--post={receiver.url}/in", "-n", "20", "--max-in-flight=50"]  # fmt: skip
    first = Tool("nsq_to_http", args, tmp_path)
    wait_for(lambda: len(receiver.snapshot()) >= 200, what="deliveries under way")
    assert first.stop(signal.SIGTERM) == 0, first.stderr
    delivered = {r.body for r in receiver.snapshot()}
    assert 0 < len(delivered) < len(bodies), "SIGTERM did not land mid-stream"
    after_first = channel_stats(nsqd.http, topic, "nsq_to_http")
    assert after_first["in_flight_count"] == 0  # each message FIN'd or REQ'd before the exit
    waiting = after_first["depth"] + after_first["deferred_count"]
    assert waiting >= len(bodies) - len(delivered)  # nothing undelivered was FIN'd
    second = Tool("nsq_to_http", args, tmp_path)
    wait_for(
        lambda: {r.body for r in receiver.snapshot()} == set(bodies) and all_fin(nsqd, topic),
        timeout=60,
        what="every message delivered",
    )
    assert second.stop(signal.SIGINT) == 0, second.stderr
    assert "Traceback" not in first.stderr + second.stderr
