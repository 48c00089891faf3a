"""Wire-level helpers the fault tests share: publish, subscribe, receive, consume (the
/stats readers are ``nsqpy.testing``'s)."""

from __future__ import annotations

from nsqpy.protocol.message import decode_message
from nsqpy.testing import DaemonProcess, WireClient, pub


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
    send_all(nsqd, *(pub(topic, body) for body in bodies))


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
