"""The real ``nsqd`` program shuts down gracefully on SIGINT (Ctrl-C) and on SIGTERM."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from nsqpy.testing import WireClient, http_get, http_request, nsqd_process, pub, wait_for


def channel_stats(http: str) -> tuple[int, int]:
    """(depth, in_flight_count) of channel c of topic sig."""
    doc = json.loads(http_get(f"{http}/stats?format=json&topic=sig&channel=c")[1])
    channel = doc["topics"][0]["channels"][0]
    return int(channel["depth"]), int(channel["in_flight_count"])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_nsqd_cleanly_with_everything_persisted(tmp_path: Path, sig: int) -> None:
    nsqd = nsqd_process(tmp_path / "data").start()
    try:
        producer = WireClient(nsqd.tcp_port)
        producer.send(b"  V2")
        for i in range(10):
            producer.send(pub("sig", b"%d" % i))
            assert producer.read_frame() == (0, b"OK")
        consumer = WireClient(nsqd.tcp_port)
        consumer.send(b"  V2SUB sig c\nRDY 1\n")
        assert consumer.read_frame() == (0, b"OK")
        for i in range(4):
            ftype, data = consumer.read_frame()
            assert (ftype, data[26:]) == (2, b"%d" % i)
            stop = b"RDY 0\n" if i == 3 else b""  # RDY is a window: close it before the last FIN
            consumer.send(stop + b"FIN " + data[10:26] + b"\n")
        wait_for(lambda: channel_stats(nsqd.http)[:2] == (6, 0))
        assert http_request("POST", f"{nsqd.http}/channel/create?topic=sig&channel=held")[0] == 200
        assert http_request("POST", f"{nsqd.http}/channel/pause?topic=sig&channel=held")[0] == 200
        nsqd.signal(sig)
        assert nsqd.wait(15) == 0
        assert not any("Traceback" in line for line in nsqd.log_lines), nsqd.log_lines[-20:]
        assert any("nsqd stopped" in line for line in nsqd.log_lines)
    finally:
        nsqd.kill()
    with nsqd_process(tmp_path / "data") as again:
        doc = json.loads(http_get(f"{again.http}/stats?format=json&topic=sig")[1])
        channels = {c["channel_name"]: c for c in doc["topics"][0]["channels"]}
        assert (channels["c"]["depth"], channels["held"]["paused"]) == (6, True)
        c = WireClient(again.tcp_port)
        c.send(b"  V2SUB sig c\nRDY 10\n")
        assert c.read_frame() == (0, b"OK")
        got = sorted(c.read_frame()[1][26:] for _ in range(6))
        assert got == [b"4", b"5", b"6", b"7", b"8", b"9"]
