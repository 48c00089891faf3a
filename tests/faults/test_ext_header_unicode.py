"""Extension headers that are not valid Unicode are E_BAD_BODY, never a crashed connection.

A JSON header may spell a lone surrogate (``"\\ud800"``): valid JSON, but no text, and it
could never be written out as UTF-8 again. nsqd raised an uncaught ``UnicodeEncodeError``
for it under ``##partition_key`` (the connection dropped without a frame and a traceback went
to the log) and stored it under any other name. Now PUB_EXT and MPUB_EXT answer the fatal
``E_BAD_BODY`` and store nothing; ``/pub_ext`` answers 400 ``E_BAD_BODY``, also for a
request header whose bytes are not UTF-8.
"""

from __future__ import annotations

import http.client
import json

import pytest

from nsqpy.protocol.extend import encode_mpub_ext, encode_pub_ext
from nsqpy.testing import (
    DaemonProcess,
    StartNsqd,
    WireClient,
    http_get,
    http_request,
    pub,
    wait_for,
)

BAD_HEADERS = [
    rb'{"##partition_key": "\ud800"}',
    rb'{"a": "x\udfffy"}',
    rb'{"ok": "yes", "b": "\udc80"}',
]


def topic_messages(nsqd: DaemonProcess, topic: str) -> int | None:
    """``message_count`` of ``topic`` in /stats (None when there is no such topic)."""
    _, body, _ = http_get(f"{nsqd.http}/stats?format=json&topic={topic}")
    for t in json.loads(body)["topics"]:
        if t["topic_name"] == topic:
            return int(t["message_count"])
    return None


@pytest.mark.parametrize("header", BAD_HEADERS)
def test_pub_ext_with_a_lone_surrogate_is_a_fatal_bad_body(
    start_nsqd: StartNsqd, header: bytes
) -> None:
    nsqd = start_nsqd()
    client = WireClient(nsqd.tcp_port, timeout=3.0)
    client.send(b"  V2" + encode_pub_ext("ext", header, b"body"))
    ftype, data = client.read_frame()
    assert ftype == 1 and data.startswith(b"E_BAD_BODY invalid json header: header "), data
    assert data.endswith(b" is not valid Unicode")
    assert client.closed()

    mpub = WireClient(nsqd.tcp_port, timeout=3.0)  # MPUB_EXT: none of its messages stored
    mpub.send(b"  V2" + encode_mpub_ext("ext", [({"fine": "1"}, b"one"), (header, b"two")]))
    assert mpub.read_frame()[1].startswith(b"E_BAD_BODY")

    other = WireClient(nsqd.tcp_port, timeout=3.0)
    other.send(b"  V2" + pub("ext", b"plain"))
    assert other.read_frame() == (0, b"OK")
    assert topic_messages(nsqd, "ext") == 1
    assert not any("Traceback" in line or "Fatal error" in line for line in nsqd.log_lines)


def test_pub_ext_over_http_answers_400_bad_body(start_nsqd: StartNsqd) -> None:
    nsqd = start_nsqd()
    ext = "%7B%22a%22%3A%22%5Cud800%22%7D"  # {"a":"\ud800"}
    status, body, _ = http_request("POST", f"{nsqd.http}/pub_ext?topic=ext&ext={ext}", b"m")
    assert (status, json.loads(body)) == (400, {"message": "E_BAD_BODY"})

    conn = http.client.HTTPConnection("127.0.0.1", nsqd.http_port, timeout=3.0)
    try:  # a header value whose byte 0xff is not UTF-8
        conn.putrequest("POST", "/pub_ext?topic=ext")
        conn.putheader("X-Nsqext-Name", b"bad\xffvalue")
        conn.putheader("Content-Length", "1")
        conn.endheaders(b"m")
        resp = conn.getresponse()
        assert (resp.status, json.loads(resp.read())) == (400, {"message": "E_BAD_BODY"})
    finally:
        conn.close()
    status, _, _ = http_request(
        "POST", f"{nsqd.http}/pub_ext?topic=ext&ext=%7B%22a%22%3A%22b%22%7D", b"m"
    )
    assert status == 200
    wait_for(lambda: topic_messages(nsqd, "ext") == 1, 5.0)
