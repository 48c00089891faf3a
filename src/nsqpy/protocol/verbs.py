"""The V2 command objects: one per verb of NSQ's protocol, and ``Command``, every command
``nsqpy.protocol.commands.CommandParser`` returns (Youzan's ``PubExt``, ``MpubExt``, ``PubTrace``
and ``MpubTrace`` come from ``nsqpy.protocol.extend``). Values only: parsing is in
``commands``, encoding in ``client_codec``. Imports only the standard library and sibling
protocol modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from nsqpy.protocol.extend import MpubExt, MpubTrace, PubExt, PubTrace


@dataclass(slots=True)
class Identify:
    body: bytes


@dataclass(slots=True)
class Auth:
    secret: bytes


# A partition of -1 means none was given: the server picks one.
@dataclass(slots=True)
class Sub:
    topic: str
    channel: str
    partition: int = -1
    ordered: bool = False  # SUB_ORDERED
    advanced: bool = False  # SUB_ADVANCED (youzan's detail in front of each body)
    start: bytes = b""  # SUB_ADVANCED's consume position (``type:value``), b"" for none


@dataclass(slots=True)
class InternalCreateTopic:
    """youzan's ``INTERNAL_CREATE_TOPIC <topic> <partition> [<ext>]`` (a single node's)."""

    topic: str
    partition: int
    ext: bool = False


@dataclass(slots=True)
class Pub:
    topic: str
    body: bytes
    partition: int = -1


@dataclass(slots=True)
class Mpub:
    topic: str
    bodies: list[bytes] = field(default_factory=list)
    partition: int = -1


@dataclass(slots=True)
class Dpub:
    topic: str
    defer_ms: int
    body: bytes


@dataclass(slots=True)
class Rdy:
    count: int


@dataclass(slots=True)
class Fin:
    msg_id: bytes


@dataclass(slots=True)
class Req:
    msg_id: bytes
    timeout_ms: int  # already clamped to [0, max_req_timeout_ms], as nsqd does


@dataclass(slots=True)
class Touch:
    msg_id: bytes


@dataclass(slots=True)
class Cls:
    pass


@dataclass(slots=True)
class Nop:
    pass


Command: TypeAlias = (
    Identify
    | Auth
    | Sub
    | Pub
    | Mpub
    | Dpub
    | Rdy
    | Fin
    | Req
    | Touch
    | Cls
    | Nop
    | PubExt
    | MpubExt
    | PubTrace
    | MpubTrace
    | InternalCreateTopic
)


__all__ = [
    "Auth",
    "Cls",
    "Command",
    "Dpub",
    "Fin",
    "Identify",
    "InternalCreateTopic",
    "Mpub",
    "MpubExt",
    "MpubTrace",
    "Nop",
    "Pub",
    "PubExt",
    "PubTrace",
    "Rdy",
    "Req",
    "Sub",
    "Touch",
]
