"""Every error the CommandParser raises: class, exact wire text, fatal flag (SPEC 1.2, 1.6, 1.7).

Texts are nsqd v1.3.0's, including its quirks: MPUB's doubled ``E_BAD_TOPIC``, Go's ``%q``
quoting of names, ``ByteToBase10``'s uint64 wrap-around and raw bytes echoed back.
"""

from __future__ import annotations

import struct

import pytest

from nsqpy.errors import (
    BadBody,
    BadChannel,
    BadMessage,
    BadProtocol,
    BadTopic,
    InvalidError,
    ProtocolError,
)
from nsqpy.protocol.commands import CommandParser, LineTooLong
from nsqpy.protocol.limits import MAX_LINE_LENGTH, Limits
from nsqpy.protocol.verbs import Dpub, Nop, Req

from .protocol_helpers import MAGIC, parse_chunks, parse_error, split_ways

ID = b"0a1b2c3d4e5f6071"


def size(n: int) -> bytes:
    return struct.pack(">i", n)


CASES: list[tuple[str, bytes, type[ProtocolError], bytes]] = [
    # command line
    ("empty-line", b"\n", InvalidError, b"E_INVALID invalid command "),
    ("unknown", b"FOO bar\n", InvalidError, b"E_INVALID invalid command FOO"),
    ("lower-case", b"nop\n", InvalidError, b"E_INVALID invalid command nop"),
    ("leading-space", b" NOP\n", InvalidError, b"E_INVALID invalid command "),
    ("raw-bytes", b"\xff\xfe\n", InvalidError, b"E_INVALID invalid command \xff\xfe"),
    # PUB
    ("pub-params", b"PUB\n", InvalidError, b"E_INVALID PUB insufficient number of parameters"),
    ("pub-topic", b"PUB t!\n", BadTopic, b'E_BAD_TOPIC PUB topic name "t!" is not valid'),
    ("pub-empty-topic", b"PUB \n", BadTopic, b'E_BAD_TOPIC PUB topic name "" is not valid'),
    (
        "pub-topic-65",
        b"PUB " + b"a" * 65 + b"\n",
        BadTopic,
        b'E_BAD_TOPIC PUB topic name "' + b"a" * 65 + b'" is not valid',
    ),
    (
        "pub-topic-quoted",
        b'PUB a"\\\t\xff\xc3\xa9\n',
        BadTopic,
        b'E_BAD_TOPIC PUB topic name "a\\"\\\\\\t\\xff\xc3\xa9" is not valid',
    ),
    (
        "pub-size-0",
        b"PUB t\n" + size(0),
        BadMessage,
        b"E_BAD_MESSAGE PUB invalid message body size 0",
    ),
    (
        "pub-size-neg",
        b"PUB t\n" + size(-1),
        BadMessage,
        b"E_BAD_MESSAGE PUB invalid message body size -1",
    ),
    (
        "pub-too-big",
        b"PUB t\n" + size(1048577),
        BadMessage,
        b"E_BAD_MESSAGE PUB message too big 1048577 > 1048576",
    ),
    # MPUB
    ("mpub-params", b"MPUB\n", InvalidError, b"E_INVALID MPUB insufficient number of parameters"),
    (
        "mpub-topic",
        b"MPUB x$\n",
        BadTopic,
        b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "x$" is not valid',
    ),
    ("mpub-size-0", b"MPUB t\n" + size(0), BadBody, b"E_BAD_BODY MPUB invalid body size 0"),
    (
        "mpub-too-big",
        b"MPUB t\n" + size(5242881),
        BadBody,
        b"E_BAD_BODY MPUB body too big 5242881 > 5242880",
    ),
    (
        "mpub-count-0",
        b"MPUB t\n" + size(9) + size(0),
        BadBody,
        b"E_BAD_BODY MPUB invalid message count 0",
    ),
    (
        "mpub-count-over",
        b"MPUB t\n" + size(9) + size(1048576),
        BadBody,
        b"E_BAD_BODY MPUB invalid message count 1048576",
    ),
    (
        "mpub-msg-0",
        b"MPUB t\n" + size(9) + size(1) + size(0),
        BadMessage,
        b"E_BAD_MESSAGE MPUB invalid message(0) body size 0",
    ),
    (
        "mpub-msg-1-neg",
        b"MPUB t\n" + size(20) + size(2) + size(1) + b"a" + size(-3),
        BadMessage,
        b"E_BAD_MESSAGE MPUB invalid message(1) body size -3",
    ),
    (
        "mpub-msg-too-big",
        b"MPUB t\n" + size(9) + size(1) + size(1048577),
        BadMessage,
        b"E_BAD_MESSAGE MPUB message too big 1048577 > 1048576",
    ),
    # DPUB
    ("dpub-params", b"DPUB t\n", InvalidError, b"E_INVALID DPUB insufficient number of parameters"),
    ("dpub-topic", b"DPUB t* 1\n", BadTopic, b'E_BAD_TOPIC DPUB topic name "t*" is not valid'),
    ("dpub-parse", b"DPUB t 1s\n", InvalidError, b"E_INVALID DPUB could not parse timeout 1s"),
    ("dpub-minus", b"DPUB t -1\n", InvalidError, b"E_INVALID DPUB could not parse timeout -1"),
    (
        "dpub-range",
        b"DPUB t 3600001\n",
        InvalidError,
        b"E_INVALID DPUB timeout 3600001 out of range 0-3600000",
    ),
    (
        "dpub-wrap",
        b"DPUB t 18446744073709551615\n",
        InvalidError,
        b"E_INVALID DPUB timeout 18446744073709551615 out of range 0-3600000",
    ),
    (
        "dpub-size-0",
        b"DPUB t 5\n" + size(0),
        BadMessage,
        b"E_BAD_MESSAGE DPUB invalid message body size 0",
    ),
    (
        "dpub-too-big",
        b"DPUB t 5\n" + size(1048577),
        BadMessage,
        b"E_BAD_MESSAGE DPUB message too big 1048577 > 1048576",
    ),
    # SUB
    ("sub-params", b"SUB t\n", InvalidError, b"E_INVALID SUB insufficient number of parameters"),
    ("sub-topic", b"SUB t\xff c\n", BadTopic, b'E_BAD_TOPIC SUB topic name "t\\xff" is not valid'),
    (
        "sub-channel",
        b"SUB t c#eph\n",
        BadChannel,
        b'E_BAD_CHANNEL SUB channel name "c#eph" is not valid',
    ),
    ("sub-double-space", b"SUB  t c\n", BadTopic, b'E_BAD_TOPIC SUB topic name "" is not valid'),
    # RDY
    ("rdy-parse", b"RDY abc\n", InvalidError, b"E_INVALID RDY could not parse count abc"),
    ("rdy-minus", b"RDY -1\n", InvalidError, b"E_INVALID RDY could not parse count -1"),
    ("rdy-range", b"RDY 2501\n", InvalidError, b"E_INVALID RDY count 2501 out of range 0-2500"),
    (
        "rdy-wrap",
        b"RDY 18446744073709551615\n",
        InvalidError,
        b"E_INVALID RDY count -1 out of range 0-2500",
    ),
    # FIN / REQ / TOUCH: bad parameters are fatal E_INVALID (only the broker's failures are not)
    ("fin-params", b"FIN\n", InvalidError, b"E_INVALID FIN insufficient number of params"),
    ("fin-id", b"FIN abc\n", InvalidError, b"E_INVALID invalid message ID"),
    ("fin-id-17", b"FIN " + ID + b"0\n", InvalidError, b"E_INVALID invalid message ID"),
    (
        "req-params",
        b"REQ " + ID + b"\n",
        InvalidError,
        b"E_INVALID REQ insufficient number of params",
    ),
    ("req-id", b"REQ abc 5\n", InvalidError, b"E_INVALID invalid message ID"),
    (
        "req-parse",
        b"REQ " + ID + b" 5.0\n",
        InvalidError,
        b"E_INVALID REQ could not parse timeout 5.0",
    ),
    ("touch-params", b"TOUCH\n", InvalidError, b"E_INVALID TOUCH insufficient number of params"),
    ("touch-id", b"TOUCH " + ID[:15] + b"\n", InvalidError, b"E_INVALID invalid message ID"),
    # IDENTIFY / AUTH: too big is checked before <= 0
    ("identify-0", b"IDENTIFY\n" + size(0), BadBody, b"E_BAD_BODY IDENTIFY invalid body size 0"),
    (
        "identify-neg",
        b"IDENTIFY\n" + size(-7),
        BadBody,
        b"E_BAD_BODY IDENTIFY invalid body size -7",
    ),
    (  # nsqpy takes at most 64 KiB of IDENTIFY (NSQ: --max-body-size)
        "identify-big",
        b"IDENTIFY\n" + size(65537),
        BadBody,
        b"E_BAD_BODY IDENTIFY body too big 65537 > 65536",
    ),
    ("auth-params", b"AUTH secret\n", InvalidError, b"E_INVALID AUTH invalid number of parameters"),
    ("auth-0", b"AUTH\n" + size(0), BadBody, b"E_BAD_BODY AUTH invalid body size 0"),
    (
        "auth-big",
        b"AUTH\n" + size(65537),
        BadBody,
        b"E_BAD_BODY AUTH body too big 65537 > 65536",
    ),
]


@pytest.mark.parametrize(("name", "raw", "cls", "wire"), CASES, ids=[c[0] for c in CASES])
def test_error_class_text_and_fatality(
    name: str, raw: bytes, cls: type[ProtocolError], wire: bytes
) -> None:
    for way, chunks in split_ways(MAGIC + raw).items():
        err = parse_error(chunks)
        assert type(err) is cls or isinstance(err, cls), way
        assert err.wire() == wire, way
        assert err.fatal, way


def test_wrong_magic_is_bad_protocol_without_description() -> None:
    for magic in (b"  V1", b"V2  ", b"GET /"):
        err = parse_error([magic])
        assert isinstance(err, BadProtocol)
        assert err.wire() == b"E_BAD_PROTOCOL"
        assert err.fatal


def test_magic_waits_for_four_bytes() -> None:
    parser = CommandParser()
    parser.feed(b" ")
    assert parser.next() is None
    parser.feed(b" V2NOP\n")
    assert parser.next() == Nop()


def test_oversized_body_is_refused_as_soon_as_its_size_is_read() -> None:
    parser = CommandParser()
    parser.feed(MAGIC + b"PUB t\n" + size(2_000_000))  # no body sent at all
    with pytest.raises(BadMessage):
        parser.next()


def test_errors_are_sticky() -> None:
    parser = CommandParser()
    parser.feed(MAGIC + b"BAD\n")
    with pytest.raises(InvalidError) as first:
        parser.next()
    parser.feed(b"NOP\n")
    with pytest.raises(InvalidError) as again:
        parser.next()
    assert again.value is first.value


def test_limits_change_the_checks() -> None:
    limits = Limits(max_msg_size=10, max_body_size=100, max_rdy_count=5, max_req_timeout_ms=1000)
    assert parse_error([MAGIC + b"PUB t\n" + size(11)], limits).wire() == (
        b"E_BAD_MESSAGE PUB message too big 11 > 10"
    )
    assert (
        parse_error([MAGIC + b"RDY 6\n"], limits).wire()
        == b"E_INVALID RDY count 6 out of range 0-5"
    )
    assert parse_error([MAGIC + b"DPUB t 1001\n"], limits).wire() == (
        b"E_INVALID DPUB timeout 1001 out of range 0-1000"
    )
    assert parse_error([MAGIC + b"MPUB t\n" + size(50) + size(20)], limits).wire() == (
        b"E_BAD_BODY MPUB invalid message count 20"  # (100 - 4) // 5 = 19
    )
    assert parse_chunks([MAGIC + b"REQ " + ID + b" 5000\n"], limits) == [Req(ID, 1000)]


def test_req_clamps_instead_of_refusing() -> None:
    stream = MAGIC + b"REQ " + ID + b" 18446744073709551615\n" + b"REQ " + ID + b" 99999999999\n"
    assert parse_chunks([stream]) == [Req(ID, 0), Req(ID, 3600000)]  # wrapped negative -> 0


def test_dpub_bounds_are_inclusive_and_empty_is_zero() -> None:
    stream = MAGIC + b"DPUB t 3600000\n" + size(1) + b"x" + b"DPUB t \n" + size(1) + b"y"
    assert parse_chunks([stream]) == [Dpub("t", 3600000, b"x"), Dpub("t", 0, b"y")]


def test_longest_accepted_line_and_the_first_refused_one() -> None:
    longest = b"NOP" + b" " * (MAX_LINE_LENGTH - 4) + b"\n"  # 16384 bytes with its newline
    assert len(longest) == MAX_LINE_LENGTH
    assert parse_chunks([MAGIC + longest]) == [Nop()]
    too_long = b"NOP" + b" " * (MAX_LINE_LENGTH - 3) + b"\n"
    err = parse_error([MAGIC + too_long])
    assert isinstance(err, LineTooLong)
    assert isinstance(err, InvalidError)
    assert getattr(err, "silent", False) is True


def test_line_too_long_is_seen_before_its_newline_arrives() -> None:
    parser = CommandParser()
    parser.feed(MAGIC + b"X" * (MAX_LINE_LENGTH - 1))
    assert parser.next() is None
    parser.feed(b"X")
    with pytest.raises(LineTooLong):
        parser.next()
