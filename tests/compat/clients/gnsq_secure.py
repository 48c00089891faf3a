"""gnsq (gevent) with TLS / snappy / deflate / AUTH: publish, consume, and report what nsqd's
/stats says about this client's connections while they are open.

Usage: gnsq_secure.py TCP_ADDR HTTP_PORT TOPIC N OPTIONS_JSON
OPTIONS_JSON holds gnsq connection options (tls_v1, tls_options, snappy, deflate,
deflate_level, auth_secret). Prints one JSON line: {"bodies": [...], "clients": [...]}.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import gevent
import gnsq

if TYPE_CHECKING:
    from tests.compat.clients.clientkit import client_features
else:  # run as a script, with this folder first on sys.path
    from clientkit import client_features


def gnsq_features(http: gnsq.NsqdHTTPClient) -> list[dict[str, object]]:
    return client_features(http.stats(), "gnsq")


def main() -> int:
    address, http_port, topic, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    options = json.loads(sys.argv[5])
    if "auth_secret" in options:
        options["auth_secret"] = options["auth_secret"].encode()  # gnsq wants bytes
    http = gnsq.NsqdHTTPClient("127.0.0.1", http_port)
    http.create_topic(topic)
    http.create_channel(topic, "compat")
    bodies = [f"secure-{i}-".encode() * 40 for i in range(n)]
    # gnsq's Producer cannot negotiate upgrades (its response queue does not exist yet when
    # the upgrade's OK arrives: KeyError, against any nsqd), so publish on gnsq's connection.
    host, port = address.rsplit(":", 1)
    conn = gnsq.NsqdTCPClient(host, int(port), **options)
    conn.connect()
    conn.identify()
    replies = []
    for command in (
        lambda: conn.publish(topic, bodies[0]),
        lambda: conn.multipublish(topic, bodies[1:]),
    ):
        command()
        replies.append(conn.read_response()[1])
    report: dict[str, object] = {
        "pub": [r.decode() if isinstance(r, bytes) else r for r in replies]
    }
    report["producer_clients"] = gnsq_features(http)
    conn.close_stream()

    got: list[bytes] = []
    done = gevent.event.Event()
    consumer = gnsq.Consumer(
        topic, "compat", nsqd_tcp_addresses=[address], max_in_flight=25, **options
    )

    @consumer.on_message.connect
    def handler(consumer: gnsq.Consumer, message: gnsq.Message) -> None:
        got.append(message.body)
        if len(got) == n:
            done.set()

    consumer.start(block=False)
    done.wait(20)
    report["clients"] = gnsq_features(http)
    consumer.close()
    report["bodies"] = sorted(b.decode() for b in got)
    report["expected"] = sorted(b.decode() for b in bodies)
    print(json.dumps(report))
    return 0 if sorted(got) == sorted(bodies) else 1


if __name__ == "__main__":
    sys.exit(main())
