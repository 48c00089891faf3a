"""Topic and channel names (SPEC 1.9)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqpy.protocol.names import (
    MAX_NAME_LENGTH,
    is_ephemeral,
    valid_channel_name,
    valid_name_bytes,
    valid_topic_name,
)


@pytest.mark.parametrize(
    "name", ["a", "A.b_c-9", "x" * 64, "t#ephemeral", "x" * 54 + "#ephemeral", "..", "-"]
)
def test_valid(name: str) -> None:
    assert valid_topic_name(name) and valid_channel_name(name)
    assert valid_name_bytes(name.encode())


@pytest.mark.parametrize(
    "name",
    [
        "",
        "x" * 65,
        "x" * 55 + "#ephemeral",
        "a b",
        "a\n",
        "a#",
        "t#eph",
        "#ephemeral",
        "a#Ephemeral",
        "a#ephemeral#ephemeral",
        "é",
        "a/b",
        "a:b",
        "t\u212a",
    ],
)
def test_invalid(name: str) -> None:
    assert not valid_topic_name(name) and not valid_channel_name(name)


def test_ephemeral() -> None:
    assert is_ephemeral("c#ephemeral")
    assert not is_ephemeral("c")


@given(st.text(max_size=70))
def test_str_and_bytes_rules_agree(name: str) -> None:
    raw = name.encode("utf-8", "surrogatepass")
    assert valid_topic_name(name) == valid_name_bytes(raw)
    if valid_topic_name(name):
        assert len(raw) <= MAX_NAME_LENGTH
