"""gnsq (gevent) against an nsqd run with --msg-timeout=1s: TOUCH, REQ with a delay, timeout.

Usage: gnsq_touch_req.py TCP_ADDR TOPIC HOLD_SECONDS REQ_MS
Publishes "held", "req" and "dropped". "held" is touched every 0.2 s and finished after
HOLD_SECONDS (longer than the timeout); "req" is requeued with REQ_MS the first time and
finished the second; "dropped" gets no answer the first time (nsqd times it out) and is
finished the second. Prints one JSON line: {"deliveries": [[body, attempts, seconds since
publish], ...], "pub": reply, "errors": [errors the consumer saw]}.
"""

from __future__ import annotations

import json
import sys
import time

import gevent
import gevent.event
import gnsq


def main() -> int:
    address, topic, hold, req_ms = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    deliveries: list[list[object]] = []
    errors: list[str] = []
    finished: set[str] = set()
    all_done = gevent.event.Event()
    started = [0.0]

    def done(body: str) -> None:
        finished.add(body)
        if finished == {"held", "req", "dropped"}:
            all_done.set()

    def hold_and_touch(message: gnsq.Message) -> None:
        until = time.monotonic() + hold
        while time.monotonic() < until:
            message.touch()
            gevent.sleep(0.2)  # the client's own pace of TOUCHes, not a wait for nsqd
        message.finish()
        done("held")

    def handler(consumer: gnsq.Consumer, message: gnsq.Message) -> None:
        body = message.body.decode()
        deliveries.append([body, message.attempts, time.monotonic() - started[0]])
        if body == "held":
            message.enable_async()
            gevent.spawn(hold_and_touch, message)
        elif body == "req" and message.attempts == 1:
            message.requeue(time_ms=req_ms, backoff=False)
        elif body == "dropped" and message.attempts == 1:
            message.enable_async()  # and never answer: nsqd must time it out
        else:
            done(body)  # returning finishes it

    consumer = gnsq.Consumer(topic, "compat", nsqd_tcp_addresses=[address], max_in_flight=5)
    consumer.on_message.connect(handler, weak=False)
    consumer.on_error.connect(lambda _c, error: errors.append(repr(error)), weak=False)
    consumer.start(block=False)
    deadline = time.monotonic() + 30  # (its RDY sent: nsqd delivers at the publish)
    while consumer.total_ready_count == 0 and time.monotonic() < deadline:
        gevent.sleep(0.01)
    producer = gnsq.Producer(nsqd_tcp_addresses=[address])
    producer.start()
    started[0] = time.monotonic()
    reply = producer.multipublish(topic, [b"held", b"req", b"dropped"])
    all_done.wait(30)
    gevent.sleep(0)  # let the last FIN go out before closing
    producer.close()
    consumer.close()
    consumer.join(5)
    report = {
        "deliveries": deliveries,
        "pub": reply.decode() if isinstance(reply, bytes) else reply,
        "errors": errors,
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
