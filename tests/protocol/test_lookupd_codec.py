"""The nsqlookupd V1 codec (SPEC 3.1) without sockets: golden bytes, split feeding, round trips.

Client encoders feed the server parser and server replies feed the client decoder, joined
in memory. Streams are fed whole, one byte at a time, in random cuts and with trailing
bytes; garbage must come out as one clean ProtocolError, never an exception.
"""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.errors import BadBody, BadChannel, BadProtocol, BadTopic, InvalidError, ProtocolError
from nsqpy.protocol.lookupd import (
    MAX_IDENTIFY_BODY,
    BadResponse,
    Event,
    Identify,
    LookupCommand,
    LookupdParser,
    PeerIdentity,
    Ping,
    Register,
    ResponseDecoder,
    Unregister,
    decode_identify,
    encode_error,
    encode_identify_v1,
    encode_ping,
    encode_register,
    encode_response,
    encode_unregister,
    encode_v1_magic,
    go_trim_space,
    response_error,
)

NAME = st.from_regex(r"[.a-zA-Z0-9_-]{1,54}(#ephemeral)?", fullmatch=True)


def feed_all(parser: LookupdParser, chunks: list[bytes]) -> list[Event]:
    out: list[Event] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    return out


def split_ways(stream: bytes) -> list[list[bytes]]:
    """Whole, one byte at a time, and cut in two at several points."""
    ways = [[stream], [stream[i : i + 1] for i in range(len(stream))]]
    ways += [
        [stream[:cut], stream[cut:]] for cut in range(1, len(stream), max(1, len(stream) // 5))
    ]
    return ways


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


# -- golden bytes ---------------------------------------------------------------------------


def test_client_encoders_golden_bytes() -> None:
    assert encode_v1_magic() == b"  V1"
    assert encode_ping() == b"PING\n"
    assert encode_register("t") == b"REGISTER t\n"
    assert encode_register("t", "c") == b"REGISTER t c\n"
    assert encode_register("t", "") == b"REGISTER t\n"
    assert encode_unregister("t#ephemeral") == b"UNREGISTER t#ephemeral\n"
    assert encode_unregister("t", "c#ephemeral") == b"UNREGISTER t c#ephemeral\n"
    assert encode_identify_v1({"tcp_port": 4150}) == (
        b"IDENTIFY\n"  # verb line
        b"\x00\x00\x00\x11"  # body size 17, big-endian int32
        b'{"tcp_port":4150}'  # JSON body
    )


@pytest.mark.parametrize("topic", ["", "a b", "t\nPING", "x" * 65, "t!"])
def test_encoders_refuse_names_that_would_break_the_line(topic: str) -> None:
    with pytest.raises(ValueError, match="invalid topic"):
        encode_register(topic)
    with pytest.raises(ValueError, match="invalid channel"):
        encode_unregister("t", topic or "bad channel")


def test_server_replies_golden_bytes() -> None:
    assert encode_response(b"OK") == b"\x00\x00\x00\x02OK"  # size 2 (no frame type), data
    assert encode_error(InvalidError("cannot IDENTIFY again")) == (
        b"\x00\x00\x00\x1fE_INVALID cannot IDENTIFY again"
    )
    assert encode_error(BadProtocol()) == b"\x00\x00\x00\x0eE_BAD_PROTOCOL"


GOLDEN = (
    b"  V1"  # magic
    b"PING\n"
    b"IDENTIFY\n\x00\x00\x00\x02{}"  # IDENTIFY, body size 2, body
    b"REGISTER t c\n"
    b"UNREGISTER t\n"
)
GOLDEN_EVENTS: list[Event] = [Ping(), Identify(b"{}"), Register("t", "c"), Unregister("t", None)]


@pytest.mark.parametrize("chunks", split_ways(GOLDEN), ids=lambda c: f"{len(c)}-chunks")
def test_parser_golden_stream_any_split(chunks: list[bytes]) -> None:
    parser = LookupdParser()
    assert feed_all(parser, chunks) == GOLDEN_EVENTS
    assert parser.buffered == 0 and parser.identified


def test_parser_keeps_trailing_partial_command() -> None:
    parser = LookupdParser()
    assert parser.feed(GOLDEN + b"REGISTER u") == GOLDEN_EVENTS
    assert parser.buffered == len(b"REGISTER u")
    assert parser.feed(b" c#ephemeral\r\n") == [Register("u", "c#ephemeral")]


def test_identify_body_may_contain_newlines_and_verbs() -> None:
    body = b'{"a":"PING\\nREGISTER x\\n"}\n'
    stream = b"  V1IDENTIFY\n" + struct.pack(">i", len(body)) + body + b"PING\n"
    for chunks in split_ways(stream):
        assert feed_all(LookupdParser(), chunks) == [Identify(body), Ping()]


# -- parser errors ----------------------------------------------------------------------------

PARSER_ERRORS = [
    (b"  V2", BadProtocol, b"E_BAD_PROTOCOL"),
    (b"  V1FOO bar\n", InvalidError, b"E_INVALID invalid command FOO"),
    (b"  V1REGISTER t\n", InvalidError, b"E_INVALID client must IDENTIFY"),
    (b"  V1IDENTIFY\n\x00\x00\x00\x00IDENTIFY\n", InvalidError, b"E_INVALID cannot IDENTIFY again"),
    (
        b"  V1IDENTIFY\n\x00\x00\x00\x00REGISTER\n",
        InvalidError,
        b"E_INVALID REGISTER insufficient number of params",
    ),
    (
        b"  V1IDENTIFY\n\x00\x00\x00\x00REGISTER a:b\n",
        BadTopic,
        b"E_BAD_TOPIC REGISTER topic name 'a:b' is not valid",
    ),
    (
        b"  V1IDENTIFY\n\x00\x00\x00\x00UNREGISTER t #\n",
        BadChannel,
        b"E_BAD_CHANNEL UNREGISTER channel name '#' is not valid",
    ),
    (b"  V1IDENTIFY\n\xff\xff\xff\xfe", BadBody, b"E_BAD_BODY IDENTIFY invalid body size -2"),
    (
        b"  V1IDENTIFY\n\x7f\xff\xff\xff",
        BadBody,
        b"E_BAD_BODY IDENTIFY body too big 2147483647 > 1048576",
    ),
]


@pytest.mark.parametrize(("stream", "cls", "wire"), PARSER_ERRORS)
def test_parser_errors_whole_and_bytewise(
    stream: bytes, cls: type[ProtocolError], wire: bytes
) -> None:
    for chunks in split_ways(stream + b"PING\n"):
        parser = LookupdParser()
        events = feed_all(parser, chunks)
        err = events[-1]
        assert isinstance(err, cls) and err.wire() == wire and err.fatal
        assert not any(isinstance(e, ProtocolError) for e in events[:-1])
        assert parser.error is err
        assert parser.feed(b"PING\n") == []  # dead: nothing more, not even the error again


def test_long_line_refused_before_its_newline_arrives() -> None:
    parser = LookupdParser(max_line=100)
    assert parser.feed(b"  V1" + b"P" * 100) == []
    (err,) = parser.feed(b"P")
    assert (
        isinstance(err, InvalidError)
        and err.wire() == b"E_INVALID command line longer than 100 bytes"
    )
    assert parser.buffered == 0


def test_oversized_identify_refused_before_the_body_is_buffered() -> None:
    parser = LookupdParser()
    (err,) = parser.feed(b"  V1IDENTIFY\n" + struct.pack(">i", MAX_IDENTIFY_BODY + 1))
    assert isinstance(err, BadBody)
    assert parser.buffered == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.booleans(), st.lists(st.integers(0, 400), max_size=6))
def test_garbage_gives_commands_then_at_most_one_error(
    data: bytes, magic: bool, cuts: list[int]
) -> None:
    stream = (b"  V1" if magic else b"") + data
    parser = LookupdParser(max_line=64, max_body=128)
    events = feed_all(parser, chunked(stream, cuts))
    errors = [e for e in events if isinstance(e, ProtocolError)]
    assert len(errors) <= 1
    if errors:
        assert events[-1] is errors[0] and errors[0].wire().startswith(b"E_")
    assert all(isinstance(e, (Ping, Identify, Register, Unregister, ProtocolError)) for e in events)
    assert parser.buffered <= 4 + 64 + 128
    # the same bytes in one piece give the same events
    again = LookupdParser(max_line=64, max_body=128).feed(stream)
    assert [(type(e), e.wire() if isinstance(e, ProtocolError) else e) for e in again] == [
        (type(e), e.wire() if isinstance(e, ProtocolError) else e) for e in events
    ]


# -- client <-> server round trips -----------------------------------------------------------

COMMANDS = st.one_of(
    st.just(Ping()),
    st.builds(Register, NAME, st.none() | NAME),
    st.builds(Unregister, NAME, st.none() | NAME),
)
INFO = st.dictionaries(
    st.text(max_size=8), st.integers() | st.text(max_size=8) | st.none(), max_size=4
)


def encode(command: LookupCommand) -> bytes:
    if isinstance(command, Ping):
        return encode_ping()
    if isinstance(command, Register):
        return encode_register(command.topic, command.channel)
    assert isinstance(command, Unregister)
    return encode_unregister(command.topic, command.channel)


@settings(max_examples=200, deadline=None)
@given(INFO, st.lists(COMMANDS, max_size=8), st.lists(st.integers(0, 2000), max_size=8))
def test_client_commands_round_trip_through_the_parser(
    info: dict[str, object], commands: list[LookupCommand], cuts: list[int]
) -> None:
    stream = encode_v1_magic() + encode_identify_v1(info) + b"".join(encode(c) for c in commands)
    events = feed_all(LookupdParser(), chunked(stream, cuts))
    assert isinstance(events[0], Identify) and json.loads(events[0].body) == info
    assert events[1:] == commands


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(0, 3000), max_size=8))
def test_response_decoder_round_trip_any_split(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_response(p) for p in payloads)
    decoder = ResponseDecoder()
    got: list[bytes] = []
    for chunk in chunked(stream, cuts):
        got.extend(decoder.feed(chunk))
    assert got == payloads and decoder.buffered == 0


def test_response_decoder_whole_bytewise_and_trailing() -> None:
    stream = encode_response(b"OK") + encode_response(b'{"tcp_port":4160}') + b"\x00\x00"
    for chunks in split_ways(stream):
        decoder = ResponseDecoder()
        got = [p for chunk in chunks for p in decoder.feed(chunk)]
        assert got == [b"OK", b'{"tcp_port":4160}'] and decoder.buffered == 2


@pytest.mark.parametrize("header", [b"\xff\xff\xff\xff", struct.pack(">i", (1 << 20) + 1)])
def test_response_decoder_refuses_bad_sizes_for_good(header: bytes) -> None:
    decoder = ResponseDecoder()
    with pytest.raises(BadResponse) as info:
        decoder.feed(encode_response(b"OK") + header)
    assert isinstance(info.value, ValueError) and isinstance(info.value, BadProtocol)
    with pytest.raises(BadResponse):
        decoder.feed(b"")


def test_error_replies_decode_to_their_classes() -> None:
    decoder = ResponseDecoder()
    payloads = decoder.feed(
        encode_error(BadTopic("REGISTER topic name 'x!' is not valid")) + encode_response(b"OK")
    )
    err = response_error(payloads[0])
    assert isinstance(err, BadTopic) and err.description == "REGISTER topic name 'x!' is not valid"
    assert response_error(payloads[1]) is None
    assert response_error(b'{"version":"1.3.0"}') is None


# -- the IDENTIFY body ----------------------------------------------------------------------

NSQD_INFO = {
    "version": "1.3.0",
    "tcp_port": 4150,
    "http_port": 4151,
    "hostname": "h",
    "broadcast_address": "b",
}


def test_decode_identify_reads_what_nsqd_sends() -> None:
    got = decode_identify(json.dumps({**NSQD_INFO, "topology_zone": "z", "x": [1]}).encode())
    assert got == PeerIdentity("", "h", "b", 4150, 4151, "1.3.0")


def test_decode_identify_json_rules_of_go() -> None:
    body = {**NSQD_INFO, "remote_address": "spoofed"}
    assert decode_identify(json.dumps(body).encode()) == PeerIdentity(
        "spoofed", "h", "b", 4150, 4151, "1.3.0"
    )
    folded = b'{"VERSION":"1","Tcp_Port":1,"HTTP_PORT":2,"Broadcast_Address":"b","hostname":null}'
    assert decode_identify(folded) == PeerIdentity("", "", "b", 1, 2, "1")
    dup = b'{"version":"1","tcp_port":1,"http_port":2,"broadcast_address":"a","broadcast_address":"b"}'
    assert decode_identify(dup) == PeerIdentity("", "", "b", 1, 2, "1")
    kept = b'{"version":"1","tcp_port":1,"http_port":2,"broadcast_address":"a","broadcast_address":null}'
    assert decode_identify(kept) == PeerIdentity("", "", "a", 1, 2, "1")


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"[]",
        b'"x"',
        b"1",
        b'{"tcp_port":1.0}',
        b'{"tcp_port":1e3}',
        b'{"tcp_port":true}',
        b'{"tcp_port":"4150"}',
        b'{"tcp_port":9223372036854775808}',
        b'{"version":1}',
        b'{"hostname":{}}',
        b'{"x":NaN}',
        b'{"x":Infinity}',
        b"{} {}",
        b"\xef\xbb\xbf{}",
        b"[" * 100_000,
    ],
)
def test_decode_identify_refuses_what_go_refuses(body: bytes) -> None:
    err = decode_identify(body)
    assert (
        isinstance(err, BadBody) and err.wire() == b"E_BAD_BODY IDENTIFY failed to decode JSON body"
    )


@pytest.mark.parametrize("missing", ["version", "tcp_port", "http_port", "broadcast_address"])
def test_decode_identify_requires_four_fields(missing: str) -> None:
    for blank in (None, 0 if "port" in missing else ""):
        body = {**NSQD_INFO}
        if blank is None:
            del body[missing]
        else:
            body[missing] = blank
        err = decode_identify(json.dumps(body).encode())
        assert isinstance(err, BadBody) and err.wire() == b"E_BAD_BODY IDENTIFY missing fields"
    assert isinstance(
        decode_identify(json.dumps({**NSQD_INFO, "hostname": ""}).encode()), PeerIdentity
    )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON.map(lambda v: json.dumps(v).encode()), st.binary(max_size=200)))
def test_decode_identify_never_raises(body: bytes) -> None:
    assert isinstance(decode_identify(body), (PeerIdentity, BadBody))


# -- Go's TrimSpace -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "trimmed"),
    [
        (b" \t\r\v\fPING \r", b"PING"),
        ("\u00a0PING\u3000\u0085".encode(), b"PING"),
        (b"\x1cPING\x1f", b"\x1cPING\x1f"),  # Go keeps these, Python's strip would not
        (b"\xffPING\xfe ", b"\xffPING\xfe"),  # invalid UTF-8 is not space
        (b"A B", b"A B"),
        (b"", b""),
    ],
)
def test_go_trim_space(raw: bytes, trimmed: bytes) -> None:
    assert go_trim_space(raw) == trimmed
