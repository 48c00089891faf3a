"""pynsq (tornado) through a failover: a Writer pinned to one nsqd publishes a message
every 10 ms for SECONDS, and on until it has sent AT_LEAST, while a Reader, which finds
the partition leaders through nsqlookupd (polled every second), consumes them. The test
kills the leader meanwhile.

Usage: pynsq_failover.py NSQD_TCP LOOKUPD_HTTP[,LOOKUPD_HTTP...] TOPIC SECONDS AT_LEAST
Prints one JSON line: {"acked": count answered OK, "errors": [other answers],
"missing": [bodies answered OK never consumed], "consumed": distinct bodies consumed}.
"""

from __future__ import annotations

import json
import sys
import time

import nsq
import tornado.ioloop


def main() -> int:
    nsqd, lookupds = sys.argv[1], sys.argv[2].split(",")
    topic, seconds, at_least = sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
    loop = tornado.ioloop.IOLoop.current()
    writer = nsq.Writer([nsqd])
    acked: set[str] = set()
    errors: list[str] = []
    got: set[str] = set()
    state = {"sent": 0, "answered": 0, "until": 0.0}

    def handler(message: nsq.Message) -> bool:
        got.add(message.body.decode())
        return True

    reader = nsq.Reader(
        topic=topic,
        channel="failover",
        message_handler=handler,
        lookupd_http_addresses=[f"http://{a}" for a in lookupds],
        lookupd_poll_interval=1,
        lookupd_poll_jitter=0.0,
        max_in_flight=100,
    )

    def answered(body: str) -> object:
        def callback(_conn: object, data: object) -> None:
            state["answered"] += 1
            if data == b"OK":
                acked.add(body)
            else:
                errors.append(repr(data))

        return callback

    def publish() -> None:
        if not state["until"]:  # both connected first; then on through the failover
            if not writer.conns or not reader.conns:
                loop.call_later(0.05, publish)
                return
            state["until"] = time.monotonic() + seconds
        if time.monotonic() < state["until"] or state["sent"] < at_least:
            body = f"m{state['sent']:05d}"
            state["sent"] += 1
            writer.pub(topic, body.encode(), callback=answered(body))
            loop.call_later(0.01, publish)
            return
        check()

    def check() -> None:
        if (state["answered"] == state["sent"] and got >= acked) or time.monotonic() > deadline:
            loop.stop()
        else:
            loop.call_later(0.1, check)

    deadline = time.monotonic() + seconds + 40
    loop.add_callback(publish)
    loop.start()
    print(
        json.dumps(
            {
                "acked": len(acked),
                "errors": errors,
                "missing": sorted(acked - got),
                "consumed": len(got),
                "sent": state["sent"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
