"""pynsq (tornado) with a 1 s msg_timeout: TOUCH keeps a message, silence lets it time out.

Usage: pynsq_touch_timeout.py TCP_ADDR TOPIC HOLD_SECONDS
Publishes "held" and "dropped". "held" is handled asynchronously: touched every 0.2 s and
finished after HOLD_SECONDS (longer than the timeout). "dropped" gets no answer the first
time, so nsqd times it out and delivers it again; the second delivery is finished.
Prints one JSON line: {"deliveries": [[body, attempts, seconds since publish], ...],
"pub": [replies], "errors": [warnings pynsq logged]}.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import nsq
import tornado.ioloop

if TYPE_CHECKING:
    from tests.compat.clients.clientkit import Errors, publish_and_run, replies_into
else:  # run as a script, with this folder first on sys.path
    from clientkit import Errors, publish_and_run, replies_into


def main() -> int:
    address, topic, hold = sys.argv[1], sys.argv[2], float(sys.argv[3])
    errors = Errors.installed()
    loop = tornado.ioloop.IOLoop.current()
    deliveries: list[list[object]] = []
    replies: list[str] = []
    started = [0.0]
    finished: set[str] = set()

    def done(body: str) -> None:
        finished.add(body)
        if finished == {"held", "dropped"}:
            loop.add_callback(loop.stop)

    def hold_and_touch(message: nsq.Message) -> None:
        until = time.monotonic() + hold

        def tick() -> None:
            if time.monotonic() >= until:
                message.finish()
                done("held")
                return
            message.touch()
            loop.call_later(0.2, tick)

        tick()

    def handler(message: nsq.Message) -> bool | None:
        body = message.body.decode()
        deliveries.append([body, message.attempts, time.monotonic() - started[0]])
        if body == "held":
            message.enable_async()
            hold_and_touch(message)
            return None
        if body == "dropped" and message.attempts == 1:
            message.enable_async()  # and never answer: nsqd must time it out
            return None
        done(body)
        return True

    reader = nsq.Reader(
        topic=topic,
        channel="compat",
        message_handler=handler,
        nsqd_tcp_addresses=[address],
        max_in_flight=5,
        msg_timeout=1,
    )
    writer = nsq.Writer([address])

    published = replies_into(replies)

    def publish() -> None:
        started[0] = time.monotonic()
        writer.mpub(topic, [b"held", b"dropped"], callback=published)

    def ready() -> bool:  # (the reader's RDY sent: nsqd delivers at the publish)
        return bool(writer.conns) and any(c.rdy > 0 for c in reader.conns.values())

    publish_and_run(loop, ready, publish, 30)
    print(json.dumps({"deliveries": deliveries, "pub": replies, "errors": errors.lines}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
