"""DPUBs deferred on arrival stay out of the cursor until the read reaches them.

A channel that lags behind a topic mixing PUB and DPUB defers each DPUB as it arrives (it
counts in ``deferred_count``, not ``depth``) without confirming it ahead of the read: its
cursor keeps no range per DPUB (its file, saved on every save, stays a few bytes; ``depth``
stays cheap), the read skips the DPUB when it reaches it, and a DPUB is delivered once,
from the deferred set, also when that copy was finished before the read came.
"""

from __future__ import annotations

import pytest

from nsqpy.broker.broker import Broker
from nsqpy.testing import FakeClock

from .conftest import HOUR_NS, commit, consumer, finish_all, make_channel

N = 2000  # messages: PUB and DPUB in turn


def publish_mixed(broker: Broker, topic: str, n: int, delay_ns: int, clock: FakeClock) -> None:
    t = broker.topic(topic)
    for i in range(n // 2):
        broker.publish(t, [b"now-%d" % i])
        broker.publish(t, [b"later-%d" % i], clock() + delay_ns)
        if i % 100 == 99:
            commit(broker)
    commit(broker)


@pytest.mark.parametrize("topic", ["t", "e#ephemeral"])
def test_a_lagging_channel_keeps_no_cursor_range_per_dpub(
    broker: Broker, clock: FakeClock, topic: str
) -> None:
    _, group = make_channel(broker, topic)
    part = group.parts[0]
    publish_mixed(broker, topic, N, HOUR_NS, clock)
    assert (group.depth, group.deferred_count) == (N // 2, N // 2)
    assert part.cursor.ranges == []  # was one range per DPUB: 16 bytes each in the file
    assert len(part.cursor.to_bytes()) < 100

    client, sink = consumer(broker, topic, "c", 10)
    most_ranges = 0
    while len(sink.frames) < N // 2:
        finish_all(group, client, clock)
        group.pump(clock())
        most_ranges = max(most_ranges, len(part.cursor.ranges))
    finish_all(group, client, clock)
    group.pump(clock())  # the read reaches the last DPUB
    assert most_ranges <= 10  # bounded by what is in flight, not by the backlog
    assert sink.bodies() == [b"now-%d" % i for i in range(N // 2)]  # no DPUB from the log
    assert (part.cursor.confirmed, part.cursor.ranges) == (N, [])
    assert (group.depth, group.deferred_count) == (0, N // 2)


def test_a_dpub_finished_before_the_read_reaches_it_is_not_delivered_again(
    broker: Broker, clock: FakeClock
) -> None:
    t, group = make_channel(broker)
    for i in range(5):
        broker.publish(t, [b"a%d" % i])
    broker.publish(t, [b"soon"], clock() + 100_000_000)
    for i in range(5):
        broker.publish(t, [b"b%d" % i])
    commit(broker)
    assert (group.depth, group.deferred_count) == (10, 1)
    client, sink = consumer(broker, "t", "c", 2)
    assert sink.bodies() == [b"a0", b"a1"]  # the read is far from the DPUB
    clock.advance_ms(200)
    finish_all(group, client, clock)
    broker.scan()  # due: delivered from the deferred set, then finished
    assert sink.bodies()[2:] == [b"soon", b"a2"]
    finish_all(group, client, clock)
    for _ in range(10):
        group.pump(clock())
        finish_all(group, client, clock)
    broker.scan()
    expected = [b"a0", b"a1", b"soon", b"a2", b"a3", b"a4", *(b"b%d" % i for i in range(5))]
    assert sink.bodies() == expected  # each once
    assert (group.depth, group.deferred_count, group.parts[0].cursor.confirmed) == (0, 0, 11)


def test_a_full_topic_drops_the_oldest_messages_not_the_deferred_ones(
    broker: Broker, clock: FakeClock
) -> None:
    t, group = make_channel(broker)
    publish_mixed(broker, "t", 10, HOUR_NS, clock)  # 5 PUB, 5 DPUB: depth 5
    broker.features.set_max_depth(t, 6, "drop_oldest")
    for i in range(3):
        broker.publish(t, [b"more-%d" % i])
        commit(broker)
    assert (group.depth, group.deferred_count) == (6, 5)
    client, sink = consumer(broker, "t", "c", 20)
    assert sink.bodies() == [b"now-2", b"now-3", b"now-4", b"more-0", b"more-1", b"more-2"]
    finish_all(group, client, clock)
    assert (group.depth, group.deferred_count) == (0, 5)


def test_empty_and_replay_forget_what_was_ahead(broker: Broker, clock: FakeClock) -> None:
    _, group = make_channel(broker)
    publish_mixed(broker, "t", 10, HOUR_NS, clock)
    group.empty(clock())
    assert (group.depth, group.deferred_count) == (0, 0)
    publish_mixed(broker, "t", 4, HOUR_NS, clock)
    assert (group.depth, group.deferred_count) == (2, 2)
    group.reset([(group.parts[0], 0)])  # replay all: the DPUBs are deferred again when read
    assert (group.depth, group.deferred_count) == (14, 0)
    _, sink = consumer(broker, "t", "c", 20)
    assert sink.bodies() == [b"now-%d" % i for i in range(5)] + [b"now-0", b"now-1"]
    assert (group.depth, group.deferred_count) == (0, 7)
