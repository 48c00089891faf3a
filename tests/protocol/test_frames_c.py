"""The C message frame builder (nsqpy.protocol._frames) against the Python reference: the
very same bytes for every message, and the frame decodes to what was put in."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.broker import extensions
from nsqpy.protocol import _frames, message
from nsqpy.protocol.frames import FrameDecoder
from nsqpy.storage.records import EXT


def test_the_extension_is_built_and_used_here() -> None:
    # Built wherever gcc is present (this machine, CI); a silent build failure would only
    # show as slower delivery.
    assert message.message_frame is _frames.message_frame
    assert extensions.stored_ext_frame is _frames.stored_ext_frame


@settings(max_examples=300, deadline=None)
@given(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(0, 0xFFFF),
       st.integers(0, (1 << 64) - 1), st.binary(max_size=2000))  # fmt: skip
def test_c_and_python_frames_are_the_same_bytes(ts: int, attempts: int, id_value: int,
                                                body: bytes) -> None:  # fmt: skip
    frame = _frames.message_frame(ts, attempts, id_value, body)
    assert frame == message.py_message_frame(ts, attempts, id_value, body)
    ((ftype, payload),) = FrameDecoder().feed(frame)
    decoded = message.decode_message(payload)
    assert (ftype, decoded.timestamp, decoded.attempts, decoded.body) == (2, ts, attempts, body)
    assert decoded.id == b"%016x" % id_value


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((0, 1 << 16, 0, b""), OverflowError),
        ((0, -1, 0, b""), OverflowError),
        ((0, 1, -1, b""), OverflowError),
        ((1 << 63, 1, 0, b""), OverflowError),
        ((0, 1, 0, "text"), TypeError),
        ((0, 1, 0), TypeError),
    ],
)
def test_out_of_range_arguments_raise(args: tuple[object, ...], error: type[Exception]) -> None:
    with pytest.raises(error):
        _frames.message_frame(*args)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, (1 << 64) - 1), max_size=50), st.binary(max_size=30))
def test_c_and_python_read_the_same_fin_ids(values: list[int], lead: bytes) -> None:
    buf = bytearray(lead + b"".join(b"FIN %016x\n" % v for v in values))
    start, end = len(lead), len(buf)
    assert _frames.hex_ids(buf, start, end, 21) == values
    assert message.py_hex_ids(buf, start, end, 21) == values


@pytest.mark.parametrize(
    ("buf", "start", "end"),
    [
        (b"FIN 00000000000000zz\n", 0, 21),  # not hex
        (b"FIN 00000000000000AB\n", 0, 21),  # upper case: the parser never passes it
        (b"FIN 0000\n", 0, 21),  # past the end of the buffer
        (b"FIN 0000000000000000\nFIN 00", 0, 23),  # the last line is cut short
    ],
)
def test_hex_ids_refuses_what_is_not_a_run_of_ids(buf: bytes, start: int, end: int) -> None:
    with pytest.raises(ValueError):
        _frames.hex_ids(buf, start, end, 21)
    with pytest.raises(ValueError):  # (a step shorter than a line)
        _frames.hex_ids(b"FIN 0000000000000000\n", 0, 21, 0)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 0xFFFF), st.integers(0, (1 << 64) - 1), st.binary(max_size=300),
       st.integers(0, (1 << 64) - 1), st.binary(max_size=40), st.binary(max_size=300),
       st.booleans())  # fmt: skip
def test_c_and_python_extended_frames_are_the_same_bytes(
    attempts: int, id_value: int, body: bytes, trace_id: int, key: bytes, headers: bytes,
    empty: bool,
) -> None:  # fmt: skip
    stored = b"" if empty else EXT.pack(trace_id, len(key)) + key + headers
    frame = _frames.stored_ext_frame(7, attempts, id_value, body, stored)
    assert frame == extensions.py_stored_ext_frame(7, attempts, id_value, body, stored)
    if frame is None:  # a trace id or key without headers: built from the header object
        assert not empty and not headers
        return
    # what a client with extend_support got before there was a C form
    version, ext = extensions.extension_from(trace_id, key, headers) if not empty else (0, b"")
    assert frame == message.extend_frame(message.py_message_frame(7, attempts, id_value, body),
                                         version, ext)  # fmt: skip
    ((ftype, payload),) = FrameDecoder().feed(frame)
    decoded = message.decode_message(payload, extended=True)
    assert (ftype, decoded.attempts, decoded.body) == (2, attempts, body)
    assert (decoded.ext_version, decoded.ext) == ((4, headers) if stored else (0, b""))


@pytest.mark.parametrize("build", [_frames.stored_ext_frame, extensions.py_stored_ext_frame])
def test_extended_frames_refuse_headers_past_the_length_field(build: object) -> None:
    stored = EXT.pack(1, 0) + b"h" * 0x10000
    with pytest.raises(ValueError, match="65536 bytes"):
        build(0, 1, 0, b"", stored)  # type: ignore[operator]
    assert build(0, 1, 0, b"", EXT.pack(1, 0) + b"h" * 0xFFFF) is not None  # type: ignore[operator]
    assert build(0, 1, 0, b"", b"short") is None  # type: ignore[operator]
