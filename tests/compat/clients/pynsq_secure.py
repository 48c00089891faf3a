"""pynsq (tornado) with TLS / snappy / deflate / AUTH: publish, consume, and report what nsqd's
/stats says about this client's connections while they are open.

Usage: pynsq_secure.py TCP_ADDR HTTP_PORT TOPIC N OPTIONS_JSON
OPTIONS_JSON holds pynsq connection options (tls_v1, tls_options, snappy, deflate,
deflate_level, auth_secret). Prints one JSON line: {"bodies": [...], "clients": [...]}.
"""

from __future__ import annotations

import json
import sys
import urllib.request

import nsq
import tornado.ioloop


def client_features(http_port: int) -> list[dict[str, object]]:
    url = f"http://127.0.0.1:{http_port}/stats?format=json"
    with urllib.request.urlopen(url, timeout=5) as resp:
        doc = json.load(resp)
    seen = list(doc.get("producers") or [])
    for topic in doc["topics"]:
        for channel in topic["channels"]:
            seen.extend(channel["clients"] or [])
    keys = ("tls", "tls_version", "snappy", "deflate", "authed", "auth_identity", "user_agent")
    return [{k: c.get(k) for k in keys} for c in seen if c["user_agent"].startswith("pynsq")]


def main() -> int:
    address, http_port, topic, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    options = json.loads(sys.argv[5])
    loop = tornado.ioloop.IOLoop.current()
    bodies = [f"secure-{i}-" * 40 for i in range(n)]
    got: list[str] = []
    report: dict[str, object] = {"pub": []}
    writer = nsq.Writer([address], **options)

    def published(conn: object, data: object) -> None:
        report["pub"].append(data.decode() if isinstance(data, bytes) else repr(data))  # type: ignore[attr-defined]

    def publish() -> None:
        if not writer.conns:
            loop.call_later(0.05, publish)
            return
        writer.pub(topic, bodies[0].encode(), callback=published)
        writer.mpub(topic, [b.encode() for b in bodies[1:]], callback=published)

    def handler(message: nsq.Message) -> bool:
        got.append(message.body.decode())
        if len(got) == n:
            report["clients"] = client_features(http_port)
            loop.add_callback(loop.stop)
        return True

    nsq.Reader(
        topic=topic,
        channel="compat",
        message_handler=handler,
        nsqd_tcp_addresses=[address],
        max_in_flight=20,
        **options,
    )
    loop.add_callback(publish)
    loop.call_later(20, loop.stop)
    loop.start()
    report["bodies"] = sorted(got)
    report["expected"] = sorted(bodies)
    print(json.dumps(report))
    return 0 if sorted(got) == sorted(bodies) else 1


if __name__ == "__main__":
    sys.exit(main())
