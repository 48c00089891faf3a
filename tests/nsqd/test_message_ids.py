"""Message IDs: 16 lowercase hex characters that a message keeps forever (DESIGN, SPEC 1.4).

The ID encodes the partition and the offset in the topic log, so a message has the same
ID on every delivery: after REQ, after an in-flight timeout and after nsqd restarts.
"""

from __future__ import annotations

import re
from pathlib import Path

from nsqpy.nsqd.server import NsqdServer
from nsqpy.protocol.message import decode_message_id
from nsqpy.testing import FakeClock, mpub, nsqd_options, publisher, read_message, subscriber

HEX16 = re.compile(rb"[0-9a-f]{16}")


async def test_ids_are_hex_unique_and_stable_across_req_timeout_and_restart(
    tmp_path: Path, clock: FakeClock
) -> None:
    server = NsqdServer(nsqd_options(tmp_path, msg_timeout_ms=1000), clock=clock)
    await server.start()
    p = await publisher(server.tcp_port)
    await p.send(mpub("ids", [b"a", b"b", b"c"]))
    assert await p.read_frame() == (0, b"OK")
    s = await subscriber(server.tcp_port, "ids", "c", rdy=3)
    first = {
        body: (msg_id, ts) for ts, _, msg_id, body in [await read_message(s) for _ in range(3)]
    }
    ids = [first[b][0] for b in (b"a", b"b", b"c")]
    assert all(HEX16.fullmatch(i) for i in ids) and len(set(ids)) == 3
    assert [decode_message_id(i) for i in ids] == [(0, 0), (0, 1), (0, 2)]  # partition, offset

    await s.send(b"REQ " + first[b"a"][0] + b" 0\n")  # REQ
    ts, attempts, again, body = await read_message(s)
    assert (body, again, attempts, ts) == (b"a", first[b"a"][0], 2, first[b"a"][1])

    await s.send(b"FIN " + again + b"\n")
    clock.advance_ms(1001)  # "b" and "c" time out
    redelivered = {
        body: (msg_id, n) for _, n, msg_id, body in [await read_message(s) for _ in range(2)]
    }
    assert redelivered == {b"b": (first[b"b"][0], 2), b"c": (first[b"c"][0], 2)}
    await server.stop()

    restarted = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await restarted.start()
    try:
        s2 = await subscriber(restarted.tcp_port, "ids", "c", rdy=3)
        after = {
            body: (msg_id, ts) for ts, _, msg_id, body in [await read_message(s2) for _ in range(2)]
        }
        assert after == {b"b": first[b"b"], b"c": first[b"c"]}  # same IDs, same publish times
        p2 = await publisher(restarted.tcp_port)
        await p2.send(mpub("ids", [b"d"]))
        assert await p2.read_frame() == (0, b"OK")
        _, _, new_id, body = await read_message(s2)
        assert body == b"d" and decode_message_id(new_id) == (0, 3)  # never reused
    finally:
        await restarted.stop()
