"""pynsq's Reader discovering nsqd through nsqlookupd: consume N messages, print their bodies.

Usage: pynsq_lookupd_reader.py LOOKUPD_HTTP[,LOOKUPD_HTTP...] TOPIC CHANNEL N
Prints one JSON line: {"bodies": [...], "nsqd": [addresses it connected to]}.
"""

from __future__ import annotations

import json
import sys

import nsq
import tornado.ioloop


def main() -> int:
    lookupds, topic, channel, n = sys.argv[1].split(","), sys.argv[2], sys.argv[3], int(sys.argv[4])
    loop = tornado.ioloop.IOLoop.current()
    got: set[str] = set()

    def handler(message: nsq.Message) -> bool:
        got.add(message.body.decode())
        if len(got) >= n:
            loop.add_callback(loop.stop)
        return True

    reader = nsq.Reader(
        topic=topic,
        channel=channel,
        message_handler=handler,
        lookupd_http_addresses=[f"http://{a}" for a in lookupds],
        lookupd_poll_interval=1,
        max_in_flight=50,
    )
    loop.call_later(30, loop.stop)
    loop.start()
    print(json.dumps({"bodies": sorted(got), "nsqd": sorted(reader.conns)}))
    return 0 if len(got) >= n else 1


if __name__ == "__main__":
    sys.exit(main())
