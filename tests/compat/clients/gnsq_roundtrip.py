"""gnsq (gevent) against an nsqd: TCP and HTTP publishing, a consumer, the HTTP admin calls.

Usage: gnsq_roundtrip.py TCP_ADDR HTTP_PORT TOPIC N
Prints one JSON line with what was received and what the HTTP client saw.
"""

from __future__ import annotations

import json
import sys

import gevent
import gnsq


def main() -> int:
    address, http_port, topic, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    http = gnsq.NsqdHTTPClient("127.0.0.1", http_port)
    report: dict[str, object] = {
        "ping": http.ping().decode() if isinstance(http.ping(), bytes) else http.ping()
    }
    http.create_topic(topic)
    http.create_channel(topic, "compat")
    producer = gnsq.Producer(nsqd_tcp_addresses=[address])
    producer.start()
    bodies = [f"gnsq-{i}".encode() for i in range(n)]
    replies = [producer.publish(topic, bodies[0])]
    replies.append(producer.multipublish(topic, bodies[1 : n // 2]))
    replies.append(producer.publish(topic, bodies[n // 2], defer=100))
    replies.append(http.publish(topic, bodies[n // 2 + 1]))
    replies.append(http.multipublish(topic, bodies[n // 2 + 2 :]))
    producer.close()
    producer.join()
    report["replies"] = [r.decode() if isinstance(r, bytes) else r for r in replies]

    got: dict[str, int] = {}
    done = gevent.event.Event()
    consumer = gnsq.Consumer(topic, "compat", nsqd_tcp_addresses=[address], max_in_flight=25)

    @consumer.on_message.connect
    def handler(consumer: gnsq.Consumer, message: gnsq.Message) -> None:
        got[message.body.decode()] = message.attempts
        if len(got) == n:
            done.set()

    consumer.start(block=False)
    done.wait(20)
    stats = http.stats(topic=topic)
    consumer.close()
    report["bodies"] = sorted(got)
    channel = stats["topics"][0]["channels"][0]
    report["stats"] = {
        "topic": stats["topics"][0]["topic_name"],
        "channel": channel["channel_name"],
        "message_count": channel["message_count"],
        "clients": len(channel["clients"]),
    }
    report["info_version"] = http.info()["version"]
    print(json.dumps(report))
    return 0 if len(got) == n else 1


if __name__ == "__main__":
    sys.exit(main())
