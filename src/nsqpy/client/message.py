"""The message a consumer's handler receives, with its FIN/REQ/TOUCH controls.

A ``Message`` answers exactly once (``finish`` or ``requeue``); ``touch`` may be called any
number of times before that. The answer goes back through the ``Responder`` that delivered
it (the consumer), which writes the command on the connection the message came from and
does the RDY/backoff bookkeeping. No I/O here; imports nothing from asyncio.
"""

from __future__ import annotations

import json
from typing import Protocol


class Responder(Protocol):
    """What a message needs from whoever delivered it."""

    def _finish(self, message: Message) -> None: ...

    def _requeue(self, message: Message, delay: float | None, backoff: bool) -> None: ...

    def _touch(self, message: Message) -> None: ...


class Message:
    """One delivery of an NSQ message.

    ``id`` is the 16-byte ID as nsqd sent it (ASCII hex; binary on a connection with
    youzan's ``extend_support``), ``body`` the payload, ``timestamp`` the publish time in ns
    since the epoch, ``attempts`` the delivery count (1 on the first delivery).

    With youzan's extensions: ``headers`` is the message's JSON header (``extend_support``;
    empty otherwise), ``trace_id`` its trace id (``extend_support``; 0 otherwise) and
    ``queue_offset`` its offset in its partition (a subscription that is ordered or has a
    start position; -1 otherwise).
    """

    __slots__ = (
        "_responded",
        "_responder",
        "attempts",
        "body",
        "headers",
        "id",
        "queue_offset",
        "timestamp",
        "trace_id",
    )

    def __init__(
        self,
        id: bytes,
        body: bytes,
        timestamp: int,
        attempts: int,
        responder: Responder,
        *,
        headers: dict[str, str] | None = None,
        trace_id: int = 0,
        queue_offset: int = -1,
    ) -> None:
        self.id = id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self.headers = headers if headers is not None else {}
        self.trace_id = trace_id
        self.queue_offset = queue_offset
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
            f"Message(id={_shown(self.id)}, attempts={self.attempts}, "
            f"body={self.body[:32]!r}{'...' if len(self.body) > 32 else ''})"
        )


def _shown(msg_id: bytes) -> str:
    """An ID as text: as sent when it is hex text, else (a binary ID) in hex."""
    return msg_id.decode() if msg_id.isascii() and msg_id.isalnum() else msg_id.hex()


def json_headers(ext: bytes) -> dict[str, str]:
    """A message's JSON header (youzan's extension) as a dict of strings; {} when it is not
    a JSON object (nsqd checked it when it was published)."""
    try:
        doc = json.loads(ext) if ext else {}
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in doc.items()}
