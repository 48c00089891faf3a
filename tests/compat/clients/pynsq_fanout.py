"""pynsq (tornado): several channels of one topic, several Readers on each, one Writer.

Usage: pynsq_fanout.py TCP_ADDR HTTP_ADDR TOPIC N CHANNELS CONSUMERS
The Readers subscribe first; once nsqd's /stats shows every one of them with RDY > 0, the
Writer publishes N messages with MPUB. Stops when every channel has seen every body.
Prints one JSON line: {"deliveries": {channel: [[reader, body, attempts], ...]},
"pub": [replies], "errors": [error lines pynsq logged]}.
"""

from __future__ import annotations

import json
import logging
import sys
import urllib.request

import nsq
import tornado.ioloop


class Errors(logging.Handler):
    """Every warning or error pynsq logs (an E_* frame from nsqd shows up here)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def all_ready(http: str, topic: str, channels: list[str], consumers: int) -> bool:
    with urllib.request.urlopen(f"http://{http}/stats?format=json&topic={topic}") as resp:
        stats = json.load(resp)
    ready = {
        c["channel_name"]: sum(1 for cl in c["clients"] if cl["ready_count"] > 0)
        for t in stats["topics"] or []
        for c in t["channels"]
    }
    return all(ready.get(ch, 0) == consumers for ch in channels)


def main() -> int:
    address, http, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    n, n_channels, n_consumers = map(int, sys.argv[4:7])
    errors = Errors()
    logging.getLogger().addHandler(errors)
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

    def published(conn: object, data: object) -> None:
        replies.append(data.decode() if isinstance(data, bytes) else repr(data))

    def publish_when_ready() -> None:
        if not writer.conns or not all_ready(http, topic, channels, n_consumers):
            loop.call_later(0.05, publish_when_ready)
            return
        writer.mpub(topic, bodies, callback=published)

    loop.add_callback(publish_when_ready)
    loop.call_later(30, loop.stop)
    loop.start()
    print(json.dumps({"deliveries": deliveries, "pub": replies, "errors": errors.lines}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
