"""Garbage into the partition and extension HTTP handlers (bounded, seeded): every answer
is a V1 success or a ``{"message": CODE}`` error with a known code, never a 500, and a
partitioned topic published before the run still holds exactly what it held.
"""

from __future__ import annotations

import json
import random
from urllib.parse import quote

import aiohttp
from yarl import URL

from nsqpy.nsqd.server import NsqdServer

from .conftest import create_topic, post

CODES = {
    "INVALID_REQUEST", "MISSING_ARG_TOPIC", "INVALID_TOPIC", "INVALID_ARG_TOPIC",
    "MISSING_ARG_CHANNEL", "INVALID_ARG_CHANNEL", "TOPIC_NOT_FOUND", "CHANNEL_NOT_FOUND",
    "MSG_EMPTY", "MSG_TOO_BIG", "BODY_TOO_BIG", "BAD_BODY", "BAD_MESSAGE", "INVALID_DEFER",
    "INVALID_OPTION", "INVALID_ARG_PARTITION", "PARTITION_NOT_FOUND", "E_INVALID_JSON_HEADER",
    "INVALID_TRACE_ID", "INVALID_ARG_TOPIC_PARTITION_NUM", "INVALID_ARG_ORDERED",
    "PARTITION_NUM_MISMATCH",
}  # fmt: skip
PATHS = ["/pub_ext", "/pubtrace", "/channel/setorder", "/topic/create", "/pub", "/mpub"]
KEYS = ["topic", "channel", "partition", "partition_num", "partition_key", "ext", "trace_id",
        "order", "ordered", "orderedmulti", "binary"]  # fmt: skip
VALUES = ["g", "g2", "bad!", "", "0", "1", "3", "-1", "-7", "255", "256", "x", "1e3",
          "18446744073709551615", "18446744073709551616", "true", "maybe", "%zz", "%7B%7D",
          quote('{"a":"b"}'), quote('{"##trace_id":"9"}'), quote('{"##trace_id":9}'),
          quote('{"a":1}'), quote("[1]"), quote('{"##partition_key":"k"}'), "a" * 70]  # fmt: skip


async def test_garbage_into_partition_and_extension_handlers(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "keep", 3)
    for part in range(3):
        assert await post(nsqd, f"/pub?topic=keep&partition={part}", b"kept") == (200, b"OK")
    rng = random.Random(9)
    base = f"http://127.0.0.1:{nsqd.http_port}"
    async with aiohttp.ClientSession() as session:
        for _ in range(250):
            path = rng.choice(PATHS)
            pairs = [f"{rng.choice(KEYS)}={rng.choice(VALUES)}" for _ in range(rng.randrange(5))]
            if rng.random() < 0.7:
                pairs.insert(0, f"topic={rng.choice(['g', 'g2', 'bad!', ''])}")
            body = rng.choice([b"", b"m", rng.randbytes(rng.randrange(64)), b"x" * 2_000_000])
            headers = {"X-Nsqext-" + rng.choice(["a", "B-c", "##trace_id", "_"]): "v"}
            url = URL(f"{base}{path}?{'&'.join(pairs)}", encoded=True)
            async with session.post(url, data=body, headers=headers) as resp:
                data = await resp.read()
                assert resp.status in {200, 400, 404, 413}, (path, pairs, resp.status, data)
                assert resp.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
                if resp.status != 200:
                    assert json.loads(data)["message"] in CODES, (path, pairs, data)
    topic = nsqd.broker.topics["keep"]
    assert topic.partition_count == 3
    for partition in topic.partitions:
        assert [r.body for r in partition.log.read(0, 10)] == [b"kept"]
