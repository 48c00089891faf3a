"""Youzan's protocol extensions, sans-IO: golden commands under every split, errors in
nsqd's order, header checking against garbage, extended frames and traced replies.
"""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.errors import (
    BadBody,
    BadExt,
    BadMessage,
    BadPartition,
    BadTopic,
    InvalidError,
    InvalidJsonHeader,
    ProtocolError,
)
from nsqpy.protocol.commands import CommandParser
from nsqpy.protocol.extend import (
    MpubExt,
    MpubTrace,
    PubExt,
    PubTrace,
    decode_traced_reply,
    encode_mpub_ext,
    encode_mpub_partition,
    encode_mpub_trace,
    encode_pub_ext,
    encode_pub_partition,
    encode_pub_trace,
    encode_sub_partition,
    encode_traced_reply,
    headers_from_mapping,
    parse_headers,
)
from nsqpy.protocol.identify import identify_response, negotiate, parse_identify
from nsqpy.protocol.limits import Limits
from nsqpy.protocol.message import (
    JSON_HEADER_EXT_VERSION,
    encode_message_frame,
    extend_frame,
)
from nsqpy.protocol.message import decode_message as decode
from nsqpy.protocol.verbs import (
    Command,
    Fin,
    InternalCreateTopic,
    Mpub,
    Nop,
    Pub,
    Rdy,
    Req,
    Sub,
    Touch,
)

MAGIC = b"  V2"
GOLDEN: list[tuple[str, bytes, Command]] = [
    ("PUB-partition", encode_pub_partition("t", 3, b"x"), Pub("t", b"x", 3)),
    ("PUB-minus-one", b"PUB t -1\n\x00\x00\x00\x01x", Pub("t", b"x")),
    ("MPUB-partition", encode_mpub_partition("t", 1, [b"a", b"bc"]), Mpub("t", [b"a", b"bc"], 1)),
    ("SUB-partition", encode_sub_partition("t", "c", 2), Sub("t", "c", 2)),
    ("SUB_ORDERED", encode_sub_partition("t", "c", ordered=True), Sub("t", "c", -1, True)),
    ("SUB_ORDERED-p", encode_sub_partition("t", "c", 0, ordered=True), Sub("t", "c", 0, True)),
    (
        "SUB_ADVANCED",
        encode_sub_partition("t", "c", advanced=True),
        Sub("t", "c", -1, advanced=True),
    ),
    (
        "SUB_ADVANCED-p",
        encode_sub_partition("t", "c", 1, advanced=True),
        Sub("t", "c", 1, advanced=True),
    ),
    (
        "SUB_ADVANCED-start",
        encode_sub_partition("t", "c", 0, start="timestamp:1700000000"),
        Sub("t", "c", 0, advanced=True, start=b"timestamp:1700000000"),
    ),
    (
        "PUB_EXT",
        b'PUB_EXT t 1\n\x00\x00\x00\x0b\x00\x07{"a":1}xy',  # the header is checked later
        PubExt("t", b'{"a":1}', b"xy", 1),
    ),
    ("PUB_EXT-empty", encode_pub_ext("t", b"", b"b"), PubExt("t", b"", b"b")),
    (
        "MPUB_EXT",
        encode_mpub_ext("t", [({"k": "v"}, b"1"), (b"", b"2")]),
        MpubExt("t", [b'{"k": "v"}', b""], [b"1", b"2"]),
    ),
    ("PUB_TRACE", encode_pub_trace("t", 2**64 - 1, b"m", 0), PubTrace("t", 2**64 - 1, b"m", 0)),
    (
        "MPUB_TRACE",
        encode_mpub_trace("t", [(1, b"a"), (2, b"b")]),
        MpubTrace("t", [1, 2], [b"a", b"b"]),
    ),
    ("INTERNAL_CREATE_TOPIC", b"INTERNAL_CREATE_TOPIC t 2\n", InternalCreateTopic("t", 2)),
    (
        "INTERNAL_CREATE_TOPIC-ext",
        b"INTERNAL_CREATE_TOPIC t 0 T\n",
        InternalCreateTopic("t", 0, True),
    ),
    (
        "INTERNAL_CREATE_TOPIC-noext",
        b"INTERNAL_CREATE_TOPIC t 1 false\n",
        InternalCreateTopic("t", 1),
    ),
]


def parse_all(chunks: list[bytes]) -> list[Command]:
    parser = CommandParser(Limits())
    out: list[Command] = []
    for chunk in chunks:
        parser.feed(chunk)
        out.extend(parser.commands())
    return out


def parse_error(data: bytes) -> ProtocolError:
    parser = CommandParser(Limits())
    parser.feed(MAGIC + data)
    with pytest.raises(ProtocolError) as info:
        list(parser.commands())
    return info.value


@pytest.mark.parametrize(("name", "raw", "expected"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden_extended_commands_under_every_split(
    name: str, raw: bytes, expected: Command
) -> None:
    stream = MAGIC + raw + b"NOP\n"
    ways = {"whole": [stream], "bytewise": [stream[i : i + 1] for i in range(len(stream))]}
    for cut in range(1, len(stream), 3):
        ways[f"cut@{cut}"] = [stream[:cut], stream[cut:]]
    for way, chunks in ways.items():
        assert parse_all(chunks) == [expected, Nop()], (name, way)


@pytest.mark.parametrize(
    ("data", "error", "text"),
    [
        (b"PUB t x\n", BadPartition, 'E_BAD_PARTITION topic partition is not valid: "x"'),
        (b"PUB t 1024\n", BadPartition, None),
        (b"PUB t -2\n", BadPartition, None),
        (b"PUB t 00001\n", BadPartition, None),
        (b"SUB t c +1\n", BadPartition, None),
        (b"MPUB t 1e3\n", BadPartition, None),
        (
            b"PUB_EXT t\n\x00\x00\x00\x02\x00\x00",
            BadBody,
            "E_BAD_BODY invalid body size 2 with ext json header enabled",
        ),
        (b"PUB_EXT t\n\x00\x00\x00\x04\x00\x02{}", BadBody, None),  # header leaves no body
        (b"PUB_EXT t\n\x00\x00\x00\x03\xff\xff{", BadBody, None),
        (b"PUB_TRACE t\n\x00\x00\x00\x08" + bytes(8), BadBody, None),
        (b"PUB_EXT t\n\x00\x00\x00\x00", BadMessage, None),
        (b"PUB_EXT bad!\n", None, None),
        (b"MPUB_TRACE t\n\x00\x00\x00\x0a\x00\x00\x00\x01\x00\x00\x00\x02ab", BadMessage, None),
        (b"MPUB_EXT t\n\x00\x00\x00\x0a\x00\x00\x00\x01\x00\x00\x00\x02\x00\x05", BadBody, None),
        (
            b"INTERNAL_CREATE_TOPIC t\n",
            InvalidError,
            "E_INVALID CREATE_TOPIC insufficient number of parameters",
        ),
        (b"INTERNAL_CREATE_TOPIC t! 0\n", BadTopic, 'E_BAD_TOPIC topic name "t!" is not valid'),
        (b"INTERNAL_CREATE_TOPIC t x\n", BadPartition, None),
        (
            b"INTERNAL_CREATE_TOPIC t -1\n",
            BadPartition,
            "E_BAD_PARTITION partition should not less than 0",
        ),
        (b"INTERNAL_CREATE_TOPIC t 0 yes\n", BadExt, 'E_BAD_EXT topic ext is not valid: "yes"'),
        (b"SUB_ADVANCED t c 0 special:-1 x\n", InvalidError, None),
        (b"SUB_ADVANCED t c x special:-1\n", BadPartition, None),
    ],
)
def test_malformed_extended_commands_are_fatal_errors(
    data: bytes, error: type[ProtocolError] | None, text: str | None
) -> None:
    err = parse_error(data)
    assert err.fatal
    if error is not None:
        assert isinstance(err, error), err
    if text is not None:
        assert str(err) == text


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_garbage_after_extended_verbs_is_a_protocol_error_or_waits(data: bytes) -> None:
    for verb in (
        b"PUB_EXT t",
        b"MPUB_EXT t 1",
        b"PUB_TRACE t",
        b"MPUB_TRACE t",
        b"SUB_ORDERED",
        b"SUB_ADVANCED",
    ):
        parser = CommandParser(Limits())
        parser.feed(MAGIC + verb + data)
        try:
            list(parser.commands())
        except ProtocolError:
            pass


@given(st.binary(max_size=200))
@settings(max_examples=400, deadline=None)
def test_garbage_headers_raise_only_invalid_json_header(raw: bytes) -> None:
    try:
        parse_headers(raw)
    except InvalidJsonHeader as err:
        assert not err.fatal and err.code == "E_INVALID_JSON_HEADER"
    except BadBody as err:  # only for a lone surrogate escape in a value
        assert err.fatal and b"\\u" in raw.lower()


@pytest.mark.parametrize(
    "raw",
    [
        b'{"##partition_key": "\\ud800"}',
        b'{"a": "x\\udfffy"}',
        b'{"a": "ok", "b": "\\udc80"}',
    ],
)
def test_header_values_that_are_not_unicode_are_a_fatal_bad_body(raw: bytes) -> None:
    with pytest.raises(BadBody, match="is not valid Unicode") as caught:
        parse_headers(raw)
    assert caught.value.fatal
    with pytest.raises(BadBody):
        headers_from_mapping({"a": "x\udcff"})  # an HTTP header's undecodable byte
    assert parse_headers(b'{"a": "\\ud83d\\ude00"}').json  # a surrogate pair is fine


_NAMES = st.text(alphabet="abcXYZ019_-#", min_size=1, max_size=12)


@given(st.dictionaries(_NAMES, st.text(max_size=20), max_size=6))
@settings(max_examples=200, deadline=None)
def test_string_headers_are_accepted_as_given(doc: dict[str, str]) -> None:
    doc.pop("##trace_id", None)
    raw = json.dumps(doc).encode()
    headers = parse_headers(raw) if doc else None
    if headers is not None:
        assert headers.json == raw and json.loads(headers.json) == doc
    assert json.loads(headers_from_mapping(doc).json) == doc


def test_reserved_headers() -> None:
    h = parse_headers(b'{"##trace_id": "18446744073709551615", "##partition_key": "k\\u00e9"}')
    assert (h.trace_id, h.partition_key, h.traced) == (2**64 - 1, "ké".encode(), True)
    assert parse_headers(b"").json == b"" and not parse_headers(b"{}").traced
    with pytest.raises(InvalidJsonHeader):
        parse_headers(b"{" + b'"a":"' + b"x" * 70000 + b'"}')  # more than 65535 bytes


def test_extended_frames_round_trip_and_unknown_versions_are_refused() -> None:
    frame = encode_message_frame(123, 2, b"0" * 16, b"body")
    ext = extend_frame(frame, JSON_HEADER_EXT_VERSION, b'{"a":"b"}')
    size, ftype = struct.unpack_from(">ii", ext)
    assert (size, ftype) == (len(ext) - 4, 2)
    msg = decode(ext[8:], extended=True)
    assert (msg.timestamp, msg.attempts, msg.body, msg.ext) == (123, 2, b"body", b'{"a":"b"}')
    plain = extend_frame(frame, 0, b"")
    assert plain[8:][26] == 0 and decode(plain[8:], extended=True).body == b"body"
    assert decode(frame[8:]).body == b"body"  # the plain form is unchanged
    for bad, why in (
        (frame[8:34] + b"\x07rest", "unknown message extension version 7"),
        (frame[8:34] + b"\x04\x00\x10short", "runs past the frame"),
        (frame[8:34] + b"\x04\x00", "shorter than its extension header"),
        (frame[8:34], "no extension version"),
    ):
        with pytest.raises(BadMessage, match=why):
            decode(bad, extended=True)
    with pytest.raises(ValueError):
        extend_frame(frame, 4, b"x" * 70000)


def test_traced_reply_layout() -> None:
    reply = encode_traced_reply(0x0040000000000005, 77, 5, 49)
    assert reply == b"OK" + struct.pack(">QQQI", 0x0040000000000005, 77, 5, 49)
    assert decode_traced_reply(reply) == (0x0040000000000005, 77, 5, 49)
    with pytest.raises(ValueError):
        decode_traced_reply(b"OK")


def test_identify_extend_support_is_a_strict_bool() -> None:
    limits = Limits()
    req = parse_identify(b'{"extend_support": true, "feature_negotiation": true}', limits)
    reply = json.loads(identify_response(negotiate(req, limits), limits))
    assert reply["extend_support"] is True
    with pytest.raises(ProtocolError):
        parse_identify(b'{"extend_support": 1}', limits)


def test_binary_ids_are_read_by_length_however_the_bytes_arrive() -> None:
    """With youzan's binary IDs (an ``extend_support`` client), FIN, REQ and TOUCH carry 16
    raw bytes that may hold a newline, a space or a CR: read by length, as the 16 hex
    digits of the ID's first 8 bytes; other commands as usual, whatever the split."""
    newline_id = struct.pack(">QQ", 10, 7)  # (0x0a: a newline in the ID)
    space_id = struct.pack(">QQ", 32, 0x0D0A2020)  # (a space; a CR, LF in the trace id)
    stream = (MAGIC + b"FIN " + newline_id + b"\nREQ " + space_id + b" 1500\n"
              + b"TOUCH " + newline_id + b"\r\nNOP\nRDY 3\n")  # fmt: skip
    expected = [Fin(b"%016x" % 10), Req(b"%016x" % 32, 1500), Touch(b"%016x" % 10), Nop(), Rdy(3)]
    for chunks in ([stream], [stream[i : i + 1] for i in range(len(stream))]):
        parser = CommandParser(Limits())
        parser.binary_ids = True
        got: list[Command] = []
        for chunk in chunks:
            parser.feed(chunk)
            got.extend(parser.commands())
        assert got == expected
