"""The server-side CommandParser: golden bytes (SPEC 1.6a), split feeding, round trips.

Each golden stream is parsed whole, one byte at a time, cut at several points, and with a
trailing command (which must come out next, unharmed).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.errors import ProtocolError
from nsqpy.protocol.client_codec import (
    encode_auth,
    encode_cls,
    encode_dpub,
    encode_fin,
    encode_identify,
    encode_magic,
    encode_mpub,
    encode_nop,
    encode_pub,
    encode_rdy,
    encode_req,
    encode_sub,
    encode_touch,
)
from nsqpy.protocol.commands import CommandParser
from nsqpy.protocol.limits import Limits
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

from .protocol_helpers import MAGIC, parse_chunks, split_at, split_ways

ID = b"0a1b2c3d4e5f6071"

GOLDEN: list[tuple[str, bytes, Command]] = [
    ("PUB", b"PUB test\n" + b"\x00\x00\x00\x05" + b"hello", Pub("test", b"hello")),
    (
        "MPUB",
        b"MPUB test\n"
        + b"\x00\x00\x00\x0f"  # body size 15 = 4 (count) + (4+1) + (4+2)
        + b"\x00\x00\x00\x02"  # 2 messages
        + b"\x00\x00\x00\x01a"  # size 1, "a"
        + b"\x00\x00\x00\x02bc",  # size 2, "bc"
        Mpub("test", [b"a", b"bc"]),
    ),
    ("DPUB", b"DPUB test 5000\n" + b"\x00\x00\x00\x05" + b"hello", Dpub("test", 5000, b"hello")),
    (
        "IDENTIFY",
        b'IDENTIFY\n\x00\x00\x00\x0f{"client_id":1}',  # int32 len(json) = 15, then the JSON
        Identify(b'{"client_id":1}'),
    ),
    ("AUTH", b"AUTH\n\x00\x00\x00\x03abc", Auth(b"abc")),
    ("SUB", b"SUB test ch#ephemeral\n", Sub("test", "ch#ephemeral")),
    ("RDY", b"RDY 100\n", Rdy(100)),
    ("RDY-default", b"RDY\n", Rdy(1)),
    ("RDY-empty", b"RDY \n", Rdy(0)),  # an empty number parses as 0
    ("FIN", b"FIN 0a1b2c3d4e5f6071\n", Fin(ID)),
    ("REQ", b"REQ 0a1b2c3d4e5f6071 1000\n", Req(ID, 1000)),
    ("REQ-clamped", b"REQ 0a1b2c3d4e5f6071 3600001\n", Req(ID, 3600000)),
    ("TOUCH", b"TOUCH 0a1b2c3d4e5f6071\n", Touch(ID)),
    ("CLS", b"CLS\n", Cls()),
    ("NOP", b"NOP\n", Nop()),
    ("NOP-crlf", b"NOP\r\n", Nop()),  # a trailing \r is stripped
    ("FIN-crlf", b"FIN 0a1b2c3d4e5f6071\r\n", Fin(ID)),
    # A third parameter is youzan's partition (tests/partitions); a fourth is ignored.
    ("extra-params", b"PUB test 1 extra\n\x00\x00\x00\x01x", Pub("test", b"x")),
    ("CLS-params", b"CLS now\n", Cls()),
]
TRAILER = b"NOP\n"


@pytest.mark.parametrize(("name", "raw", "expected"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden_commands_under_every_split(name: str, raw: bytes, expected: Command) -> None:
    for way, chunks in split_ways(MAGIC + raw + TRAILER).items():
        assert parse_chunks(chunks) == [expected, Nop()], way


@pytest.mark.parametrize(("name", "raw", "expected"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_incomplete_command_returns_none_and_keeps_its_bytes(
    name: str, raw: bytes, expected: Command
) -> None:
    parser = CommandParser()
    parser.feed(MAGIC + raw[:-1])
    assert parser.next() is None
    assert parser.buffered == len(raw) - 1
    parser.feed(raw[-1:])
    assert parser.next() == expected
    assert parser.buffered == 0


def test_all_commands_back_to_back_in_one_feed() -> None:
    stream = MAGIC + b"".join(raw for _, raw, _ in GOLDEN)
    assert parse_chunks([stream]) == [expected for _, _, expected in GOLDEN]


def test_parser_without_magic() -> None:
    parser = CommandParser(expect_magic=False)
    parser.feed(b"NOP\n")
    assert parser.next() == Nop()


def test_feed_accepts_memoryview_and_copies_it() -> None:
    data = bytearray(MAGIC + b"PUB t\n\x00\x00\x00\x02hi")
    parser = CommandParser()
    parser.feed(memoryview(data)[:8])
    parser.feed(memoryview(data)[8:])
    data[:] = b"x" * len(data)  # the caller reuses its buffer
    assert parser.next() == Pub("t", b"hi")


def test_big_body_arriving_in_many_chunks() -> None:
    body = bytes(range(256)) * 4000  # 1 MB > the 64 KiB compaction threshold
    stream = MAGIC + encode_pub("big", body) + encode_mpub("big", [body[:300_000]] * 3) + TRAILER
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]
    assert parse_chunks(chunks) == [Pub("big", body), Mpub("big", [body[:300_000]] * 3), Nop()]


def test_mpub_consumes_what_its_messages_say_not_its_body_size() -> None:
    # nsqd never checks body_size against the bytes read: a short body_size is harmless.
    raw = b"MPUB t\n\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x02hi"
    assert parse_chunks([MAGIC + raw + TRAILER]) == [Mpub("t", [b"hi"]), Nop()]


def test_golden_client_encoders() -> None:
    assert encode_magic() == b"  V2"
    assert encode_pub("test", b"hello") == GOLDEN[0][1]
    assert encode_mpub("test", [b"a", b"bc"]) == GOLDEN[1][1]
    assert encode_pub("test", b"hello", 3) == b"PUB test 3\n\x00\x00\x00\x05hello"
    assert (
        encode_mpub("test", [b"a"], 0)
        == b"MPUB test 0\n\x00\x00\x00\x09\x00\x00\x00\x01\x00\x00\x00\x01a"
    )
    assert encode_dpub("test", 5000, b"hello") == GOLDEN[2][1]
    assert encode_identify({"client_id": 1}) == GOLDEN[3][1]
    assert encode_auth(b"abc") == encode_auth("abc") == GOLDEN[4][1]
    assert encode_sub("test", "ch#ephemeral") == GOLDEN[5][1]
    assert encode_rdy(100) == GOLDEN[6][1]
    assert encode_fin(ID) == GOLDEN[9][1]
    assert encode_req(ID, 1000) == GOLDEN[10][1]
    assert encode_touch(ID) == GOLDEN[12][1]
    assert encode_cls() == b"CLS\n"
    assert encode_nop() == b"NOP\n"


@pytest.mark.parametrize(
    "call",
    [
        lambda: encode_pub("bad topic", b"x"),
        lambda: encode_sub("t", "bad\nchannel"),
        lambda: encode_fin(b"short"),
        lambda: encode_req(b"0123456789abcde\n", 0),
        lambda: encode_rdy(-1),
        lambda: encode_dpub("t", -5, b"x"),
        lambda: encode_pub("t", b"x", -2),
        lambda: encode_mpub("t", [b"x"], -7),
    ],
)
def test_client_encoders_refuse_values_that_would_break_the_line(call: object) -> None:
    with pytest.raises(ValueError):
        call()  # type: ignore[operator]


@given(st.binary(min_size=16, max_size=16).filter(lambda b: b" " not in b and b"\n" not in b))
def test_id_encoders_fast_and_full_checks_agree(msg_id: bytes) -> None:
    # real IDs (16 ASCII letters or digits, as bytes) take a fast path; anything else the full check
    for form in (msg_id, bytearray(msg_id), memoryview(msg_id)):
        assert encode_fin(form) == b"FIN " + msg_id + b"\n"
        assert encode_req(form, 7) == b"REQ " + msg_id + b" 7\n"
        assert encode_touch(form) == b"TOUCH " + msg_id + b"\n"
    hex_id = msg_id.hex()[:16].encode()
    assert encode_fin(hex_id) == b"FIN " + hex_id + b"\n"


names = st.from_regex(r"[.a-zA-Z0-9_-]{1,54}(#ephemeral)?", fullmatch=True)
# any 16 bytes a line can carry: no space or newline, and no CR at the end, which the
# parser strips as part of a CRLF line ending, as NSQ does (real IDs are hex anyway)
ids = st.binary(min_size=16, max_size=16).filter(
    lambda b: b" " not in b and b"\n" not in b and not b.endswith(b"\r")
)
bodies = st.binary(min_size=1, max_size=64)
commands = st.one_of(
    st.builds(lambda t, b: (encode_pub(t, b), Pub(t, b)), names, bodies),
    st.builds(
        lambda t, bs: (encode_mpub(t, bs), Mpub(t, bs)),
        names,
        st.lists(bodies, min_size=1, max_size=5),
    ),
    st.builds(  # Youzan's partitioned forms, as a forwarding nsqd sends them
        lambda t, b, p: (encode_pub(t, b, p), Pub(t, b, p)), names, bodies, st.integers(0, 1023)
    ),
    st.builds(
        lambda t, bs, p: (encode_mpub(t, bs, p), Mpub(t, bs, p)),
        names,
        st.lists(bodies, min_size=1, max_size=5),
        st.integers(0, 1023),
    ),
    st.builds(
        lambda t, d, b: (encode_dpub(t, d, b), Dpub(t, d, b)),
        names,
        st.integers(0, 3600000),
        bodies,
    ),
    st.builds(lambda t, c: (encode_sub(t, c), Sub(t, c)), names, names),
    st.builds(lambda n: (encode_rdy(n), Rdy(n)), st.integers(0, 2500)),
    st.builds(lambda i: (encode_fin(i), Fin(i)), ids),
    st.builds(
        lambda i, ms: (encode_req(i, ms), Req(i, min(ms, 3600000))), ids, st.integers(0, 10**12)
    ),
    st.builds(lambda i: (encode_touch(i), Touch(i)), ids),
    st.builds(lambda b: (encode_auth(b), Auth(b)), bodies),
    st.builds(
        lambda d: (encode_identify(d), Identify(encode_identify(d)[13:])),
        st.dictionaries(st.sampled_from(["client_id", "hostname"]), st.text(max_size=10)),
    ),
    st.just((encode_cls(), Cls())),
    st.just((encode_nop(), Nop())),
)


@settings(max_examples=150)
@given(st.lists(commands, max_size=8), st.lists(st.integers(0, 2000), max_size=8))
def test_encoders_round_trip_through_the_parser_under_any_split(
    pairs: list[tuple[bytes, Command]], cuts: list[int]
) -> None:
    stream = MAGIC + b"".join(raw for raw, _ in pairs)
    assert parse_chunks(split_at(stream, cuts)) == [cmd for _, cmd in pairs]


@settings(max_examples=300)
@given(st.binary(max_size=300), st.integers(1, 64))
def test_garbage_after_magic_gives_commands_or_a_protocol_error_only(
    garbage: bytes, step: int
) -> None:
    parser = CommandParser(Limits(max_msg_size=64, max_body_size=256))
    parser.feed(MAGIC)
    try:
        for i in range(0, len(garbage), step):
            parser.feed(garbage[i : i + step])
            for command in parser.commands():
                assert isinstance(command, Command)
    except ProtocolError as err:
        assert err.wire().startswith(b"E_")
        with pytest.raises(ProtocolError):  # fatal: the parser stays failed
            parser.next()


@settings(max_examples=150)
@given(
    st.lists(
        st.sampled_from(
            [
                b"PUB ",
                b"MPUB ",
                b"DPUB ",
                b"SUB ",
                b"RDY ",
                b"FIN ",
                b"REQ ",
                b"TOUCH ",
                b"AUTH",
                b"IDENTIFY",
                b"NOP",
                b"CLS",
                b"t",
                b" ",
                b"\n",
                b"\r",
                b"-1",
                b"99999999999999999999",
                b"\x00\x00\x00\x05",
                b"\xff\xff\xff\xff",
                b"\x00\x00\x00\x00",
                b"0123456789abcdef",
                b"#ephemeral",
                b"\xc3\x28",
            ]
        ),
        max_size=20,
    )
)
def test_plausible_garbage_never_escapes_as_another_exception(parts: list[bytes]) -> None:
    parser = CommandParser(Limits(max_msg_size=64, max_body_size=256))
    parser.feed(MAGIC + b"".join(parts))
    try:
        list(parser.commands())
    except ProtocolError:
        pass


def test_take_fins_consumes_a_run_of_plain_fins_and_nothing_else() -> None:
    parser = CommandParser()
    ids = [b"%016x" % n for n in (1, 2, 0xABCDEF)]
    parser.feed(MAGIC + b"".join(b"FIN " + i + b"\n" for i in ids) + b"RDY 5\nFIN 0000")
    assert parser.take_fins() == []  # the magic is still due: the ordinary path checks it
    assert parser.next() == Fin(ids[0])
    assert parser.take_fins() == ids[1:]
    parser = CommandParser(expect_magic=False)
    parser.feed(b"".join(b"FIN " + i + b"\n" for i in ids) + b"RDY 5\nFIN 0000")
    assert parser.take_fins() == ids
    assert parser.take_fins() == []  # RDY comes next: left to next()
    assert parser.next() == Rdy(5)
    assert parser.take_fins() == []  # a partial line waits for its bytes
    parser.feed(b"00000000000a\n")
    assert parser.take_fins() == [b"000000000000000a"]
    assert parser.next() is None


@pytest.mark.parametrize(
    "line",
    [
        b"FIN 00000000000000AB\n",  # upper case: nsqd answers E_FIN_FAILED, not our ID form
        b"FIN 00000000000000ab\r\n",  # CR LF
        b"FIN 0000000000000ab\n",  # 15 characters: E_INVALID
        b"FIN  00000000000000ab\n",
        b"FIN\n",
    ],
)
def test_take_fins_leaves_unusual_fins_to_the_ordinary_parse(line: bytes) -> None:
    parser = CommandParser(expect_magic=False)
    parser.feed(b"FIN 0000000000000001\n" + line)
    assert parser.take_fins() == [b"0000000000000001"]
    assert parser.take_fins() == []
    try:
        parsed = parser.next()
    except ProtocolError:
        return
    assert isinstance(parsed, Fin)


def test_take_fins_returns_nothing_after_an_error() -> None:
    parser = CommandParser(expect_magic=False)
    parser.feed(b"BOGUS\nFIN 0000000000000001\n")
    with pytest.raises(ProtocolError):
        parser.next()
    assert parser.take_fins() == []


# -- take_publish: a whole PUB or MPUB in one read (the server's publish lane) -------------


def _warm(topic: str = "t") -> CommandParser:
    """A parser past the magic that has read one command naming ``topic``."""
    parser = CommandParser(Limits(max_msg_size=100, max_body_size=1000))
    parser.feed(encode_magic() + encode_pub(topic, b"x"))
    assert parser.next() == Pub(topic, b"x")
    return parser


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["t", "other"]),
    st.booleans(),
    st.lists(st.binary(min_size=1, max_size=120), min_size=1, max_size=7),
    st.binary(max_size=3),
)
def test_take_publish_is_next_or_nothing(
    topic: str, multi: bool, bodies: list[bytes], tail: bytes
) -> None:
    """Whatever it takes, ``next`` would have parsed the same from the same bytes; what it
    refuses it leaves untouched (sizes over the limits, a name not read yet, bytes past the
    command, a partial command)."""
    data = (encode_mpub(topic, bodies) if multi else encode_pub(topic, bodies[0])) + tail
    parser = _warm()
    taken = parser.take_publish(data)
    assert parser.buffered == 0
    reference = _warm()
    reference.feed(data)
    try:
        expected: object = reference.next()
    except ProtocolError as err:
        expected = err
    if taken is None:
        return
    assert not tail and topic == "t"
    is_mpub, name, got = taken
    assert expected == (Mpub(name, got) if is_mpub else Pub(name, got[0]))
    assert reference.buffered == 0


@pytest.mark.parametrize(
    "data",
    [
        encode_pub("t", b"x")[:-1],  # partial
        b"PUB t\r\n\x00\x00\x00\x01x",  # a CR
        b"PUB t 0\n\x00\x00\x00\x01x",  # a partition
        b"PUB t\n\x00\x00\x00\x00",  # an empty body
        encode_mpub("t", [b"a", b"b"])[:-1] + b"bb",  # the last size runs past the end
        b"MPUB t\n\x00\x00\x00\x0d\x00\x00\x00\x01\x00\x00\x00\x01ab",  # size != messages
        encode_mpub("t", [b"a"] * 250),  # over max_body_size
        encode_pub("t", b"x" * 101),  # over max_msg_size
        encode_nop(),
    ],
)
def test_take_publish_leaves_anything_unusual_to_next(data: bytes) -> None:
    parser = _warm()
    assert parser.take_publish(data) is None
    assert parser.buffered == 0


def test_take_publish_waits_for_what_is_buffered_and_the_magic() -> None:
    parser = _warm()
    parser.feed(b"NO")
    assert parser.take_publish(encode_pub("t", b"x")) is None  # behind a partial command
    fresh = CommandParser()
    assert fresh.take_publish(encode_pub("t", b"x")) is None  # the magic is still due
    assert _warm().take_publish(encode_pub("t", b"x")) == (False, "t", [b"x"])
    assert _warm().take_publish(encode_mpub("t", [b"a", b"bc"])) == (True, "t", [b"a", b"bc"])
