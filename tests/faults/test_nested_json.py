"""JSON nested 100,000 deep is bad input (4xx) on every route that takes JSON, never a 500.

Python's json decoder gives up past its recursion limit with ``RecursionError``, which is not
a ``ValueError``: ``PUT /config/nsqlookupd_tcp_addresses`` answered 500 ``INTERNAL_ERROR``
(NSQ: 400 ``INVALID_VALUE``), and so did nsqadmin's JSON routes, each with a "handler
crashed" log line. The HTTP middleware now also maps it to 400 for any route.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator

import pytest

from nsqpy.testing import DaemonProcess, StartNsqd, WireClient, http_request

DEEP = [b"[" * 100_000, b'{"a":' * 100_000]


@pytest.fixture
def nsqadmin(start_nsqd: StartNsqd) -> Iterator[DaemonProcess]:
    nsqd = start_nsqd()
    admin = DaemonProcess(
        "nsqadmin",
        ["--http-address=127.0.0.1:0", f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}"],
    )
    try:
        yield admin.start(20.0)
    finally:
        admin.kill()


def answer(method: str, url: str, body: bytes) -> tuple[int, object]:
    status, data, _ = http_request(method, url, body)
    return status, json.loads(data)


@pytest.mark.parametrize("body", DEEP)
def test_nsqd_config_put_answers_400_invalid_value(start_nsqd: StartNsqd, body: bytes) -> None:
    nsqd = start_nsqd()
    url = f"{nsqd.http}/config/nsqlookupd_tcp_addresses"
    assert answer("PUT", url, body) == (400, {"message": "INVALID_VALUE"})
    assert answer("PUT", url, b'["127.0.0.1:4160"]') == (200, ["127.0.0.1:4160"])
    assert not any("crashed" in line for line in nsqd.log_lines)


def test_nsqd_identify_answers_bad_body(start_nsqd: StartNsqd) -> None:
    nsqd = start_nsqd()
    client = WireClient(nsqd.tcp_port, timeout=3.0)
    deep = b"[" * 60_000  # (an IDENTIFY body is at most 64 KiB)
    client.send(b"  V2IDENTIFY\n" + struct.pack(">i", len(deep)) + deep)
    assert client.read_frame() == (1, b"E_BAD_BODY IDENTIFY failed to decode JSON body")


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        ("POST", "/api/topics", "INVALID_BODY"),
        ("POST", "/api/topics/t", "INVALID_BODY"),
        ("POST", "/api/topics/t/c", "INVALID_BODY"),
        ("DELETE", "/api/nodes/n", "INVALID_BODY"),
        ("PUT", "/config/nsqlookupd_http_addresses", "INVALID_VALUE"),
    ],
)
def test_nsqadmin_json_routes_answer_400(
    nsqadmin: DaemonProcess, method: str, path: str, code: str
) -> None:
    url = f"http://127.0.0.1:{nsqadmin.http_port}{path}"
    for body in DEEP:
        assert answer(method, url, body) == (400, {"message": code})
    assert not any("crashed" in line for line in nsqadmin.log_lines)
