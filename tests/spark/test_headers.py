"""Message extensions end to end: headers and trace ids published to a partitioned topic
(youzan's PUB_EXT and /pub_ext, PUB_TRACE) reach the Spark source's ``headers`` and
``trace_id`` columns, from every partition.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from nsqpy.protocol.extend import encode_pub_ext, encode_pub_trace
from nsqpy.testing import DaemonProcess, WireClient, http_request


def test_published_headers_reach_the_headers_column(spark: Any, nsqd: DaemonProcess) -> None:
    status, _, _ = http_request("POST", f"{nsqd.http}/topic/create?topic=hdr&partition_num=2")
    assert status == 200
    wire = WireClient(nsqd.tcp_port)
    wire.send(b"  V2")
    wire.send(encode_pub_ext("hdr", {"app": "shop", "region": "eu"}, b"first", partition=0))
    wire.send(encode_pub_trace("hdr", 0xABC, b"traced", partition=1))
    assert wire.read_frame() == (0, b"OK")
    assert wire.read_frame()[0] == 0
    ext = quote(json.dumps({"n": "1"}))
    status, body, _ = http_request(
        "POST", f"{nsqd.http}/pub_ext?topic=hdr&partition=1&ext={ext}", b"http"
    )
    assert (status, body) == (200, b"OK")
    df = spark.read.format("nsq").option("nsqd", f"127.0.0.1:{nsqd.http_port}")
    rows = df.option("topic", "hdr").load().collect()
    got = {bytes(r.body): (r.partition, r.trace_id, r.headers) for r in rows}
    assert got == {
        b"first": (0, None, {"app": "shop", "region": "eu"}),
        b"traced": (1, f"{0xABC:016x}", None),
        b"http": (1, None, {"n": "1"}),
    }
