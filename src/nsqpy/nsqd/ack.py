"""A publisher's wait for the group commit: ``Ack``, one per PUB/MPUB or HTTP publish.

``NsqdServer`` creates one with the last offset a publish appended (``expect_ack``) and
resolves it when the flush (or, under ``--sync-every=always``, the fsync) covering that
offset is done, or with the publish's error when writing failed. A TCP connection queues
its reply behind it (``nsqd.tcp``); an HTTP publish or a stream upgrade awaits its
``callback``. Imports only ``nsqpy.errors``.
"""

from __future__ import annotations

import asyncio

from nsqpy.errors import ProtocolError


class Ack:
    """A publisher waiting for its last offset to be written (and synced under ``always``)."""

    __slots__ = ("callback", "done", "error", "failed", "offset")

    def __init__(self, offset: int, failed: type[ProtocolError]) -> None:
        self.offset = offset
        self.done = False
        self.error: ProtocolError | None = None
        self.failed = failed
        self.callback: asyncio.Future[None] | None = None

    def resolve(self, error: ProtocolError | None = None) -> None:
        self.done = True
        self.error = error
        fut = self.callback
        if fut is not None and not fut.done():
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)
