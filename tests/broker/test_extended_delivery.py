"""An extended frame (``extend_support``) carries the extension kept with the message's
in-flight entry: the delivery path reads each record once, extension included."""

from __future__ import annotations

import pytest

from nsqpy.broker.broker import Broker
from nsqpy.broker.extensions import ExtendSink
from nsqpy.broker.partition import Partition
from nsqpy.protocol.message import decode_message
from nsqpy.storage import Entry
from nsqpy.testing import FakeClock

from .conftest import commit, consumer


def test_extended_frames_take_the_extension_from_the_in_flight_entry(
    broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = broker.topic("t")
    broker.append_entries(
        topic,
        [Entry(b"with", headers=b'{"k":"v"}'), Entry(b"traced", trace_id=7), Entry(b"plain")],
    )
    commit(broker)

    def no_second_read(self: Partition, offset: int) -> object:
        raise AssertionError(f"offset {offset} was read again for its extension")

    monkeypatch.setattr(Partition, "extension", no_second_read)
    client, sink = consumer(broker, "t", "c", 0)
    client.sink = ExtendSink(sink, client)
    client.ready_count = 10
    broker.topics["t"].channels["c"].pump(clock())
    got = [decode_message(frame[8:], extended=True) for frame in sink.frames]
    assert [(m.body, m.ext) for m in got] == [
        (b"with", b'{"k":"v"}'),
        (b"traced", b'{"##trace_id":"7"}'),
        (b"plain", b""),
    ]
