"""The V2 connection state machine (SPEC 1.5) as a table: which command is allowed when.

States are the integers nsqd reports in /stats. ``check_verb`` runs nsqd's checks in nsqd's
order (TLS policy for every verb but IDENTIFY, then the state, then SUB's heartbeat rule)
and is the ``CommandParser`` gate. Imports only the standard library, nsqpy.errors and sibling protocol modules.
"""

from __future__ import annotations

from nsqpy.errors import InvalidError
from nsqpy.protocol._gofmt import RawInvalidError
from nsqpy.protocol.extend import MpubExt, MpubTrace, PubExt, PubTrace
from nsqpy.protocol.verbs import (
    Auth,
    Cls,
    Dpub,
    Fin,
    Identify,
    InternalCreateTopic,
    Mpub,
    Nop,
    Pub,
    Rdy,
    Req,
    Sub,
    Touch,
)

INIT, DISCONNECTED, CONNECTED, SUBSCRIBED, CLOSING = 0, 1, 2, 3, 4
STATE_NAMES = {
    INIT: "init",
    DISCONNECTED: "disconnected",
    CONNECTED: "connected",
    SUBSCRIBED: "subscribed",
    CLOSING: "closing",
}

_ANY = frozenset((INIT, DISCONNECTED, CONNECTED, SUBSCRIBED, CLOSING))
_IN_FLIGHT = frozenset((SUBSCRIBED, CLOSING))

# verb -> states where it is allowed. RDY is listed for SUBSCRIBED only; in CLOSING it is
# dropped silently (see below). Unknown verbs are left to the parser ("invalid command").
ALLOWED: dict[bytes, frozenset[int]] = {
    b"IDENTIFY": frozenset((INIT,)),
    b"AUTH": frozenset((INIT,)),
    b"SUB": frozenset((INIT,)),
    b"RDY": frozenset((SUBSCRIBED,)),
    b"FIN": _IN_FLIGHT,
    b"REQ": _IN_FLIGHT,
    b"TOUCH": _IN_FLIGHT,
    b"CLS": frozenset((SUBSCRIBED,)),
    b"PUB": _ANY,
    b"MPUB": _ANY,
    b"DPUB": _ANY,
    b"NOP": _ANY,
    # youzan's extensions
    b"SUB_ORDERED": frozenset((INIT,)),
    b"SUB_ADVANCED": frozenset((INIT,)),
    b"PUB_EXT": _ANY,
    b"MPUB_EXT": _ANY,
    b"PUB_TRACE": _ANY,
    b"MPUB_TRACE": _ANY,
    b"INTERNAL_CREATE_TOPIC": _ANY,
}

_VERBS: dict[type, bytes] = {
    Identify: b"IDENTIFY",
    Auth: b"AUTH",
    Sub: b"SUB",
    Rdy: b"RDY",
    Fin: b"FIN",
    Req: b"REQ",
    Touch: b"TOUCH",
    Cls: b"CLS",
    Pub: b"PUB",
    Mpub: b"MPUB",
    Dpub: b"DPUB",
    Nop: b"NOP",
    PubExt: b"PUB_EXT",
    MpubExt: b"MPUB_EXT",
    PubTrace: b"PUB_TRACE",
    MpubTrace: b"MPUB_TRACE",
    InternalCreateTopic: b"INTERNAL_CREATE_TOPIC",
}

_SUBS = frozenset((b"SUB", b"SUB_ORDERED", b"SUB_ADVANCED"))

# Pre-built errors' texts: "cannot SUB in current state".
_CANNOT = {verb: f"cannot {verb.decode()} in current state" for verb in ALLOWED}


def check_verb(
    state: int,
    verb: bytes,
    *,
    tls_required_and_not_tls: bool = False,
    heartbeat_interval_ms: int = 1,
) -> bool:
    """nsqd's checks that precede a command's parameters, in nsqd's order.

    Raises InvalidError (fatal) to refuse; returns False when the command must be dropped
    silently (RDY after CLS), True otherwise. Unknown verbs pass unless TLS is required.
    ``heartbeat_interval_ms`` <= 0 means heartbeats are disabled, which forbids SUB.
    """
    if tls_required_and_not_tls and verb != b"IDENTIFY":
        raise RawInvalidError("cannot ", verb, " in current state (TLS required)")
    allowed = ALLOWED.get(verb)
    if allowed is None or state in allowed:
        if verb in _SUBS:
            check_sub_allowed(heartbeat_interval_ms)
        return True
    if state == CLOSING and verb == b"RDY":
        return False
    raise InvalidError(_CANNOT[verb])


def verb_of(command: object) -> str:
    """The wire verb of a parsed command (``SUB_ORDERED`` for an ordered SUB,
    ``SUB_ADVANCED`` for an advanced one)."""
    if isinstance(command, Sub) and (command.ordered or command.advanced):
        return "SUB_ADVANCED" if command.advanced else "SUB_ORDERED"
    verb = _VERBS.get(type(command))
    return verb.decode() if verb is not None else type(command).__name__.upper()


def check_sub_allowed(heartbeat_interval_ms: int) -> None:
    """SUB needs heartbeats: fatal E_INVALID when they were disabled by IDENTIFY (-1)."""
    if heartbeat_interval_ms <= 0:
        raise InvalidError("cannot SUB with heartbeats disabled")
