"""The nsqd-to-nsqd replication codec (issue 19): golden bytes field by field, streams fed
whole, byte by byte, in random cuts and with trailing bytes, round trips of random frames,
and garbage (random, mutated, hostile sizes and counts) that must end in a
ReplicationProtocolError or a wait for more bytes, never another exception or a big buffer.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.errors import ProtocolError
from nsqpy.protocol.replication import (
    CHANNEL_DELETED,
    CHANNEL_PAUSED,
    DEFAULT_MAX_FRAME_SIZE,
    E_STALE_EPOCH,
    HEARTBEAT_FRAME,
    MAGIC,
    Ack,
    Append,
    BadMagic,
    Buffer,
    ChannelCursor,
    Cursors,
    CursorsAck,
    EpochEnd,
    EpochQuery,
    ErrorFrame,
    Fetch,
    FrameTooLarge,
    FrameType,
    Heartbeat,
    Hello,
    MalformedFrame,
    ReplicationFrame,
    ReplicationProtocolError,
    ReplicationReader,
    UnknownFrameType,
    cursors_with_seq,
    encode,
    encode_ack,
    encode_append,
    encode_cursors,
    encode_cursors_ack,
    encode_epoch_end,
    encode_epoch_query,
    encode_error,
    encode_fetch,
    encode_hello,
)
from nsqpy.storage import MemoryLog
from nsqpy.storage.epochs import NO_EPOCH, end_offset_for_epoch
from nsqpy.storage.raw import RawBatch
from nsqpy.testing import FakeClock

from .protocol_helpers import split_at, split_ways


def wire(frame: ReplicationFrame) -> bytes:
    return b"".join(encode(frame))


def read_all(
    chunks: Sequence[Buffer],
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    expect_magic: bool = True,
) -> tuple[list[ReplicationFrame], int]:
    """Every frame a fresh reader returns for these chunks, and the bytes it keeps."""
    reader = ReplicationReader(max_frame_size=max_frame_size, expect_magic=expect_magic)
    out: list[ReplicationFrame] = []
    for chunk in chunks:
        reader.feed(chunk)
        out.extend(reader.frames())
    return out, reader.buffered


def read_error(
    data: bytes, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
) -> ReplicationProtocolError:
    reader = ReplicationReader(max_frame_size=max_frame_size)
    reader.feed(data)
    with pytest.raises(ReplicationProtocolError) as caught:
        list(reader.frames())
    return caught.value


# -- golden bytes ---------------------------------------------------------------------------

HELLO = Hello("n1", "nsqpy", "t", 3, 7)
HELLO_BYTES = (
    b"\x00\x00\x00\x15"  # size 21: type byte + 20 bytes of payload
    b"\x01"  # type 1 = HELLO
    b"\x00\x02n1"  # node_id: u16 length 2, UTF-8
    b"\x00\x05nsqpy"  # cluster_id
    b"\x00\x01t"  # topic
    b"\x00\x03"  # partition u16 3
    b"\x00\x00\x00\x07"  # leader_epoch u32 7
)
APPEND = Append(7, 100, 90, 2, b"BATCHES!")
APPEND_HEADER = (
    b"\x00\x00\x00\x21"  # size 33 = 1 + 24 + 8 bytes of batches
    b"\x02"  # type 2 = APPEND
    b"\x00\x00\x00\x07"  # leader_epoch u32 7
    b"\x00\x00\x00\x00\x00\x00\x00\x64"  # start_offset u64 100
    b"\x00\x00\x00\x00\x00\x00\x00\x5a"  # committed_offset u64 90 (the high watermark)
    b"\x00\x00\x00\x02"  # count u32 2 records
)
ACK = Ack(7, 102, 101)
ACK_BYTES = (
    b"\x00\x00\x00\x15"  # size 21
    b"\x03"  # type 3 = ACK
    b"\x00\x00\x00\x07"  # leader_epoch u32 7
    b"\x00\x00\x00\x00\x00\x00\x00\x66"  # end_offset u64 102
    b"\x00\x00\x00\x00\x00\x00\x00\x65"  # durable_offset u64 101 (fsynced)
)
FETCH = Fetch(7, 100, 1 << 20, 5)
FETCH_BYTES = (
    b"\x00\x00\x00\x15"  # size 21
    b"\x04"  # type 4 = FETCH
    b"\x00\x00\x00\x07"  # leader_epoch u32 7
    b"\x00\x00\x00\x00\x00\x00\x00\x64"  # from_offset u64 100
    b"\x00\x10\x00\x00"  # max_bytes u32 1 MiB
    b"\x00\x00\x00\x05"  # last_epoch u32 5 (the epoch of the follower's last record)
)
EPOCH_QUERY = EpochQuery(6)
EPOCH_QUERY_BYTES = b"\x00\x00\x00\x05\x05\x00\x00\x00\x06"  # size 5, type 5, epoch u32 6
EPOCH_END = EpochEnd(6, 95)
EPOCH_END_BYTES = (
    b"\x00\x00\x00\x0d"  # size 13
    b"\x06"  # type 6 = EPOCH_END
    b"\x00\x00\x00\x06"  # epoch u32 6
    b"\x00\x00\x00\x00\x00\x00\x00\x5f"  # end_offset u64 95: the first offset after epoch 6
)
CURSORS = Cursors(
    7, "t", 3, (ChannelCursor("c", 10, CHANNEL_PAUSED, ((12, 14),), ((11, 5 << 30, 2),)),), True, 5
)
CURSORS_BYTES = (
    b"\x00\x00\x00\x4e"  # size 78
    b"\x07"  # type 7 = CURSORS
    b"\x00\x00\x00\x07"  # leader_epoch u32 7
    b"\x00\x01t"  # topic
    b"\x00\x03"  # partition u16 3
    b"\x01"  # full u8: these are all the channels
    b"\x00\x00\x00\x01"  # channels u32 1
    b"\x00\x01c"  # channel name
    b"\x00\x00\x00\x00\x00\x00\x00\x0a"  # confirmed u64 10
    b"\x00\x01"  # flags u16 CHANNEL_PAUSED
    b"\x00\x00\x00\x01"  # ranges u32 1
    b"\x00\x00\x00\x00\x00\x00\x00\x0c"  # range start u64 12
    b"\x00\x00\x00\x00\x00\x00\x00\x0e"  # range end u64 14 (confirmed [12, 14))
    b"\x00\x00\x00\x01"  # deferred u32 1
    b"\x00\x00\x00\x00\x00\x00\x00\x0b"  # offset u64 11 (in the delayed store)
    b"\x00\x00\x00\x01\x40\x00\x00\x00"  # deliver_at u64 5 << 30 ns
    b"\x00\x02"  # attempts u16 2
    b"\x00\x00\x00\x00\x00\x00\x00\x05"  # seq u64 5: this link's fifth CURSORS
)
CURSORS_ACK = CursorsAck(7, 5)
CURSORS_ACK_BYTES = (
    b"\x00\x00\x00\x0d"  # size 13
    b"\x0a"  # type 10 = CURSORS_ACK
    b"\x00\x00\x00\x07"  # leader_epoch u32 7
    b"\x00\x00\x00\x00\x00\x00\x00\x05"  # seq u64 5: the CURSORS taken
)
ERROR = ErrorFrame(7, E_STALE_EPOCH, "leader epoch 9")
ERROR_BYTES = (
    b"\x00\x00\x00\x24"  # size 36
    b"\x08"  # type 8 = ERROR
    b"\x00\x00\x00\x07"  # leader_epoch u32 7 (the sender's)
    b"\x00\x0dE_STALE_EPOCH"  # code
    b"\x00\x0eleader epoch 9"  # text
)
GOLDEN: list[tuple[ReplicationFrame, bytes]] = [
    (HELLO, HELLO_BYTES),
    (APPEND, APPEND_HEADER + b"BATCHES!"),
    (ACK, ACK_BYTES),
    (FETCH, FETCH_BYTES),
    (EPOCH_QUERY, EPOCH_QUERY_BYTES),
    (EPOCH_END, EPOCH_END_BYTES),
    (CURSORS, CURSORS_BYTES),
    (CURSORS_ACK, CURSORS_ACK_BYTES),
    (ERROR, ERROR_BYTES),
    (Heartbeat(), b"\x00\x00\x00\x01\x09"),  # size 1, type 9 = HEARTBEAT, no payload
]
STREAM = MAGIC + b"".join(data for _, data in GOLDEN)
FRAMES = [frame for frame, _ in GOLDEN]


def test_magic_is_nqr_and_version_1() -> None:
    assert MAGIC == b"NQR1"


@pytest.mark.parametrize(("frame", "data"), GOLDEN, ids=lambda v: type(v).__name__)
def test_golden_bytes_of_each_frame(frame: ReplicationFrame, data: bytes) -> None:
    assert wire(frame) == data
    assert read_all([MAGIC + data]) == ([frame], 0)


def test_a_hello_carries_its_senders_incarnation_and_one_without_it_is_still_read() -> None:
    """The incarnation is a string after the fixed fields; a HELLO of an older sender ends
    before it and reads as "" (a rolling upgrade mixes both)."""
    with_it = encode_hello("n1", "nsqpy", "t", 3, 7, "0a1b")
    assert with_it[4:] == HELLO_BYTES[4:] + b"\x00\x040a1b"
    assert int.from_bytes(with_it[:4]) == int.from_bytes(HELLO_BYTES[:4]) + 6
    assert read_all([MAGIC + with_it]) == ([Hello("n1", "nsqpy", "t", 3, 7, "0a1b")], 0)
    assert wire(Hello("n1", "nsqpy", "t", 3, 7, "0a1b")) == with_it
    assert read_all([MAGIC + HELLO_BYTES]) == ([Hello("n1", "nsqpy", "t", 3, 7, "")], 0)


def test_each_encoder_gives_the_golden_bytes() -> None:
    assert encode_hello("n1", "nsqpy", "t", 3, 7) == HELLO_BYTES
    assert encode_append(7, 100, 90, 2, b"BATCHES!") == [APPEND_HEADER, b"BATCHES!"]
    assert encode_ack(7, 102, 101) == ACK_BYTES
    assert encode_fetch(7, 100, 1 << 20, 5) == FETCH_BYTES
    assert encode_epoch_query(6) == EPOCH_QUERY_BYTES
    assert encode_epoch_end(6, 95) == EPOCH_END_BYTES
    assert encode_cursors(7, "t", 3, CURSORS.channels, full=True, seq=5) == CURSORS_BYTES
    unnumbered = encode_cursors(7, "t", 3, CURSORS.channels, full=True)
    assert cursors_with_seq(unnumbered, 5) == CURSORS_BYTES  # (encoded once, several links)
    assert encode_cursors_ack(7, 5) == CURSORS_ACK_BYTES
    assert encode_error(7, E_STALE_EPOCH, "leader epoch 9") == ERROR_BYTES
    assert HEARTBEAT_FRAME == b"\x00\x00\x00\x01\x09"
    assert [int(t) for t in FrameType] == list(range(1, 11))


def test_no_such_epoch_is_all_ones_on_the_wire_and_storage_s_no_epoch_here() -> None:
    log_epochs = [(2, 0), (5, 40)]
    assert end_offset_for_epoch(log_epochs, 1, 90) == NO_EPOCH == (-1, -1)
    data = encode_epoch_end(*end_offset_for_epoch(log_epochs, 1, 90))
    assert data == (
        b"\x00\x00\x00\x0d\x06"  # size 13, EPOCH_END
        b"\xff\xff\xff\xff"  # epoch: none at or below the one asked
        b"\xff\xff\xff\xff\xff\xff\xff\xff"  # end_offset: none
    )
    assert read_all([MAGIC + data]) == ([EpochEnd(-1, -1)], 0)
    answer = EpochEnd(*end_offset_for_epoch(log_epochs, 4, 90))
    assert answer == EpochEnd(2, 40) and read_all([MAGIC + wire(answer)]) == ([answer], 0)


def test_append_never_copies_its_batches() -> None:
    data = bytes(range(256)) * 4
    parts = encode_append(1, 0, 0, 3, data)
    assert parts[1] is data and len(parts) == 2
    view = memoryview(data)[10:20]
    assert encode_append(1, 0, 0, 1, view)[1] is view
    # no batches, count 0: only the committed offset moves; the header alone
    assert encode_append(1, 5, 5, 0, b"") == [
        b"\x00\x00\x00\x19\x02"  # size 25, APPEND
        b"\x00\x00\x00\x01"  # leader_epoch 1
        b"\x00\x00\x00\x00\x00\x00\x00\x05"  # start_offset 5
        b"\x00\x00\x00\x00\x00\x00\x00\x05"  # committed_offset 5
        b"\x00\x00\x00\x00"  # count 0
    ]


def test_append_carries_a_raw_batch_of_the_log_as_is() -> None:
    log = MemoryLog(100, clock=FakeClock())
    log.append_bodies([b"a", b"b"], timestamp=5)
    log.set_epoch(3)
    log.append_bodies([b"c" * 300])
    raw = log.read_raw(0)
    parts = encode_append(3, raw.offset, 2, raw.count, raw.data)
    (frame,), _ = read_all([MAGIC, *parts])
    assert isinstance(frame, Append)
    assert (frame.start_offset, frame.count, frame.next_offset) == (0, 3, 3)
    assert frame.data == raw.data
    received = RawBatch(frame.start_offset, frame.count, frame.data)
    assert [r.body for r in received.records()] == [b"a", b"b", b"c" * 300]


# -- split feeding --------------------------------------------------------------------------


@pytest.mark.parametrize("chunks", split_ways(STREAM).values(), ids=split_ways(STREAM).keys())
def test_golden_stream_under_any_split(chunks: list[bytes]) -> None:
    assert read_all(chunks) == (FRAMES, 0)


@pytest.mark.parametrize("trailing", [b"\x00", b"\x00\x00\x00", HELLO_BYTES[:-1], ACK_BYTES[:5]])
def test_trailing_bytes_of_an_unfinished_frame_wait(trailing: bytes) -> None:
    assert read_all([STREAM + trailing]) == (FRAMES, len(trailing))
    bytewise = [(STREAM + trailing)[i : i + 1] for i in range(len(STREAM) + len(trailing))]
    assert read_all(bytewise) == (FRAMES, len(trailing))


def test_the_magic_may_be_left_to_the_caller() -> None:
    assert read_all([STREAM[4:]], expect_magic=False) == (FRAMES, 0)
    assert read_all([b"NQR"]) == ([], 3)


def test_a_big_frame_then_small_ones_leaves_nothing_behind() -> None:
    data = b"x" * 200_000
    stream = MAGIC + b"".join(encode_append(1, 0, 0, 1, data)) + ACK_BYTES * 3
    chunks = [stream[i : i + 4096] for i in range(0, len(stream), 4096)]
    frames, left = read_all(chunks)
    assert frames == [Append(1, 0, 0, 1, data), ACK, ACK, ACK] and left == 0


# -- errors: each piece of garbage, named ----------------------------------------------------


def test_bad_magic_is_refused_at_its_first_wrong_byte() -> None:
    err = read_error(b"X")
    assert isinstance(err, BadMagic) and err.code == "E_BAD_MAGIC"
    assert "bad magic b'X'" in str(err)
    assert "b'  V2'" in str(read_error(b"  V2IDENTIFY\n"))  # an NSQ client on the rpc port
    assert "version b'2' is not supported" in str(read_error(b"NQR2"))


def test_errors_are_sticky_and_protocol_errors() -> None:
    reader = ReplicationReader()
    reader.feed(b"NOPE")
    with pytest.raises(BadMagic) as first:
        reader.next()
    reader.feed(STREAM)
    with pytest.raises(BadMagic) as again:
        reader.next()
    assert again.value is first.value and isinstance(first.value, ProtocolError)
    assert ErrorFrame.of(first.value, 4) == ErrorFrame(4, "E_BAD_MAGIC", first.value.description)


def test_a_4_gib_size_is_refused_before_any_body() -> None:
    reader = ReplicationReader()
    reader.feed(MAGIC + b"\xff\xff\xff\xff")  # size only: not even the type byte yet
    with pytest.raises(FrameTooLarge) as caught:
        reader.next()
    assert caught.value.code == "E_FRAME_TOO_LARGE"
    assert f"frame size 4294967295 over the limit of {DEFAULT_MAX_FRAME_SIZE}" in str(caught.value)
    assert reader.buffered == 4


def test_the_size_limit_is_inclusive() -> None:
    at_limit = MAGIC + struct.pack(">IB", 64, FrameType.APPEND)
    assert read_all([at_limit], max_frame_size=64) == ([], 5)  # waits for its body
    assert isinstance(read_error(at_limit, max_frame_size=63), FrameTooLarge)
    over = MAGIC + struct.pack(">I", DEFAULT_MAX_FRAME_SIZE + 1)
    assert isinstance(read_error(over), FrameTooLarge)


def test_unknown_type_and_size_zero_are_refused_from_the_header() -> None:
    err = read_error(MAGIC + b"\x00\x10\x00\x00\x63")  # 1 MiB declared, type 99, no body
    assert isinstance(err, UnknownFrameType) and err.code == "E_BAD_FRAME_TYPE"
    assert "unknown frame type 99" in str(err)
    assert isinstance(read_error(MAGIC + b"\x00\x00\x00\x05\x00"), UnknownFrameType)
    err = read_error(MAGIC + b"\x00\x00\x00\x00")
    assert isinstance(err, MalformedFrame) and "size 0" in str(err)


def frame_of(frame_type: int, payload: bytes) -> bytes:
    return MAGIC + struct.pack(">IB", 1 + len(payload), frame_type) + payload


@pytest.mark.parametrize(
    ("frame_type", "payload", "says"),
    [
        (FrameType.HELLO, b"\x00\x05n1", "HELLO node_id (5 bytes at payload byte 2) runs past"),
        (FrameType.HELLO, b"\x00\x02n1\x00", "HELLO cluster_id length"),
        (FrameType.HELLO, b"\x00\x01\xff" + b"\x00\x00" * 2 + b"\x00" * 6, "node_id is not UTF-8"),
        (
            FrameType.HELLO,
            HELLO_BYTES[5:] + b"!",
            "HELLO incarnation length (2 bytes at payload byte 20) runs past",
        ),
        (FrameType.HELLO, HELLO_BYTES[5:] + b"\x00\x01a!", "HELLO has 1 bytes after its fields"),
        (FrameType.APPEND, APPEND_HEADER[5:-1], "APPEND payload is 23 bytes, shorter than its 24"),
        (FrameType.APPEND, APPEND_HEADER[5:], "APPEND count=2 with 0 bytes of batches"),
        (FrameType.APPEND, APPEND_HEADER[5:-4] + bytes(4) + b"x", "count=0 with 1 bytes"),
        (
            FrameType.APPEND,
            struct.pack(">IQQI", 1, 2**64 - 1, 0, 1) + b"x",
            "start_offset=18446744073709551615 + count=1 overflows u64",
        ),
        (FrameType.ACK, ACK_BYTES[5:] + b"\x00", "ACK payload is 21 bytes, expected 20"),
        (FrameType.FETCH, FETCH_BYTES[5:-1], "FETCH payload is 19 bytes, expected 20"),
        (FrameType.EPOCH_QUERY, b"", "EPOCH_QUERY payload is 0 bytes, expected 4"),
        (FrameType.EPOCH_END, EPOCH_END_BYTES[5:9], "EPOCH_END payload is 4 bytes, expected 12"),
        (FrameType.HEARTBEAT, b"\x00", "HEARTBEAT payload is 1 bytes, expected 0"),
        (FrameType.ERROR, ERROR_BYTES[5:-1], "ERROR text (14 bytes at payload byte 21) runs past"),
        (FrameType.CURSORS, CURSORS_BYTES[5:14] + b"\x02" + CURSORS_BYTES[15:], "full=2"),
        (
            FrameType.CURSORS,  # 4 294 967 295 channels declared: refused before any loop
            CURSORS_BYTES[5:15] + b"\xff\xff\xff\xff" + CURSORS_BYTES[19:],
            "CURSORS says 4294967295 channels, which cannot fit in 63 bytes",
        ),
        (
            FrameType.CURSORS,  # 4 294 967 295 ranges declared: refused before reading them
            CURSORS_BYTES[5:32] + b"\xff\xff\xff\xff" + CURSORS_BYTES[36:],
            "channel 'c' 4294967295 ranges (68719476720 bytes at payload byte 31) runs past",
        ),
        (FrameType.CURSORS, CURSORS_BYTES[5:51], "channel 'c' 1 ranges (16 bytes"),
        (
            FrameType.CURSORS,  # 4 294 967 295 deferred entries declared: refused at once
            CURSORS_BYTES[5:52] + b"\xff\xff\xff\xff" + CURSORS_BYTES[56:],
            "channel 'c' 4294967295 deferred (77309411310 bytes at payload byte 51) runs past",
        ),
        (FrameType.CURSORS, CURSORS_BYTES[5:-9], "channel 'c' 1 deferred (18 bytes"),
        (FrameType.CURSORS, CURSORS_BYTES[5:-1], "CURSORS seq"),
        (FrameType.CURSORS_ACK, CURSORS_ACK_BYTES[5:-1], "CURSORS_ACK payload is 11 bytes"),
        (FrameType.CURSORS, CURSORS_BYTES[5:] + b"\x00", "CURSORS has 1 bytes after its fields"),
    ],
)
def test_malformed_payloads_are_named(frame_type: int, payload: bytes, says: str) -> None:
    err = read_error(frame_of(frame_type, payload))
    assert isinstance(err, MalformedFrame) and err.code == "E_BAD_FRAME"
    assert says in str(err)


# -- encoders refuse what their fields cannot hold (a local bug: ValueError) ----------------


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: encode_ack(-1, 0, 0), "ACK leader_epoch=-1 is not an unsigned 32-bit integer"),
        (lambda: encode_fetch(1, 2**64, 0), "FETCH from_offset=18446744073709551616 is not"),
        (lambda: encode_epoch_query(2**32), "EPOCH_QUERY epoch=4294967296"),
        (lambda: encode_epoch_end(1, -5), "EPOCH_END end_offset=-5"),
        (lambda: encode_epoch_end(-2, 0), "EPOCH_END epoch=-2"),
        (
            lambda: encode_hello("n", "c", "t", 70000, 1),
            "HELLO partition=70000 is not an unsigned 16",
        ),
        (lambda: encode_hello("n" * 65536, "c", "t", 1, 1), "HELLO node_id is 65536 bytes UTF-8"),
        (lambda: encode_hello("\ud800", "c", "t", 1, 1), "HELLO node_id is not encodable as UTF-8"),
        (lambda: encode_append(1, 0, 0, 0, b"x"), "APPEND count=0 with 1 bytes of batches"),
        (lambda: encode_append(1, 0, 0, 2, b""), "APPEND count=2 with 0 bytes"),
        (
            lambda: encode_append(1, 2**64 - 1, 0, 1, b"x"),
            "APPEND start_offset=18446744073709551615 + count=1 overflows",
        ),
        (lambda: encode_append(1, 0, -1, 1, b"x"), "APPEND committed_offset=-1"),
        (
            lambda: encode_cursors(1, "t", 0, [ChannelCursor("c", 0, 1 << 16)]),
            "CURSORS channel 'c' flags=65536 is not an unsigned 16-bit integer",
        ),
        (
            lambda: encode_cursors(1, "t", 0, [ChannelCursor("c", 0, 0, ((1, -2),))]),
            "CURSORS channel 'c' range end=-2",
        ),
        (
            lambda: encode_cursors(1, "t", 0, [ChannelCursor("c", 0, 0, (), ((1, 2, 70000),))]),
            "CURSORS channel 'c' attempts=70000 is not an unsigned 16-bit integer",
        ),
        (lambda: encode_error(1, "E" * 70000), "ERROR code is 70000 bytes"),
    ],
)
def test_encoders_name_the_field_that_cannot_be_encoded(
    call: Callable[[], object], says: str
) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(says)):
        call()


def test_encode_refuses_what_is_not_a_frame() -> None:
    with pytest.raises(TypeError, match="not a replication frame"):
        encode(object())  # type: ignore[arg-type]


def test_a_long_error_text_is_cut_at_a_character() -> None:
    text = "é" * 40000  # 80000 bytes of UTF-8
    (frame,), _ = read_all([MAGIC + encode_error(3, "E_X", text)])
    assert frame == ErrorFrame(3, "E_X", "é" * 32767)  # 65534 bytes: no half character
    (frame,), _ = read_all([MAGIC + encode_error(3, "E_X", "bad \udcff")])
    assert frame == ErrorFrame(3, "E_X", "bad ?")


# -- properties -----------------------------------------------------------------------------

U16 = st.integers(0, 2**16 - 1)
U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
TEXT = st.text(max_size=12)
RANGES = st.lists(st.tuples(U64, U64), max_size=3).map(tuple)
CHANNELS = st.lists(st.builds(ChannelCursor, TEXT, U64, U16, RANGES), max_size=3).map(tuple)
APPENDS = st.builds(
    Append, U32, st.integers(0, 2**63), U64, st.integers(1, 2**32 - 1), st.binary(min_size=1)
) | st.builds(Append, U32, U64, U64, st.just(0), st.just(b""))
ANY_FRAME: st.SearchStrategy[ReplicationFrame] = st.one_of(
    st.builds(Hello, TEXT, TEXT, TEXT, U16, U32),
    APPENDS,
    st.builds(Ack, U32, U64, U64),
    st.builds(Fetch, U32, U64, U32, U32),
    st.builds(EpochQuery, U32),
    st.builds(EpochEnd, st.integers(-1, 2**32 - 2), st.integers(-1, 2**64 - 2)),
    st.builds(Cursors, U32, TEXT, U16, CHANNELS, st.booleans()),
    st.builds(ErrorFrame, U32, TEXT, TEXT),
    st.just(Heartbeat()),
)


@given(frames=st.lists(ANY_FRAME, max_size=6), cuts=st.lists(st.integers(0, 2000), max_size=8))
def test_random_frames_round_trip_under_random_cuts(
    frames: list[ReplicationFrame], cuts: list[int]
) -> None:
    stream = MAGIC + b"".join(wire(f) for f in frames)
    assert read_all(split_at(stream, cuts)) == (frames, 0)
    assert read_all(split_at(stream + b"\x00\x00", cuts)) == (frames, 2)


def drain(reader: ReplicationReader, chunks: list[bytes]) -> list[ReplicationFrame]:
    """Feed ``chunks``; every frame read until a protocol error (the only error allowed), and
    after each chunk no more than one unfinished frame kept."""
    out: list[ReplicationFrame] = []
    try:
        for chunk in chunks:
            reader.feed(chunk)
            out.extend(reader.frames())
            assert reader.buffered < 4 + reader.max_frame_size
    except ReplicationProtocolError:
        pass
    return out


@settings(max_examples=500, deadline=None)
@given(
    garbage=st.binary(max_size=300),
    magic=st.booleans(),
    limit=st.sampled_from([8, 64, DEFAULT_MAX_FRAME_SIZE]),
    cuts=st.lists(st.integers(0, 300), max_size=6),
)
def test_garbage_ends_in_a_protocol_error_or_a_wait(
    garbage: bytes, magic: bool, limit: int, cuts: list[int]
) -> None:
    stream = (MAGIC if magic else b"") + garbage
    for frame in drain(ReplicationReader(max_frame_size=limit), split_at(stream, cuts)):
        assert b"".join(encode(frame)) in stream  # whatever was read is what it said


@settings(max_examples=500, deadline=None)
@given(frame_type=st.sampled_from(list(FrameType)), payload=st.binary(max_size=80))
def test_any_payload_decodes_canonically_or_is_refused(frame_type: int, payload: bytes) -> None:
    data = struct.pack(">IB", 1 + len(payload), frame_type) + payload
    frames = drain(ReplicationReader(), [MAGIC + data])
    assert frames == [] or wire(frames[0]) == data  # one way to write each frame


@settings(max_examples=500, deadline=None)
@given(frame=ANY_FRAME, at=st.integers(0), byte=st.integers(0, 255), cut=st.booleans())
def test_a_damaged_frame_is_refused_or_read_as_exactly_its_bytes(
    frame: ReplicationFrame, at: int, byte: int, cut: bool
) -> None:
    payload = bytearray(wire(frame)[5:])
    if payload:
        at %= len(payload)
        if cut:
            del payload[at]
        else:
            payload[at] = byte
    data = struct.pack(">IB", 1 + len(payload), wire(frame)[4]) + payload
    frames = drain(ReplicationReader(), [MAGIC + data])
    assert frames == [] or wire(frames[0]) == data


def test_channel_flags_are_distinct_bits() -> None:
    assert CHANNEL_PAUSED & CHANNEL_DELETED == 0
    (frame,), _ = read_all([MAGIC + wire(Cursors(1, "t", 0, (ChannelCursor("c", 0, 0xFFFF),)))])
    assert isinstance(frame, Cursors) and frame.channels[0].flags == 0xFFFF  # all carried
