"""pynsq (tornado) on a cluster topic: a Writer per nsqd publishes there over TCP, then a
Reader finds the partition leaders through nsqlookupd and consumes everything.

Usage: pynsq_cluster.py NSQD_TCP[,NSQD_TCP...] LOOKUPD_HTTP[,LOOKUPD_HTTP...] TOPIC N
Publishes N messages to each nsqd ("<i>-<j>"), PUB and MPUB. Prints one JSON line:
{"pub": [replies], "bodies": [consumed, sorted], "nsqd": [addresses the Reader used]}.
"""

from __future__ import annotations

import json
import sys

import nsq
import tornado.ioloop


def main() -> int:
    nsqds, lookupds = sys.argv[1].split(","), sys.argv[2].split(",")
    topic, n = sys.argv[3], int(sys.argv[4])
    loop = tornado.ioloop.IOLoop.current()
    writers = [nsq.Writer([address]) for address in nsqds]
    replies: list[str] = []
    got: set[str] = set()
    want = {f"{i}-{j}" for i in range(len(nsqds)) for j in range(n)}
    readers: list[nsq.Reader] = []

    def handler(message: nsq.Message) -> bool:
        got.add(message.body.decode())
        if got >= want:
            loop.add_callback(loop.stop)
        return True

    def published(_conn: object, data: object) -> None:
        replies.append(data.decode() if isinstance(data, bytes) else repr(data))
        if len(replies) == 2 * len(writers):  # every PUB and MPUB answered: now consume
            readers.append(
                nsq.Reader(
                    topic=topic,
                    channel="cluster",
                    message_handler=handler,
                    lookupd_http_addresses=[f"http://{a}" for a in lookupds],
                    lookupd_poll_interval=1,
                    max_in_flight=50,
                )
            )

    def publish() -> None:
        if not all(w.conns for w in writers):
            loop.call_later(0.05, publish)
            return
        for i, writer in enumerate(writers):
            writer.pub(topic, f"{i}-0".encode(), callback=published)
            writer.mpub(topic, [f"{i}-{j}".encode() for j in range(1, n)], callback=published)

    loop.add_callback(publish)
    loop.call_later(30, loop.stop)
    loop.start()
    used = sorted(readers[0].conns) if readers else []
    print(json.dumps({"pub": replies, "bodies": sorted(got), "nsqd": used}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
