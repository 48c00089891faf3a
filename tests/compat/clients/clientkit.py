"""What the client scripts in this folder share; not a script itself.

Each script runs in its own interpreter with this folder first on ``sys.path``, so it
imports this module as ``clientkit`` (mypy, which checks the folder as part of ``tests``,
is shown ``tests.compat.clients.clientkit``). Here: ``Errors``, the warnings a client
library logs; ``client_features``, what nsqd's /stats says about a client's connections;
``all_ready``, whether every channel has its consumers with RDY > 0; and for the tornado
(pynsq) scripts ``publish_and_run``, the loop that publishes once connected, and
``replies_into``, a publish callback. Imports only the standard library: each script
brings its own client.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

FEATURE_KEYS = ("tls", "tls_version", "snappy", "deflate", "authed", "auth_identity", "user_agent")


class Errors(logging.Handler):
    """Every warning or error a client library logs (an E_* frame from nsqd shows up here)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    @classmethod
    def installed(cls) -> Errors:
        """A handler on the root logger."""
        errors = cls()
        logging.getLogger().addHandler(errors)
        return errors


def client_features(stats: dict[str, Any], user_agent: str) -> list[dict[str, object]]:
    """The TLS, compression and auth fields (``FEATURE_KEYS``) of every producer and consumer
    connection in an nsqd /stats document whose user agent starts with ``user_agent``."""
    seen = list(stats.get("producers") or [])
    for topic in stats["topics"]:
        for channel in topic["channels"]:
            seen.extend(channel["clients"] or [])
    return [
        {k: c.get(k) for k in FEATURE_KEYS} for c in seen if c["user_agent"].startswith(user_agent)
    ]


def all_ready(stats: dict[str, Any], channels: Iterable[str], consumers: int) -> bool:
    """Whether each of ``channels`` has ``consumers`` clients with RDY > 0 in an nsqd /stats
    document."""
    ready = {
        c["channel_name"]: sum(1 for cl in c["clients"] if cl["ready_count"] > 0)
        for t in stats["topics"] or []
        for c in t["channels"]
    }
    return all(ready.get(ch, 0) == consumers for ch in channels)


class Loop(Protocol):
    """What ``publish_and_run`` uses of tornado's IOLoop."""

    def add_callback(self, callback: Callable[[], object]) -> None: ...

    def call_later(self, delay: float, callback: Callable[[], object]) -> object: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


def publish_and_run(
    loop: Loop, ready: Callable[[], bool], publish: Callable[[], object], seconds: float
) -> None:
    """Run ``loop`` until a handler stops it or ``seconds`` pass; ``publish`` is called once
    ``ready()`` holds (looked at every 50 ms)."""

    def attempt() -> None:
        if not ready():
            loop.call_later(0.05, attempt)
            return
        publish()

    loop.add_callback(attempt)
    loop.call_later(seconds, loop.stop)
    loop.start()


def replies_into(replies: list[str]) -> Callable[[object, object], None]:
    """A pynsq publish callback that appends each reply as text (``repr`` of an error)."""

    def published(conn: object, data: object) -> None:
        replies.append(data.decode() if isinstance(data, bytes) else repr(data))

    return published
