"""V2 frames (SPEC 1.3, 1.6a): golden bytes, the client FrameDecoder, split feeding."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqpy.errors import BadProtocol, FinFailed, InvalidError, ProtocolError
from nsqpy.protocol.frames import (
    CLOSE_WAIT_FRAME,
    FRAME_ERROR,
    FRAME_MESSAGE,
    FRAME_RESPONSE,
    HEARTBEAT_FRAME,
    MAGIC_V2,
    OK_FRAME,
    BadFrame,
    FrameDecoder,
    decode_error,
    encode_error,
    encode_frame,
    encode_response,
)

from .protocol_helpers import split_at


def test_magic_is_two_spaces_v_2() -> None:
    assert bytes([0x20, 0x20, 0x56, 0x32]) == MAGIC_V2


def test_ok_frame_golden() -> None:
    assert OK_FRAME == (
        b"\x00\x00\x00\x06"  # size = 4 (type) + 2 (data)
        b"\x00\x00\x00\x00"  # frame type 0 = response
        b"OK"  # 4F 4B
    )


def test_heartbeat_frame_golden() -> None:
    assert HEARTBEAT_FRAME == (
        b"\x00\x00\x00\x0f"  # size = 4 + 11
        b"\x00\x00\x00\x00"  # response
        b"_heartbeat_"
    )


def test_close_wait_frame_golden() -> None:
    assert CLOSE_WAIT_FRAME == (
        b"\x00\x00\x00\x0e"  # size = 4 + 10
        b"\x00\x00\x00\x00"  # response
        b"CLOSE_WAIT"
    )


def test_error_frame_golden() -> None:
    frame = encode_error(InvalidError("invalid command FOO"))
    assert frame == (
        b"\x00\x00\x00\x21"  # size = 4 + 29
        b"\x00\x00\x00\x01"  # frame type 1 = error
        b"E_INVALID invalid command FOO"
    )


def test_error_frame_without_description_is_the_bare_code() -> None:
    assert encode_error(BadProtocol()) == b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL"


def test_encode_frame_counts_the_type_field_in_the_size() -> None:
    assert encode_frame(FRAME_MESSAGE, b"abc") == b"\x00\x00\x00\x07\x00\x00\x00\x02abc"
    assert encode_response(b"") == b"\x00\x00\x00\x04\x00\x00\x00\x00"


def test_decode_error_maps_codes_to_classes() -> None:
    err = decode_error(b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight")
    assert isinstance(err, FinFailed)
    assert not err.fatal
    assert err.description == "FIN 0123456789abcdef failed ID not in flight"


STREAM = OK_FRAME + HEARTBEAT_FRAME + encode_error(InvalidError("x")) + CLOSE_WAIT_FRAME
EXPECTED = [
    (FRAME_RESPONSE, b"OK"),
    (FRAME_RESPONSE, b"_heartbeat_"),
    (FRAME_ERROR, b"E_INVALID x"),
    (FRAME_RESPONSE, b"CLOSE_WAIT"),
]


def test_decoder_whole_stream() -> None:
    assert FrameDecoder().feed(STREAM) == EXPECTED


def test_decoder_byte_by_byte() -> None:
    decoder = FrameDecoder()
    frames: list[tuple[int, bytes]] = []
    for i in range(len(STREAM)):
        frames += decoder.feed(STREAM[i : i + 1])
    assert frames == EXPECTED
    assert decoder.buffered == 0


def test_decoder_keeps_trailing_bytes_for_the_next_feed() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(OK_FRAME + HEARTBEAT_FRAME[:5]) == [(FRAME_RESPONSE, b"OK")]
    assert decoder.buffered == 5
    assert decoder.feed(HEARTBEAT_FRAME[5:]) == [(FRAME_RESPONSE, b"_heartbeat_")]


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"\x00\x00\x00\x03\x00\x00\x00\x00", "invalid frame size 3"),
        (b"\xff\xff\xff\xff\x00\x00\x00\x00", "invalid frame size -1"),
        (b"\x00\x00\x00\x06\x00\x00\x00\x07OK", "invalid frame type 7"),
        (b"\x00\x00\x10\x01\x00\x00\x00\x00", "invalid frame size 4097"),
    ],
)
def test_decoder_rejects_bad_frames(raw: bytes, text: str) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    with pytest.raises(BadFrame) as info:
        decoder.feed(raw)
    assert info.value.description == text
    assert info.value.code == "E_BAD_PROTOCOL"
    with pytest.raises(BadFrame):  # the stream cannot be resynchronised
        decoder.feed(OK_FRAME)


frames_strategy = st.lists(
    st.tuples(
        st.sampled_from([FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE]), st.binary(max_size=64)
    ),
    max_size=8,
)


@given(st.binary(max_size=200))
def test_garbage_gives_frames_or_a_protocol_error_never_a_crash(data: bytes) -> None:
    decoder = FrameDecoder(max_frame_size=1 << 16)
    try:
        frames = decoder.feed(data)
    except ProtocolError as err:
        assert isinstance(err, BadFrame)
    else:
        assert all(t in (0, 1, 2) for t, _ in frames)


# -- append/pop: one frame at a time (the client stops between frames while negotiating) --


def pop_all(decoder: FrameDecoder) -> list[tuple[int, bytes]]:
    out = []
    while (frame := decoder.pop()) is not None:
        out.append(frame)
    return out


def test_pop_whole_byte_by_byte_and_trailing() -> None:
    decoder = FrameDecoder()
    decoder.append(STREAM)
    assert pop_all(decoder) == EXPECTED
    frames: list[tuple[int, bytes]] = []
    for i in range(len(STREAM)):
        decoder.append(STREAM[i : i + 1])
        frames += pop_all(decoder)
    assert frames == EXPECTED and decoder.buffered == 0
    decoder.append(OK_FRAME + HEARTBEAT_FRAME[:5])
    assert decoder.pop() == (FRAME_RESPONSE, b"OK")
    assert decoder.pop() is None and decoder.buffered == 5


def test_take_rest_hands_back_what_no_frame_used() -> None:
    decoder = FrameDecoder()
    decoder.append(OK_FRAME + b"\x01compressed")
    assert decoder.pop() == (FRAME_RESPONSE, b"OK")
    assert decoder.take_rest() == b"\x01compressed"
    assert decoder.buffered == 0 and decoder.take_rest() == b""
    decoder.append(HEARTBEAT_FRAME)  # the decoder goes on after an upgrade
    assert pop_all(decoder) == [(FRAME_RESPONSE, b"_heartbeat_")]


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"\x00\x00\x00\x03\x00\x00\x00\x00", "invalid frame size 3"),
        (b"\x00\x00\x00\x06\x00\x00\x00\x07OK", "invalid frame type 7"),
        (b"\x00\x00\x10\x01\x00\x00\x00\x00", "invalid frame size 4097"),
    ],
)
def test_pop_rejects_bad_frames_for_good(raw: bytes, text: str) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    decoder.append(OK_FRAME + raw)
    assert decoder.pop() == (FRAME_RESPONSE, b"OK")
    with pytest.raises(BadFrame) as info:
        decoder.pop()
    assert info.value.description == text
    decoder.append(OK_FRAME)
    with pytest.raises(BadFrame):
        decoder.pop()


def append_then_pop(decoder: FrameDecoder, piece: bytes) -> list[tuple[int, bytes]]:
    decoder.append(piece)
    return pop_all(decoder)


@pytest.mark.parametrize("take", [FrameDecoder.feed, append_then_pop], ids=["feed", "append+pop"])
@given(frames_strategy, st.lists(st.integers(min_value=0, max_value=600), max_size=6))
def test_frames_round_trip_under_any_split(
    take: Callable[[FrameDecoder, bytes], list[tuple[int, bytes]]],
    frames: list[tuple[int, bytes]],
    cuts: list[int],
) -> None:
    stream = b"".join(encode_frame(t, d) for t, d in frames)
    decoder = FrameDecoder()
    out: list[tuple[int, bytes]] = []
    for piece in split_at(stream, cuts):
        out += take(decoder, piece)
    assert out == frames


def test_pop_compacts_its_buffer() -> None:
    decoder = FrameDecoder()
    frame = encode_frame(FRAME_MESSAGE, b"m" * 1000)
    for _ in range(200):  # 200 kB through one decoder, one frame at a time
        decoder.append(frame)
        assert decoder.pop() == (FRAME_MESSAGE, b"m" * 1000)
    assert len(decoder._buf) < 2 * len(frame)
