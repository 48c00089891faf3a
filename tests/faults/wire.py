"""Wire-level helpers the fault tests share: publish, subscribe, receive, consume, stats."""

from __future__ import annotations

import json
import struct

from nsqpy.protocol.message import decode_message
from nsqpy.testing import DaemonProcess, WireClient, http_get, pub_body


def mpub_body(topic: str, bodies: list[bytes]) -> bytes:
    payload = struct.pack(">i", len(bodies)) + b"".join(
        struct.pack(">i", len(b)) + b for b in bodies
    )
    return f"MPUB {topic}\n".encode() + struct.pack(">i", len(payload)) + payload


def dpub_body(topic: str, defer_ms: int, body: bytes) -> bytes:
    return f"DPUB {topic} {defer_ms}\n".encode() + struct.pack(">i", len(body)) + body


def send_all(nsqd: DaemonProcess, *commands: bytes) -> None:
    """Send publishing commands on one connection, each answered OK."""
    producer = WireClient(nsqd.tcp_port)
    producer.send(b"  V2")
    for command in commands:
        producer.send(command)
        assert producer.read_frame() == (0, b"OK")
    producer.close()


def publish(nsqd: DaemonProcess, topic: str, bodies: list[bytes]) -> None:
    """One PUB per body, each answered OK."""
    send_all(nsqd, *(pub_body(topic, body) for body in bodies))


def subscribe(nsqd: DaemonProcess, topic: str, channel: str, rdy: int) -> WireClient:
    consumer = WireClient(nsqd.tcp_port)
    consumer.send(b"  V2" + f"SUB {topic} {channel}\nRDY {rdy}\n".encode())
    assert consumer.read_frame() == (0, b"OK")
    return consumer


def receive(consumer: WireClient, n: int) -> list[tuple[bytes, bytes]]:
    """(id, body) of the next ``n`` messages."""
    out = []
    for _ in range(n):
        frame_type, data = consumer.read_frame()
        assert frame_type == 2, (frame_type, data)
        msg = decode_message(data)
        out.append((msg.id, msg.body))
    return out


def quiet_for(client: WireClient, seconds: float) -> bool:
    """True when no frame comes within ``seconds`` (the socket's timeout is restored)."""
    client.sock.settimeout(seconds)
    try:
        client.read_frame()
    except TimeoutError:
        return True
    finally:
        client.sock.settimeout(5.0)
    return False


def consume_all(nsqd: DaemonProcess, topic: str, channel: str, idle: float = 1.0) -> list[bytes]:
    """Every body the channel delivers until it is quiet for ``idle`` seconds (FIN'd)."""
    consumer = subscribe(nsqd, topic, channel, 1000)
    consumer.sock.settimeout(idle)
    bodies = []
    try:
        while True:
            frame_type, data = consumer.read_frame()
            assert frame_type == 2, data
            msg = decode_message(data)
            bodies.append(msg.body)
            consumer.send(b"FIN " + msg.id + b"\n")
    except TimeoutError:
        pass
    consumer.close()
    return bodies


def stats(nsqd: DaemonProcess, topic: str = "") -> dict[str, object]:
    query = f"&topic={topic}" if topic else ""
    status, body, _ = http_get(f"{nsqd.http}/stats?format=json{query}")
    assert status == 200
    return json.loads(body)  # type: ignore[no-any-return]


def channel_stats(nsqd: DaemonProcess, topic: str, channel: str) -> dict[str, object]:
    topics = stats(nsqd, topic)["topics"]
    assert isinstance(topics, list)
    (found,) = [c for t in topics for c in t["channels"] if c["channel_name"] == channel]
    return found  # type: ignore[no-any-return]
