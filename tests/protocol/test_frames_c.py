"""The C message frame builder (nsqpy.protocol._frames) against the Python reference: the
very same bytes for every message, and the frame decodes to what was put in."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.protocol import _frames, message
from nsqpy.protocol.frames import FrameDecoder


def test_the_extension_is_built_and_used_here() -> None:
    # Built wherever gcc is present (this machine, CI); a silent build failure would only
    # show as slower delivery.
    assert message.message_frame is _frames.message_frame


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
