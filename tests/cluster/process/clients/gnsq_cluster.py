"""gnsq (gevent) on a cluster topic: a Producer per nsqd publishes there over TCP, then a
Consumer finds the partition leaders through nsqlookupd and consumes everything.

Usage: gnsq_cluster.py NSQD_TCP[,NSQD_TCP...] LOOKUPD_HTTP[,LOOKUPD_HTTP...] TOPIC N
Publishes N messages to each nsqd ("<i>-<j>"), PUB and MPUB. Prints one JSON line:
{"pub": [replies], "bodies": [consumed, sorted], "errors": [what the consumer saw]}.
"""

from __future__ import annotations

import json
import sys

import gevent
import gevent.event
import gnsq


def main() -> int:
    nsqds, lookupds = sys.argv[1].split(","), sys.argv[2].split(",")
    topic, n = sys.argv[3], int(sys.argv[4])
    replies: list[object] = []
    for i, address in enumerate(nsqds):
        producer = gnsq.Producer(nsqd_tcp_addresses=[address])
        producer.start()
        replies.append(producer.publish(topic, f"{i}-0".encode()))
        replies.append(producer.multipublish(topic, [f"{i}-{j}".encode() for j in range(1, n)]))
        producer.close()
        producer.join()

    want = {f"{i}-{j}" for i in range(len(nsqds)) for j in range(n)}
    got: set[str] = set()
    errors: list[str] = []
    done = gevent.event.Event()
    consumer = gnsq.Consumer(
        topic,
        "cluster",
        lookupd_http_addresses=[f"http://{a}" for a in lookupds],
        lookupd_poll_interval=1,
        max_in_flight=50,
    )

    @consumer.on_message.connect
    def handler(_consumer: gnsq.Consumer, message: gnsq.Message) -> None:
        got.add(message.body.decode())
        if got >= want:
            done.set()

    consumer.on_error.connect(lambda _c, error: errors.append(repr(error)), weak=False)
    consumer.start(block=False)
    done.wait(30)
    consumer.close()
    print(
        json.dumps(
            {
                "pub": [r.decode() if isinstance(r, bytes) else r for r in replies],
                "bodies": sorted(got),
                "errors": errors,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
