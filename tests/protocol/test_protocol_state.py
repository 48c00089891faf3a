"""The connection state table (SPEC 1.5), on parsed commands and as the parser's gate."""

from __future__ import annotations

import pytest

from nsqpy.errors import InvalidError
from nsqpy.protocol.commands import CommandParser
from nsqpy.protocol.state import (
    CLOSING,
    CONNECTED,
    DISCONNECTED,
    INIT,
    SUBSCRIBED,
    check_sub_allowed,
    check_verb,
)
from nsqpy.protocol.verbs import (
    Auth,
    Cls,
    Command,
    Dpub,
    Fin,
    Identify,
    Mpub,
    Nop,
    Pub,
    Rdy,
    Req,
    Sub,
    Touch,
)

from .protocol_helpers import MAGIC

ID = b"0123456789abcdef"
STATES = [INIT, DISCONNECTED, CONNECTED, SUBSCRIBED, CLOSING]
COMMANDS: list[tuple[bytes, Command, set[int]]] = [
    (b"IDENTIFY", Identify(b"{}"), {INIT}),
    (b"AUTH", Auth(b"s"), {INIT}),
    (b"SUB", Sub("t", "c"), {INIT}),
    (b"RDY", Rdy(1), {SUBSCRIBED}),
    (b"FIN", Fin(ID), {SUBSCRIBED, CLOSING}),
    (b"REQ", Req(ID, 0), {SUBSCRIBED, CLOSING}),
    (b"TOUCH", Touch(ID), {SUBSCRIBED, CLOSING}),
    (b"CLS", Cls(), {SUBSCRIBED}),
    (b"PUB", Pub("t", b"x"), set(STATES)),
    (b"MPUB", Mpub("t", [b"x"]), set(STATES)),
    (b"DPUB", Dpub("t", 0, b"x"), set(STATES)),
    (b"NOP", Nop(), set(STATES)),
]


def test_state_integers_match_nsqd_stats() -> None:
    assert STATES == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("verb", "command", "allowed"), COMMANDS, ids=[c[0].decode() for c in COMMANDS]
)
@pytest.mark.parametrize("state", STATES)
def test_state_table(verb: bytes, command: Command, allowed: set[int], state: int) -> None:
    if state in allowed:
        assert check_verb(state, verb) is True
    elif verb == b"RDY" and state == CLOSING:
        assert check_verb(state, verb) is False  # ignored silently
    else:
        expected = b"E_INVALID cannot " + verb + b" in current state"
        with pytest.raises(InvalidError) as info:
            check_verb(state, verb)
        assert info.value.wire() == expected
        assert info.value.fatal


@pytest.mark.parametrize(
    ("verb", "command", "allowed"), COMMANDS, ids=[c[0].decode() for c in COMMANDS]
)
def test_tls_required_refuses_everything_but_identify(
    verb: bytes, command: Command, allowed: set[int]
) -> None:
    if verb == b"IDENTIFY":
        assert check_verb(INIT, verb, tls_required_and_not_tls=True)
        return
    expected = b"E_INVALID cannot " + verb + b" in current state (TLS required)"
    with pytest.raises(InvalidError) as info:
        check_verb(SUBSCRIBED, verb, tls_required_and_not_tls=True)
    assert info.value.wire() == expected


def test_tls_required_applies_to_unknown_verbs_too() -> None:
    with pytest.raises(InvalidError) as info:
        check_verb(INIT, b"FOO", tls_required_and_not_tls=True)
    assert info.value.wire() == b"E_INVALID cannot FOO in current state (TLS required)"
    assert check_verb(INIT, b"FOO") is True  # left to the parser: "invalid command FOO"


def test_sub_needs_heartbeats() -> None:
    check_sub_allowed(30000)
    for disabled in (-1, 0):
        with pytest.raises(InvalidError) as info:
            check_sub_allowed(disabled)
        assert info.value.wire() == b"E_INVALID cannot SUB with heartbeats disabled"
    with pytest.raises(InvalidError):
        check_verb(INIT, b"SUB", heartbeat_interval_ms=-1)


def _gated(state: list[int], heartbeat_ms: int = 30000) -> CommandParser:
    return CommandParser(
        gate=lambda verb: check_verb(state[0], verb, heartbeat_interval_ms=heartbeat_ms)
    )


def test_gate_runs_state_checks_before_parameters_like_nsqd() -> None:
    # nsqd checks the state first: a bad SUB while subscribed is "cannot SUB", not E_BAD_TOPIC.
    parser = _gated([SUBSCRIBED])
    parser.feed(MAGIC + b"SUB bad! c\n")
    with pytest.raises(InvalidError) as info:
        parser.next()
    assert info.value.wire() == b"E_INVALID cannot SUB in current state"


def test_gate_checks_heartbeats_before_sub_parameters() -> None:
    parser = _gated([INIT], heartbeat_ms=-1)
    parser.feed(MAGIC + b"SUB\n")
    with pytest.raises(InvalidError) as info:
        parser.next()
    assert info.value.wire() == b"E_INVALID cannot SUB with heartbeats disabled"


def test_gate_drops_rdy_after_cls_even_with_a_bad_count() -> None:
    state = [CLOSING]
    parser = _gated(state)
    parser.feed(MAGIC + b"RDY nonsense\nRDY 5\nFIN " + ID + b"\n")
    assert parser.next() == Fin(ID)
    state[0] = SUBSCRIBED
    parser.feed(b"RDY 5\n")
    assert parser.next() == Rdy(5)


def test_gate_sees_state_changes_between_commands() -> None:
    state = [INIT]
    parser = _gated(state)
    parser.feed(MAGIC + b"SUB t c\nRDY 3\n")
    assert parser.next() == Sub("t", "c")
    state[0] = SUBSCRIBED  # the server applies SUB before asking for the next command
    assert parser.next() == Rdy(3)
