"""What the metrics tests share: ``requeue_one``, the traffic that moves a channel's
requeue counter (the exporters' tests read it back in their own formats)."""

from __future__ import annotations

from nsqpy.testing import AsyncWire


async def requeue_one(tcp_port: int) -> AsyncWire:
    """A subscriber of orders/billing at RDY 1 that took one message and sent REQ for it
    (timeout 0); the connection, for the message delivered next."""
    wire = await AsyncWire.connect(tcp_port)
    await wire.send(b"SUB orders billing\nRDY 1\n")
    assert await wire.read_frame() == (0, b"OK")
    frame_type, data = await wire.read_frame()
    assert frame_type == 2
    await wire.send(b"REQ " + data[10:26] + b" 0\n")
    return wire
