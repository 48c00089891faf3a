"""The auth server contract (SPEC 1.11) without a server: decoding the reply as nsqd's Go
code does, nsqd's permission check, and junk replies that must only ever be AuthReplyError."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.protocol.auth import (
    AuthReplyError,
    auth_endpoint,
    parse_auth_reply,
    unauthorized_text,
)

from .protocol_helpers import any_json

NOW = 1_000_000_000_000


def reply(**doc: Any) -> bytes:
    return json.dumps(doc).encode()


def grant(topic: str, channels: list[str], *permissions: str) -> dict[str, Any]:
    return {"topic": topic, "channels": channels, "permissions": list(permissions)}


def test_a_full_reply_and_its_expiry() -> None:
    state = parse_auth_reply(
        reply(
            ttl=30,
            identity="alice",
            identity_url="https://id.example/alice",
            authorizations=[grant("^orders$", [".*"], "publish", "subscribe")],
        ),
        NOW,
    )
    assert (state.ttl, state.identity, state.identity_url) == (
        30,
        "alice",
        "https://id.example/alice",
    )
    assert len(state.authorizations) == 1
    assert state.expires_ns == NOW + 30_000_000_000
    assert not state.is_expired(NOW + 30_000_000_000)
    assert state.is_expired(NOW + 30_000_000_001)


def test_keys_match_case_insensitively_and_unknown_keys_or_nulls_are_ignored() -> None:
    body = (
        b'{"TTL": 5, "Identity": "bob", "identity_url": null, "extra": [1, {"x": 2}],'
        b' "Authorizations": [{"Topic": "t", "CHANNELS": ["c"], "Permissions": ["subscribe"]}]}'
    )
    state = parse_auth_reply(body, NOW)
    assert (state.ttl, state.identity, state.identity_url) == (5, "bob", "")
    assert state.is_allowed("t", "c")


def test_regexes_are_searched_unanchored_as_go_matchstring() -> None:
    state = parse_auth_reply(
        reply(ttl=1, authorizations=[grant("orders", ["arch"], "subscribe")]), NOW
    )
    assert state.is_allowed("eu_orders_1", "the_archive")
    assert not state.is_allowed("payments", "archive")
    assert not state.is_allowed("orders", "live")


def test_publishing_is_the_empty_channel_and_needs_the_publish_permission() -> None:
    only_named = parse_auth_reply(
        reply(ttl=1, authorizations=[grant(".*", ["^x$"], "publish")]), NOW
    )
    assert not only_named.is_allowed("t", ""), "no channel pattern matches the empty channel"
    state = parse_auth_reply(
        reply(
            ttl=1,
            authorizations=[grant("^pub$", [".*"], "publish"), grant("^sub$", [".*"], "subscribe")],
        ),
        NOW,
    )
    assert state.is_allowed("pub", "")
    assert not state.is_allowed("pub", "ch"), "publish does not grant subscribe"
    assert state.is_allowed("sub", "ch")
    assert not state.is_allowed("sub", ""), "subscribe does not grant publish"
    no_channels = parse_auth_reply(reply(ttl=1, authorizations=[grant(".*", [], "publish")]), NOW)
    assert not no_channels.is_allowed("t", "")


def test_zero_authorizations_is_a_valid_reply() -> None:
    """nsqd itself turns it into E_UNAUTHORIZED "AUTH no authorizations found"."""
    for body in (reply(ttl=9), reply(ttl=9, authorizations=None), reply(ttl=9, authorizations=[])):
        state = parse_auth_reply(body, NOW)
        assert state.authorizations == [] and not state.is_allowed("t", "")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>not json</html>", "invalid JSON"),
        (b"", "invalid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'"ttl"', "not a JSON object"),
        (reply(), "invalid TTL 0"),
        (reply(ttl=0), "invalid TTL 0"),
        (reply(ttl=-5), "invalid TTL -5"),
        (reply(ttl=1.5), "not an integer"),
        (reply(ttl=1e3), "not an integer"),
        (reply(ttl="60"), "not an integer"),
        (reply(ttl=True), "not an integer"),
        (reply(ttl=60, identity=7), "identity is not a string"),
        (reply(ttl=60, identity_url=["u"]), "identity_url is not a string"),
        (reply(ttl=60, authorizations={"topic": ".*"}), "authorizations is not an array"),
        (reply(ttl=60, authorizations=["t"]), "authorization is not a JSON object"),
        (reply(ttl=60, authorizations=[grant(".*", [".*"], "admin")]), "unknown permission"),
        (reply(ttl=60, authorizations=[grant("(", [".*"], "publish")]), "unable to compile topic"),
        (reply(ttl=60, authorizations=[grant(".*", ["[z-a]"], "publish")]), "compile channel"),
        (reply(ttl=60, authorizations=[{"topic": 1, "permissions": []}]), "topic is not a string"),
        (reply(ttl=60, authorizations=[{"topic": ".*", "channels": "c"}]), "not an array"),
        (reply(ttl=60, authorizations=[{"topic": ".*", "channels": [1]}]), "not a string"),
        (reply(ttl=60, authorizations=[{"topic": ".*", "permissions": [None, 3]}]), "string"),
        (b"[" * 100_000 + b"]" * 100_000, "invalid JSON"),
    ],
)
def test_unusable_replies_are_auth_reply_errors(body: bytes, reason: str) -> None:
    with pytest.raises(AuthReplyError, match=reason):
        parse_auth_reply(body, NOW)


json_values = any_json(4, 20)
field_values = st.fixed_dictionaries(
    {},
    optional={
        "ttl": json_values,
        "identity": json_values,
        "authorizations": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "topic": st.text(max_size=6) | json_values,
                    "channels": st.lists(st.text(max_size=6), max_size=3) | json_values,
                    "permissions": st.lists(st.sampled_from(["publish", "subscribe", "x"]))
                    | json_values,
                },
            ),
            max_size=3,
        )
        | json_values,
    },
)


@settings(max_examples=150, deadline=None)
@given(st.one_of(json_values.map(json.dumps), field_values.map(json.dumps)))
def test_any_json_is_a_state_or_an_auth_reply_error(text: str) -> None:
    try:
        state = parse_auth_reply(text.encode(), NOW)
    except AuthReplyError:
        return
    assert state.ttl > 0 and state.expires_ns > NOW
    state.is_allowed("topic", "")
    state.is_allowed("topic", "channel")


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_a_state_or_an_auth_reply_error(body: bytes) -> None:
    try:
        parse_auth_reply(body, NOW)
    except AuthReplyError:
        pass


def test_auth_endpoint_and_the_unauthorized_text() -> None:
    assert auth_endpoint("127.0.0.1:4181") == "http://127.0.0.1:4181/auth"
    assert auth_endpoint("https://auth.example/v1/check") == "https://auth.example/v1/check"
    assert (
        unauthorized_text("SUB", "orders", "archive") == 'AUTH failed for SUB on "orders" "archive"'
    )
    assert unauthorized_text("PUB", "t#ephemeral", "") == 'AUTH failed for PUB on "t#ephemeral" ""'
