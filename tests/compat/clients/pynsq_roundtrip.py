"""pynsq (tornado) against an nsqd: publish with PUB, MPUB and DPUB, consume, requeue once.

Usage: pynsq_roundtrip.py TCP_ADDR TOPIC N [extra IDENTIFY options as JSON]
Prints one JSON line: {"bodies": [...], "attempts": {body: attempts}, "pub": [replies]}.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import nsq
import tornado.ioloop

if TYPE_CHECKING:
    from tests.compat.clients.clientkit import publish_and_run, replies_into
else:  # run as a script, with this folder first on sys.path
    from clientkit import publish_and_run, replies_into


def main() -> int:
    address, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    loop = tornado.ioloop.IOLoop.current()
    replies: list[str] = []
    got: dict[str, int] = {}
    requeued: set[str] = set()
    bodies = [f"pynsq-{i}" for i in range(n)]

    done_publishing = replies_into(replies)
    writer = nsq.Writer([address], **extra)

    def publish() -> None:
        writer.pub(topic, bodies[0].encode(), callback=done_publishing)
        writer.mpub(topic, [b.encode() for b in bodies[1:-1]], callback=done_publishing)
        writer.dpub(topic, 200, bodies[-1].encode(), callback=done_publishing)

    def handler(message: nsq.Message) -> bool | None:
        body = message.body.decode()
        if body == bodies[0] and body not in requeued:
            requeued.add(body)
            message.enable_async()
            message.requeue(backoff=False, delay=0)
            return None
        got[body] = message.attempts
        if len(got) == n:
            loop.add_callback(loop.stop)
        return True

    nsq.Reader(
        topic=topic,
        channel="compat",
        message_handler=handler,
        nsqd_tcp_addresses=[address],
        max_in_flight=20,
        **extra,
    )
    publish_and_run(loop, lambda: bool(writer.conns), publish, 20)
    print(json.dumps({"bodies": sorted(got), "attempts": got, "pub": replies}))
    return 0 if len(got) == n else 1


if __name__ == "__main__":
    sys.exit(main())
