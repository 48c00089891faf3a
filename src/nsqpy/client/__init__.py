"""nsqpy's asyncio NSQ client: ``Producer`` (PUB/MPUB/DPUB, youzan's PUB_EXT/PUB_TRACE) and
``Consumer`` (SUB, SUB_ORDERED or SUB_ADVANCED + handler).

Works against any nsqd speaking protocol V2 (NSQ 1.x or nsqpy). Quick start::

    from nsqpy.client import Consumer, Message, Producer

    async with Producer("127.0.0.1:4150") as producer:
        await producer.pub("events", b"hello")

    async def handle(msg: Message) -> None:     # return = FIN, raise = REQ with backoff
        print(msg.body)

    async with Consumer("events", "archive", handle,
                        lookupd_http_addresses=["127.0.0.1:4161"], max_in_flight=10):
        await asyncio.Event().wait()

Layers: ``nsqpy.protocol`` (every byte sent or parsed) < ``secure`` (TLS, compression, AUTH
on any ``secure.Upgradable``) < ``conn`` (one socket) < ``producer`` / ``consumer``; ``rdy``
and ``backoff`` are pure policies, ``lookup`` is the lookupd HTTP poller.
This package never imports the servers (``nsqd``, ``lookupd``, ``broker``) or ``testing``.
"""

from nsqpy.client.conn import Connection, IdentifyOptions
from nsqpy.client.consumer import Consumer, ConsumerStats
from nsqpy.client.errors import (
    ClientError,
    ConnectionClosedError,
    NoConnectionsError,
    UnexpectedResponseError,
)
from nsqpy.client.message import Message
from nsqpy.client.producer import Producer, Published

__all__ = [
    "ClientError",
    "Connection",
    "ConnectionClosedError",
    "Consumer",
    "ConsumerStats",
    "IdentifyOptions",
    "Message",
    "NoConnectionsError",
    "Producer",
    "Published",
    "UnexpectedResponseError",
]
