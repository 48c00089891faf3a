"""gnsq (gevent): several channels of one topic, several Consumers on each, one Producer.

Usage: gnsq_fanout.py TCP_ADDR HTTP_PORT TOPIC N CHANNELS CONSUMERS
The Consumers subscribe first; once nsqd's /stats shows every one of them with RDY > 0, the
Producer publishes N messages with MPUB. Stops when every channel has seen every body.
Prints one JSON line: {"deliveries": {channel: [[consumer, body, attempts], ...]},
"pub": reply, "errors": [errors the consumers saw]}.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import gevent
import gevent.event
import gnsq

if TYPE_CHECKING:
    from tests.compat.clients.clientkit import all_ready
else:  # run as a script, with this folder first on sys.path
    from clientkit import all_ready


def main() -> int:
    address, http_port, topic = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    n, n_channels, n_consumers = map(int, sys.argv[4:7])
    http = gnsq.NsqdHTTPClient("127.0.0.1", http_port)
    channels = [f"ch{i}" for i in range(n_channels)]
    deliveries: dict[str, list[list[object]]] = {ch: [] for ch in channels}
    seen: dict[str, set[str]] = {ch: set() for ch in channels}
    errors: list[str] = []
    done = gevent.event.Event()
    consumers = []

    def handler_for(channel: str, index: int):
        def handler(consumer: gnsq.Consumer, message: gnsq.Message) -> None:
            body = message.body.decode()
            deliveries[channel].append([index, body, message.attempts])
            seen[channel].add(body)
            if all(len(s) == n for s in seen.values()):
                done.set()

        return handler

    for channel in channels:
        for i in range(n_consumers):
            consumer = gnsq.Consumer(topic, channel, nsqd_tcp_addresses=[address], max_in_flight=5)
            consumer.on_message.connect(handler_for(channel, i), weak=False)
            consumer.on_error.connect(lambda _c, error: errors.append(repr(error)), weak=False)
            consumer.start(block=False)
            consumers.append(consumer)

    with gevent.Timeout(30):
        while not all_ready(http.stats(topic=topic), channels, n_consumers):
            gevent.sleep(0.05)
    producer = gnsq.Producer(nsqd_tcp_addresses=[address])
    producer.start()
    reply = producer.multipublish(topic, [f"fan-{i}".encode() for i in range(n)])
    done.wait(30)
    producer.close()
    for consumer in consumers:
        consumer.close()
    report = {
        "deliveries": deliveries,
        "pub": reply.decode() if isinstance(reply, bytes) else reply,
        "errors": errors,
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
