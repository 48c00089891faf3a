"""IDENTIFY (SPEC 1.6): Go-json-like decoding, nsqd's validation, negotiation, the reply."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqpy.errors import BadBody, IdentifyFailed, ProtocolError
from nsqpy.protocol.client_codec import encode_identify_body
from nsqpy.protocol.identify import (
    IdentifyRequest,
    auth_response,
    identify_response,
    negotiate,
    parse_identify,
)
from nsqpy.protocol.limits import Limits

from .protocol_helpers import any_json

L = Limits()
DECODE = b"E_BAD_BODY IDENTIFY failed to decode JSON body"


def test_typical_go_nsq_body() -> None:
    body = encode_identify_body(
        {
            "client_id": "host1",
            "hostname": "host1.example",
            "feature_negotiation": True,
            "heartbeat_interval": 30000,
            "output_buffer_size": 16384,
            "output_buffer_timeout": 250,
            "tls_v1": False,
            "snappy": False,
            "deflate": False,
            "deflate_level": 6,
            "sample_rate": 0,
            "user_agent": "go-nsq/1.1.0",
            "msg_timeout": 0,
            "short_id": "host1",  # unknown keys are ignored
            "long_id": "host1.example",
        }
    )
    req = parse_identify(body, L)
    assert (req.client_id, req.hostname, req.user_agent) == (
        "host1",
        "host1.example",
        "go-nsq/1.1.0",
    )
    assert req.feature_negotiation and req.heartbeat_interval_ms == 30000
    assert req.raw["short_id"] == "host1"


def test_absent_fields_are_go_zero_values() -> None:
    req = parse_identify(b"{}", L)
    assert req == IdentifyRequest(raw={})
    assert req.client_id == ""  # nsqd overwrites client_id with "" when absent


def test_top_level_null_is_accepted_like_go() -> None:
    assert parse_identify(b"null", L).client_id == ""


def test_keys_match_case_insensitively_with_go_folding_and_last_wins() -> None:
    req = parse_identify(
        '{"CLIENT_ID":"a","Client_Id":"b","\u212aEEP":1,"\u017fnappy":true,"heartbeat_interval":null}'.encode(),
        L,
    )
    assert req.client_id == "b"
    assert req.snappy is True  # U+017F folds to "s" in Go
    assert req.heartbeat_interval_ms == 0  # null leaves the zero value


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"[]",
        b'"x"',
        b"1",
        b"{",
        b'{"heartbeat_interval":30000.0}',
        b'{"heartbeat_interval":3e4}',
        b'{"heartbeat_interval":"30000"}',
        b'{"heartbeat_interval":true}',
        b'{"heartbeat_interval":9223372036854775808}',
        b'{"sample_rate":2147483648}',
        b'{"feature_negotiation":1}',
        b'{"feature_negotiation":"true"}',
        b'{"client_id":5}',
        b'{"client_id":["a"]}',
        b'{"x":NaN}',
        b'{"x":Infinity}',
        b"\xef\xbb\xbf{}",  # BOM
        b'{"a":1,}',
        b"[" * 100000,
    ],
)
def test_undecodable_bodies(body: bytes) -> None:
    with pytest.raises(BadBody) as info:
        parse_identify(body, L)
    assert info.value.wire() == DECODE
    assert info.value.fatal


def test_strings_are_cleaned_of_lone_surrogates_and_bad_utf8() -> None:
    req = parse_identify(b'{"client_id":"a\\ud800b","hostname":"h\xffx"}', L)
    assert req.client_id == "a\ufffdb"
    assert req.hostname == "h\ufffdx"
    req.client_id.encode()  # always encodable


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"heartbeat_interval": 999}, "heartbeat interval (999) is invalid"),
        ({"heartbeat_interval": 60001}, "heartbeat interval (60001) is invalid"),
        ({"heartbeat_interval": -2}, "heartbeat interval (-2) is invalid"),
        ({"output_buffer_timeout": 24}, "output buffer timeout (24) is invalid"),
        ({"output_buffer_timeout": 30001}, "output buffer timeout (30001) is invalid"),
        ({"output_buffer_size": 63}, "output buffer size (63) is invalid"),
        ({"output_buffer_size": 65537}, "output buffer size (65537) is invalid"),
        ({"sample_rate": 100}, "sample rate (100) is invalid"),
        ({"sample_rate": -1}, "sample rate (-1) is invalid"),
        ({"msg_timeout": 999}, "msg timeout (999) is invalid"),
        ({"msg_timeout": 900001}, "msg timeout (900001) is invalid"),
        ({"msg_timeout": -1}, "msg timeout (-1) is invalid"),
        # nsqd's order: heartbeat, buffer timeout, buffer size, sample rate, msg timeout
        ({"msg_timeout": 1, "heartbeat_interval": 1}, "heartbeat interval (1) is invalid"),
        (
            {"output_buffer_size": 1, "output_buffer_timeout": 1},
            "output buffer timeout (1) is invalid",
        ),
        ({"sample_rate": 100, "output_buffer_size": 1}, "output buffer size (1) is invalid"),
    ],
)
def test_value_validation(fields: dict[str, int], text: str) -> None:
    with pytest.raises(BadBody) as info:
        parse_identify(encode_identify_body(fields), L)
    assert info.value.wire() == b"E_BAD_BODY IDENTIFY " + text.encode()
    assert info.value.fatal


@pytest.mark.parametrize(
    "fields",
    [
        {"heartbeat_interval": -1},
        {"heartbeat_interval": 1000},
        {"heartbeat_interval": 60000},
        {"output_buffer_timeout": -1, "output_buffer_size": -1},
        {"output_buffer_timeout": 25, "output_buffer_size": 64},
        {"output_buffer_timeout": 30000, "output_buffer_size": 65536},
        {"sample_rate": 99, "msg_timeout": 1000},
        {"msg_timeout": 900000, "deflate_level": 99},
    ],
)
def test_values_at_the_bounds_are_accepted(fields: dict[str, int]) -> None:
    parse_identify(encode_identify_body(fields), L)


def test_snappy_and_deflate_together() -> None:
    both = {"feature_negotiation": True, "snappy": True, "deflate": True}
    with pytest.raises(IdentifyFailed) as info:
        parse_identify(encode_identify_body(both), L)
    assert info.value.wire() == (
        b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
    )
    assert info.value.fatal
    # no negotiation, or one of them disabled on the server: accepted
    parse_identify(encode_identify_body({**both, "feature_negotiation": False}), L)
    neg = negotiate(
        parse_identify(encode_identify_body(both), Limits(snappy=False)), Limits(snappy=False)
    )
    assert neg.deflate and not neg.snappy


def test_negotiated_defaults() -> None:
    neg = negotiate(parse_identify(b"{}", L), L)
    assert neg.heartbeat_interval_ms == 30000
    assert neg.output_buffer_size == 16384
    assert neg.output_buffer_timeout_ms == 250
    assert neg.msg_timeout_ms == 60000
    assert (neg.tls_v1, neg.snappy, neg.deflate, neg.deflate_level) == (False, False, False, 6)


def test_negotiated_specials() -> None:
    req = parse_identify(
        encode_identify_body(
            {"heartbeat_interval": -1, "output_buffer_size": -1, "output_buffer_timeout": 100}
        ),
        L,
    )
    neg = negotiate(req, L)
    assert neg.heartbeat_interval_ms == -1
    assert (neg.output_buffer_size, neg.output_buffer_timeout_ms) == (1, 0)  # -1 forces timeout 0
    neg = negotiate(parse_identify(b'{"output_buffer_timeout":-1}', L), L)
    assert neg.output_buffer_timeout_ms == 0


def test_no_upgrades_without_feature_negotiation() -> None:
    limits = Limits(tls_available=True)
    neg = negotiate(parse_identify(b'{"tls_v1":true,"snappy":true}', limits), limits)
    assert not neg.tls_v1 and not neg.snappy


def test_deflate_level_default_and_clamp() -> None:
    limits = Limits(max_deflate_level=4)
    fields = {"feature_negotiation": True, "deflate": True, "deflate_level": 9}
    assert (
        negotiate(parse_identify(encode_identify_body(fields), limits), limits).deflate_level == 4
    )
    fields["deflate_level"] = 2
    assert (
        negotiate(parse_identify(encode_identify_body(fields), limits), limits).deflate_level == 2
    )
    # without deflate the reply still carries min(6, max)
    assert negotiate(parse_identify(b"{}", limits), limits).deflate_level == 4


def test_identify_response_golden_field_order() -> None:
    limits = Limits(tls_available=True, auth_required=True)
    fields = {
        "feature_negotiation": True,
        "tls_v1": True,
        "snappy": True,
        "msg_timeout": 5000,
        "sample_rate": 10,
        "output_buffer_size": 1024,
        "output_buffer_timeout": 100,
    }
    neg = negotiate(parse_identify(encode_identify_body(fields), limits), limits)
    assert identify_response(neg, limits) == (
        b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":5000,'
        b'"tls_v1":true,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":true,'
        b'"sample_rate":10,"auth_required":true,"output_buffer_size":1024,'
        b'"output_buffer_timeout":100}'
    )


def test_auth_response() -> None:
    assert json.loads(auth_response("me", "https://x", 2)) == {
        "identity": "me",
        "identity_url": "https://x",
        "permission_count": 2,
    }


@given(st.binary(max_size=200))
def test_garbage_bodies_give_only_protocol_errors(body: bytes) -> None:
    try:
        parse_identify(body, L)
    except ProtocolError as err:
        assert err.fatal


json_values = any_json(3, 8)
keys = st.sampled_from(
    ["client_id", "HOSTNAME", "heartbeat_interval", "sample_rate", "tls_v1", "msg_timeout", "x"]
)


@given(st.dictionaries(keys, json_values, max_size=5))
def test_any_json_object_gives_a_request_or_a_protocol_error(fields: dict[str, object]) -> None:
    try:
        req = parse_identify(json.dumps(fields).encode(), L)
    except ProtocolError as err:
        assert err.code in ("E_BAD_BODY", "E_IDENTIFY_FAILED")
    else:
        negotiate(req, L)
