"""pynsq (tornado): several channels of one topic, several Readers on each, one Writer.

Usage: pynsq_fanout.py TCP_ADDR HTTP_ADDR TOPIC N CHANNELS CONSUMERS
The Readers subscribe first; once nsqd's /stats shows every one of them with RDY > 0, the
Writer publishes N messages with MPUB. Stops when every channel has seen every body.
Prints one JSON line: {"deliveries": {channel: [[reader, body, attempts], ...]},
"pub": [replies], "errors": [error lines pynsq logged]}.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import TYPE_CHECKING

import nsq
import tornado.ioloop

if TYPE_CHECKING:
    from tests.compat.clients.clientkit import Errors, all_ready, publish_and_run, replies_into
else:  # run as a script, with this folder first on sys.path
    from clientkit import Errors, all_ready, publish_and_run, replies_into


def stats(http: str, topic: str) -> dict[str, object]:
    with urllib.request.urlopen(f"http://{http}/stats?format=json&topic={topic}") as resp:
        doc: dict[str, object] = json.load(resp)
        return doc


def main() -> int:
    address, http, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    n, n_channels, n_consumers = map(int, sys.argv[4:7])
    errors = Errors.installed()
    loop = tornado.ioloop.IOLoop.current()
    channels = [f"ch{i}" for i in range(n_channels)]
    bodies = [f"fan-{i}".encode() for i in range(n)]
    deliveries: dict[str, list[list[object]]] = {ch: [] for ch in channels}
    seen: dict[str, set[str]] = {ch: set() for ch in channels}
    replies: list[str] = []

    def handler_for(channel: str, reader: int):
        def handler(message: nsq.Message) -> bool:
            body = message.body.decode()
            deliveries[channel].append([reader, body, message.attempts])
            seen[channel].add(body)
            if all(len(s) == n for s in seen.values()):
                loop.add_callback(loop.stop)
            return True

        return handler

    for channel in channels:
        for i in range(n_consumers):
            nsq.Reader(
                topic=topic,
                channel=channel,
                message_handler=handler_for(channel, i),
                nsqd_tcp_addresses=[address],
                max_in_flight=5,
            )
    writer = nsq.Writer([address])

    published = replies_into(replies)

    def ready() -> bool:
        return bool(writer.conns) and all_ready(stats(http, topic), channels, n_consumers)

    publish_and_run(loop, ready, lambda: writer.mpub(topic, bodies, callback=published), 30)
    print(json.dumps({"deliveries": deliveries, "pub": replies, "errors": errors.lines}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
