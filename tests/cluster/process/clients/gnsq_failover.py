"""gnsq (gevent) through a failover: a Producer pinned to one nsqd publishes a message
every 10 ms for SECONDS, and on until it has sent AT_LEAST (a publish waits while the
leader fails over), while a Consumer, which finds the partition leaders through nsqlookupd
(polled every second), consumes them. The test kills the leader meanwhile.

Usage: gnsq_failover.py NSQD_TCP LOOKUPD_HTTP[,LOOKUPD_HTTP...] TOPIC SECONDS AT_LEAST
Prints one JSON line: {"acked": count answered OK, "sent": count published, "errors":
[other answers], "missing": [bodies answered OK never consumed], "consumed": count}.
"""

from __future__ import annotations

import json
import sys
import time

import gevent
import gevent.event
import gnsq


def main() -> int:
    nsqd, lookupds = sys.argv[1], sys.argv[2].split(",")
    topic, seconds, at_least = sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
    got: set[str] = set()
    acked: set[str] = set()
    errors: list[str] = []
    consumer = gnsq.Consumer(
        topic,
        "failover",
        lookupd_http_addresses=[f"http://{a}" for a in lookupds],
        lookupd_poll_interval=1,
        lookupd_poll_jitter=0,
        max_in_flight=100,
    )

    @consumer.on_message.connect
    def handler(_consumer: gnsq.Consumer, message: gnsq.Message) -> None:
        got.add(message.body.decode())

    consumer.start(block=False)
    deadline = time.monotonic() + 20
    while not consumer._connections and time.monotonic() < deadline:  # (no public view)
        gevent.sleep(0.05)
    producer = gnsq.Producer(nsqd_tcp_addresses=[nsqd])
    producer.start()
    sent = 0
    until = time.monotonic() + seconds
    cap = until + 40  # (a publish that never resumes ends it)
    while (time.monotonic() < until or sent < at_least) and time.monotonic() < cap:
        body = f"m{sent:05d}"
        sent += 1
        try:
            reply = producer.publish(topic, body.encode())
        except Exception as exc:  # gnsq raises the nsqd error
            errors.append(repr(exc))
        else:
            if reply == b"OK":
                acked.add(body)
            else:
                errors.append(repr(reply))
        gevent.sleep(0.01)
    producer.close()
    producer.join()
    deadline = time.monotonic() + 40
    while not got >= acked and time.monotonic() < deadline:
        gevent.sleep(0.1)
    consumer.close()
    print(
        json.dumps(
            {
                "acked": len(acked),
                "sent": sent,
                "errors": errors,
                "missing": sorted(acked - got),
                "consumed": len(got),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
