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
from typing import TYPE_CHECKING

import nsq
import tornado.ioloop

if TYPE_CHECKING:
    from tests.compat.clients.clientkit import client_features, publish_and_run, replies_into
else:  # run as a script, with this folder first on sys.path
    from clientkit import client_features, publish_and_run, replies_into


def pynsq_features(http_port: int) -> list[dict[str, object]]:
    url = f"http://127.0.0.1:{http_port}/stats?format=json"
    with urllib.request.urlopen(url, timeout=5) as resp:
        return client_features(json.load(resp), "pynsq")


def main() -> int:
    address, http_port, topic, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    options = json.loads(sys.argv[5])
    loop = tornado.ioloop.IOLoop.current()
    bodies = [f"secure-{i}-" * 40 for i in range(n)]
    got: list[str] = []
    replies: list[str] = []
    report: dict[str, object] = {"pub": replies}
    published = replies_into(replies)
    writer = nsq.Writer([address], **options)

    def publish() -> None:
        writer.pub(topic, bodies[0].encode(), callback=published)
        writer.mpub(topic, [b.encode() for b in bodies[1:]], callback=published)

    def handler(message: nsq.Message) -> bool:
        got.append(message.body.decode())
        if len(got) == n:
            report["clients"] = pynsq_features(http_port)
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
    publish_and_run(loop, lambda: bool(writer.conns), publish, 20)
    report["bodies"] = sorted(got)
    report["expected"] = sorted(bodies)
    print(json.dumps(report))
    return 0 if sorted(got) == sorted(bodies) else 1


if __name__ == "__main__":
    sys.exit(main())
