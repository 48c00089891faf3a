"""Message frames and IDs (SPEC 1.4): golden bytes, ID layout, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqpy.errors import BadMessage, InvalidError
from nsqpy.protocol.frames import FRAME_MESSAGE, FrameDecoder
from nsqpy.protocol.message import (
    FRAME_HEAD_ID,
    FRAME_OVERHEAD,
    MAX_OFFSET,
    MAX_PARTITION,
    MESSAGE_HEADER,
    Message,
    decode_message,
    decode_message_id,
    encode_message_frame,
    encode_message_frames,
    encode_message_id,
    try_decode_message_id,
)


def test_message_frame_golden() -> None:
    frame = encode_message_frame(0x0102030405060708, 3, b"0a1b2c3d4e5f6071", b"hi")
    assert frame == (
        b"\x00\x00\x00\x20"  # size = 4 (type) + 26 (header) + 2 (body) = 32
        b"\x00\x00\x00\x02"  # frame type 2 = message
        b"\x01\x02\x03\x04\x05\x06\x07\x08"  # int64 timestamp ns
        b"\x00\x03"  # uint16 attempts
        b"0a1b2c3d4e5f6071"  # 16 ASCII hex characters of ID
        b"hi"  # body
    )


def test_message_id_layout_partition_top_10_bits_offset_low_54() -> None:
    assert encode_message_id(0, 0) == b"0000000000000000"
    assert encode_message_id(0, 255) == b"00000000000000ff"
    assert encode_message_id(1, 0) == b"0040000000000000"  # 1 << 54
    assert encode_message_id(MAX_PARTITION, MAX_OFFSET) == b"ffffffffffffffff"
    assert decode_message_id(b"0040000000000005") == (1, 5)


@pytest.mark.parametrize(("partition", "offset"), [(-1, 0), (1024, 0), (0, -1), (0, 1 << 54)])
def test_message_id_out_of_range_values_are_refused(partition: int, offset: int) -> None:
    with pytest.raises(ValueError):
        encode_message_id(partition, offset)


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"0123456789abcde",  # 15 chars
        b"0123456789abcdef0",  # 17 chars
        b"0123456789ABCDEF",  # upper case is not our form
        b"0x23456789abcdef",
        b"0_23456789abcdef",
        b"+123456789abcdef",
        b" 123456789abcdef",
        b"0123456789abcdeg",
    ],
)
def test_decode_message_id_refuses_anything_but_16_lowercase_hex(bad: bytes) -> None:
    assert try_decode_message_id(bad) is None
    with pytest.raises(InvalidError) as info:
        decode_message_id(bad)
    assert info.value.wire() == b"E_INVALID invalid message ID"
    assert info.value.fatal


@given(st.integers(0, MAX_PARTITION), st.integers(0, MAX_OFFSET))
def test_message_id_round_trip(partition: int, offset: int) -> None:
    msg_id = encode_message_id(partition, offset)
    assert len(msg_id) == 16
    assert decode_message_id(msg_id) == (partition, offset)


def test_decode_message_needs_the_26_byte_header() -> None:
    with pytest.raises(BadMessage):
        decode_message(b"x" * (MESSAGE_HEADER - 1))
    assert decode_message(b"\x00" * 8 + b"\x00\x01" + b"a" * 16) == Message(0, 1, b"a" * 16, b"")


messages = st.tuples(
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.integers(0, 0xFFFF),
    st.binary(min_size=16, max_size=16),
    st.binary(max_size=300),
)


@given(st.lists(messages, max_size=6), st.integers(1, 40))
def test_message_frames_round_trip_through_the_frame_decoder(
    items: list[tuple[int, int, bytes, bytes]], step: int
) -> None:
    stream = b"".join(encode_message_frame(*item) for item in items)
    assert encode_message_frames(items) == stream
    decoder = FrameDecoder()
    frames: list[tuple[int, bytes]] = []
    for i in range(0, len(stream), step):
        frames += decoder.feed(stream[i : i + step])
    assert [t for t, _ in frames] == [FRAME_MESSAGE] * len(items)
    decoded = [decode_message(data) for _, data in frames]
    assert [(m.timestamp, m.attempts, m.id, m.body) for m in decoded] == items


@given(st.integers(0, 2**63 - 1), st.integers(0, 65535), st.integers(0, MAX_OFFSET), st.binary())
def test_inline_frame_form_matches_encode_message_frame(
    ts: int, attempts: int, offset: int, body: bytes
) -> None:
    msg_id = encode_message_id(3, offset)
    inline = FRAME_HEAD_ID.pack(FRAME_OVERHEAD + len(body), 2, ts, attempts, msg_id) + body
    assert inline == encode_message_frame(ts, attempts, msg_id, body)
