"""The message a consumer's handler receives, with its FIN/REQ/TOUCH controls.

A ``Message`` answers exactly once (``finish`` or ``requeue``); ``touch`` may be called any
number of times before that. The answer goes back through the ``Responder`` that delivered
it (the consumer), which writes the command on the connection the message came from and
does the RDY/backoff bookkeeping. No I/O here; imports nothing from asyncio.
"""

from __future__ import annotations

from typing import Protocol


class Responder(Protocol):
    """What a message needs from whoever delivered it."""

    def _finish(self, message: Message) -> None: ...

    def _requeue(self, message: Message, delay: float | None, backoff: bool) -> None: ...

    def _touch(self, message: Message) -> None: ...


class Message:
    """One delivery of an NSQ message.

    ``id`` is the 16-byte ASCII hex id, ``body`` the payload, ``timestamp`` the publish
    time in ns since the epoch, ``attempts`` the delivery count (1 on the first delivery).
    """

    __slots__ = ("_responded", "_responder", "attempts", "body", "id", "timestamp")

    def __init__(
        self, id: bytes, body: bytes, timestamp: int, attempts: int, responder: Responder
    ) -> None:
        self.id = id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self._responder = responder
        self._responded = False

    @property
    def has_responded(self) -> bool:
        """True once ``finish`` or ``requeue`` was called."""
        return self._responded

    def finish(self) -> None:
        """FIN: the message is done. Does nothing if the message already answered."""
        if self._responded:
            return
        self._responded = True
        self._responder._finish(self)

    def requeue(self, delay: float | None = None, *, backoff: bool = True) -> None:
        """REQ: deliver the message again after ``delay`` seconds.

        ``None`` uses the consumer's policy (``requeue_delay`` x attempts, capped by
        ``max_requeue_delay``). ``backoff=False`` requeues without slowing the consumer.
        Does nothing if the message already answered.
        """
        if self._responded:
            return
        if delay is not None and delay < 0:
            raise ValueError(f"requeue delay {delay} must be >= 0")
        self._responded = True
        self._responder._requeue(self, delay, backoff)

    def touch(self) -> None:
        """TOUCH: reset the server's in-flight timeout for this message."""
        if not self._responded:
            self._responder._touch(self)

    def __repr__(self) -> str:
        return (
            f"Message(id={self.id.decode(errors='replace')}, attempts={self.attempts}, "
            f"body={self.body[:32]!r}{'...' if len(self.body) > 32 else ''})"
        )
