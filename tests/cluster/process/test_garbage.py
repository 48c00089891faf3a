"""Bad input to the cluster's HTTP routes of a real cluster: every new nsqlookupd route
(``/topic/create``, ``/topic/delete``, ``/topic/meta/update``, ``/lookup`` with
``partition``/``access``/``metainfo``, ``/listlookup``, ``/cluster/stats``) and nsqd's
``/pub`` in a cluster, with missing arguments, garbage values, bad topic names, huge numbers,
unicode and raw bytes, sent to the coordinator and to the lookupd that forwards. Never a
500: each answer is one of Youzan's or NSQ's codes (or, for a request line the HTTP parser
cannot read, its plain 400, as Go's net/http answers such lines), the daemons keep running,
and their logs gain at most one line per bad request."""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import quote

from nsqpy.testing import http_request
from nsqpy.testing.cluster import LocalCluster

from .conftest import create

NODE_COUNT_ERROR = "ErrType:9 ErrCode:1 : No node is available for topic"
CODES = {
    "MISSING_ARG_TOPIC", "INVALID_ARG_TOPIC", "MISSING_ARG_TOPIC_PARTITION_NUM",
    "INVALID_ARG_TOPIC_PARTITION_NUM", "MISSING_ARG_TOPIC_REPLICATOR",
    "INVALID_ARG_TOPIC_REPLICATOR", "INVALID_ARG_TOPIC_SYNC_DISK", "INVALID_ARG_TOPIC_RETENTION",
    "INVALID_REQUEST", "INVALID_ACCESS_MODE", "TOPIC_NOT_FOUND", "Key not found",
    "REMOVE_SINGLE_PARTITION_NOT_ALLOWED", "E_NOT_SUPPORTED", "TOPIC_ALREADY_EXIST",
    "METHOD_NOT_ALLOWED", "NOT_FOUND", NODE_COUNT_ERROR,
    # nsqd
    "INVALID_TOPIC", "INVALID_ARG_PARTITION", "PARTITION_NOT_FOUND",
    "E_FAILED_ON_NOT_LEADER", "E_TOPIC_NOT_EXIST",
}  # fmt: skip

HUGE = "9" * 400
WEIRD_TOPICS = ["", "bad!name", "a" * 65, "\u4f60\u597d", "caf\u00e9", "x y", "a/b", "..",
                "%ff", "\x00", "t#ephemeral#x", "-", HUGE]  # fmt: skip
WEIRD_NUMBERS = ["", "x", "-1", "0", "1.5", "1e3", "0x10", " 1", "1 ", "+", "1_0", "\uff11",
                 "\u0661", HUGE, "-" + HUGE, "256", "NaN", "true"]  # fmt: skip


def q(**args: str) -> str:
    """A query string with every value percent-encoded (spaces, unicode and all)."""
    return "&".join(f"{k}={quote(v, safe='')}" for k, v in args.items())


def bad_lookupd_requests(existing: str) -> list[tuple[str, str]]:
    reqs: list[tuple[str, str]] = [
        ("POST", "/topic/create"),
        ("POST", "/topic/delete"),
        ("POST", "/topic/meta/update"),
        ("GET", "/lookup"),
        ("GET", "/lookup?topic"),
        ("GET", "/lookup?=x"),
        ("GET", "/lookup?topic=a;b"),
        ("GET", "/lookup?topic=%zz"),
        ("GET", "/listlookup?topic=%zz"),
        ("GET", "/cluster/stats?topn=" + HUGE),
        ("GET", "/cluster/stats?topn=%zz"),
        ("GET", "/topic/create?" + q(topic="g", partition_num="1", replicator="1")),
        ("DELETE", "/lookup?topic=" + existing),
        ("PUT", "/topic/delete?topic=" + existing),
    ]
    for topic in WEIRD_TOPICS:
        reqs += [
            ("POST", "/topic/create?" + q(topic=topic, partition_num="1", replicator="1")),
            ("POST", "/topic/delete?" + q(topic=topic, partition="**")),
            ("POST", "/topic/meta/update?" + q(topic=topic, syncdisk="1")),
            ("GET", "/lookup?" + q(topic=topic, metainfo="true", access="w")),
            ("GET", "/lookup?" + q(topic=topic, partition=topic, access=topic)),
        ]
    for n in WEIRD_NUMBERS:
        reqs += [
            ("POST", "/topic/create?" + q(topic="gn", partition_num=n, replicator="1")),
            ("POST", "/topic/create?" + q(topic="gn", partition_num="1", replicator=n)),
            (
                "POST",
                "/topic/create?"
                + q(topic="gn", partition_num="1", replicator="1", syncdisk=n, retention="1"),
            ),
            (
                "POST",
                "/topic/create?" + q(topic="gn", partition_num="1", replicator="1", retention=n),
            ),
            ("POST", "/topic/meta/update?" + q(topic=existing, syncdisk=n)),
            ("POST", "/topic/meta/update?" + q(topic=existing, retention=n)),
            ("POST", "/topic/meta/update?" + q(topic=existing, replicator=n)),
            ("POST", "/topic/delete?" + q(topic=existing, partition=n)),
            ("GET", "/lookup?" + q(topic=existing, partition=n, metainfo=n)),
        ]
    return reqs


def raw_request(port: int, line: bytes, body: bytes = b"") -> tuple[int, bytes, bytes]:
    """One request sent as bytes (so that raw non-ASCII reaches the server): (status,
    content type, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(line + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = dict(h.lower().split(b": ", 1) for h in lines[1:] if b": " in h)
    return int(lines[0].split()[1]), headers.get(b"content-type", b""), payload


def check_answer(what: str, status: int, body: Any) -> None:
    assert status in (200, 400, 404, 405), (what, status, body)
    if status != 200:
        assert isinstance(body, dict) and body.get("message") in CODES, (what, status, body)


def log_sizes(cluster: LocalCluster) -> list[int]:
    return [len(p.log_lines) for p in [*cluster.lookupds, *cluster.nodes]]


def test_garbage_to_every_cluster_route_gets_youzans_codes(shared: LocalCluster) -> None:
    existing = "garbage_existing"
    assert create(shared, existing, partition_num=2, replicator=2, multipart="true") == (200, None)
    reqs = bad_lookupd_requests(existing)
    before = log_sizes(shared)
    sent = 0
    for via in (0, 1):  # the coordinator and the one that forwards to it
        address = shared.lookupd_http(via)
        for method, path in reqs:
            status, body = shared.request(method, address, path)
            check_answer(f"{method} {path} on lookupd {via}", status, body)
            sent += 1
    for i in range(3):
        for topic in WEIRD_TOPICS:
            url = f"http://{shared.nsqd_http(i)}/pub?{q(topic=topic)}"
            status, raw, _ = http_request("POST", url, b"x", timeout=15)
            if status == 200:  # a name that is valid after all ("-"): created, published
                assert raw == b"OK"
            else:
                check_answer(f"/pub {topic!r} on nsqd {i}", status, json.loads(raw))
            sent += 1
    assert all(shared.running(p) for p in [*shared.lookupds, *shared.nodes])
    grown = [after - b for after, b in zip(log_sizes(shared), before, strict=True)]
    assert sum(grown) <= sent, grown
    for proc in [*shared.lookupds, *shared.nodes]:
        assert not [line for line in proc.log_lines if "Traceback" in line]
    # the topic garbage was sent about is as it was
    meta = shared.lookupd_json(f"/lookup?topic={existing}&metainfo=true")["meta"]
    assert (meta["partition_num"], meta["replica"]) == (2, 2)


def test_raw_bytes_and_huge_request_lines_leave_the_daemons_running(
    shared: LocalCluster,
) -> None:
    lines = [
        b"GET /lookup?topic=\xff\xfe",
        b"GET /lookup?topic=a&partition=\xe4\xbd\xa0&metainfo=\xff",
        b"POST /topic/create?topic=\xe4\xbd\xa0&partition_num=1&replicator=1",
        b"POST /topic/delete?topic=\xc3&partition=**",
        b"POST /topic/meta/update?topic=a&syncdisk=\x80",
        b"GET /listlookup?\xff",
        b"GET /cluster/stats?\xff",
        b"POST /topic/create?topic=" + b"a" * 20000,
        b"GET /lookup?topic=a%00b",
    ]
    before = log_sizes(shared)
    ports = [p.ports["HTTP"] for p in shared.lookupds]
    for port in ports:
        for line in lines:
            status, content_type, body = raw_request(port, line)
            if content_type.startswith(b"text/plain"):  # the HTTP parser refused the line
                assert status == 400, (line[:60], status, body[:200])
            else:
                check_answer(repr(line[:60]), status, json.loads(body) if body else None)
    for node in shared.nodes:
        status, _ct, _body = raw_request(node.ports["HTTP"], b"POST /pub?topic=\xff\xfe", b"x")
        assert status == 400
    assert all(shared.running(p) for p in [*shared.lookupds, *shared.nodes])
    grown = [after - b for after, b in zip(log_sizes(shared), before, strict=True)]
    assert all(g <= len(lines) for g in grown), grown
    for via in (0, 1):  # and they still answer
        assert shared.lookupd_json("/listlookup", via)["lookupdleader"]


def test_create_with_the_most_partitions_youzan_allows(shared: LocalCluster) -> None:
    """Youzan's coordinator takes partition_num up to 254; one txn of 255 puts is more than
    etcd's default ``--max-txn-ops`` (128)."""
    topic = "garbage_widest"
    assert create(shared, topic, partition_num=254, replicator=1, multipart="true") == (200, None)
    placed = sorted(shared.partitions(topic))
    assert shared.post(f"/topic/delete?topic={topic}&partition=**") == (200, None)
    assert placed == list(range(254))


def test_topic_names_nsq_allows_but_etcd_keys_cannot_hold(shared: LocalCluster) -> None:
    """``.`` and ``..`` are NSQ topic names, but no etcd key segment: refused, not crashed."""
    for topic in (".", ".."):
        for via in (0, 1):
            assert create(shared, topic, via, partition_num=1, replicator=1) == (
                400, {"message": "INVALID_ARG_TOPIC"})  # fmt: skip
        status, body, _ = http_request("POST", f"http://{shared.nsqd_http(0)}/pub?topic={topic}",
                                       b"x", timeout=15)  # fmt: skip
        assert (status, json.loads(body)) == (404, {"message": "E_TOPIC_NOT_EXIST"})
