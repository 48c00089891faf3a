"""Ordered channels through the wire (in-process nsqd, fake clock): per partition one
message in flight, the next only after FIN; requeues keep the order; consumers share the
partitions, one owner each, and a leaving owner's partitions pass on in order.
"""

from __future__ import annotations

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import AsyncWire, FakeClock, identify

from .conftest import create_topic, err, message, offset_of, partition_of, post, stats, subscribe


async def publish(nsqd: NsqdServer, topic: str, partition: int, count: int, tag: str = "") -> None:
    for i in range(count):
        path = f"/pub?topic={topic}&partition={partition}"
        assert await post(nsqd, path, f"{tag}{partition}-{i}".encode()) == (200, b"OK")


async def test_one_message_in_flight_the_next_after_fin(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "o", 1)
    await publish(nsqd, "o", 0, 4)
    s = await subscribe(nsqd.tcp_port, "SUB_ORDERED o c", rdy=50)
    for i in range(4):
        msg = await message(s)
        assert msg.body == b"0-%d" % i
        assert await s.frame_within(0.15) is None
        await s.send(b"FIN " + msg.id + b"\n")
    doc = await stats(nsqd, "o")
    (channel,) = doc["channels"]
    assert channel["ordered"] is True and channel["partitions"][0]["owner"] == "127.0.0.1"


async def test_requeue_keeps_the_order_and_a_delay_holds_the_partition(
    nsqd: NsqdServer, clock: FakeClock
) -> None:
    await create_topic(nsqd, "rq", 1)
    await publish(nsqd, "rq", 0, 3)
    s = await subscribe(nsqd.tcp_port, "SUB_ORDERED rq c", rdy=10)
    first = await message(s)
    await s.send(b"REQ " + first.id + b" 0\n")
    again = await message(s)
    assert (again.id, again.attempts) == (first.id, 2)
    await s.send(b"REQ " + first.id + b" 5000\n")
    assert await s.frame_within(0.15) is None  # held: nothing passes the requeued message
    clock.advance_ms(5001)
    third = await message(s)
    assert (third.id, third.attempts) == (first.id, 3)
    await s.send(b"FIN " + third.id + b"\n")
    assert (await message(s)).body == b"0-1"


async def test_timeout_redelivers_the_same_message_first(
    nsqd: NsqdServer, clock: FakeClock
) -> None:
    await create_topic(nsqd, "to", 1)
    await publish(nsqd, "to", 0, 2)
    # A short msg_timeout: heartbeats read the same (fake) clock, and a long jump would
    # make the client look dead.
    s = await subscribe(nsqd.tcp_port, "SUB_ORDERED to c", rdy=10, fields={"msg_timeout": 1000})
    first = await message(s)
    clock.advance_ms(1001)
    again = await message(s)
    assert (again.id, again.attempts) == (first.id, 2)


async def test_consumers_share_partitions_one_owner_each(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "sh", 4)
    a = await subscribe(nsqd.tcp_port, "SUB_ORDERED sh c", rdy=10)
    b = await subscribe(nsqd.tcp_port, "SUB_ORDERED sh c", rdy=10)
    for part in range(4):
        await publish(nsqd, "sh", part, 3)
    seen: dict[int, list[int]] = {}  # partition -> offsets in delivery order
    owners: dict[int, set[str]] = {}
    while sum(map(len, seen.values())) < 12:
        outstanding: list[tuple[str, AsyncWire, bytes]] = []
        for name, wire in (("a", a), ("b", b)):
            while True:
                try:
                    msg = await message(wire, timeout=0.2)
                except TimeoutError:
                    break
                outstanding.append((name, wire, msg.id))
        assert outstanding, "delivery stalled"
        parts = [partition_of(msg_id) for _, _, msg_id in outstanding]
        assert len(parts) == len(set(parts)), "two messages of one partition in flight"
        for name, wire, msg_id in outstanding:
            seen.setdefault(partition_of(msg_id), []).append(offset_of(msg_id))
            owners.setdefault(partition_of(msg_id), set()).add(name)
            await wire.send(b"FIN " + msg_id + b"\n")
    assert seen == {p: [0, 1, 2] for p in range(4)}
    assert all(len(names) == 1 for names in owners.values()), owners
    assert sorted(n for names in owners.values() for n in names) == ["a", "a", "b", "b"]


async def test_a_leaving_owner_hands_its_in_flight_message_on_first(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "lv", 1)
    await publish(nsqd, "lv", 0, 3)
    a = await subscribe(nsqd.tcp_port, "SUB_ORDERED lv c", rdy=5)
    b = await subscribe(nsqd.tcp_port, "SUB_ORDERED lv c", rdy=5)
    first = await message(a)
    assert first.body == b"0-0"
    assert await b.frame_within(0.15) is None  # b owns nothing: the only partition is a's
    a.writer.transport.abort()  # the owner dies with its message in flight
    again = await message(b)
    assert (again.id, again.attempts) == (first.id, 2)
    await b.send(b"FIN " + again.id + b"\n")
    assert (await message(b)).body == b"0-1"


async def test_pinned_ordered_consumers_own_only_their_partition(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "pn", 2)
    assert await post(nsqd, "/channel/create?topic=pn&channel=c") == (200, b"")
    await publish(nsqd, "pn", 0, 2)
    await publish(nsqd, "pn", 1, 2)
    one = await subscribe(nsqd.tcp_port, "SUB_ORDERED pn c 1", rdy=5)
    msg = await message(one)
    assert partition_of(msg.id) == 1 and await one.frame_within(0.15) is None
    await one.send(b"FIN " + msg.id + b"\n")
    assert (await message(one)).body == b"1-1"


async def test_set_order_over_http_and_plain_sub_then_delivers_in_order(
    nsqd: NsqdServer,
) -> None:
    await create_topic(nsqd, "ho", 2)
    assert await post(nsqd, "/channel/create?topic=ho&channel=c") == (200, b"")
    for path, code in (
        ("/channel/setorder?topic=ho&channel=c&order=yes", (400, err("INVALID_OPTION"))),
        ("/channel/setorder?topic=ho&channel=c", (400, err("INVALID_OPTION"))),
        ("/channel/setorder?topic=ho&channel=nope&order=true", (404, err("CHANNEL_NOT_FOUND"))),
        ("/channel/setorder?topic=none&channel=c&order=true", (404, err("TOPIC_NOT_FOUND"))),
        ("/channel/setorder?topic=ho&order=true", (400, err("MISSING_ARG_CHANNEL"))),
    ):
        assert await post(nsqd, path) == code, path
    assert not nsqd.broker.topics["ho"].channels["c"].ordered
    assert await post(nsqd, "/channel/setorder?topic=ho&channel=c&order=true") == (200, b"")
    await publish(nsqd, "ho", 0, 2)
    await publish(nsqd, "ho", 1, 2)
    s = await subscribe(nsqd.tcp_port, "SUB ho c", rdy=10)
    got = {(await message(s)).body, (await message(s)).body}
    assert got == {b"0-0", b"1-0"} and await s.frame_within(0.15) is None
    assert await post(nsqd, "/channel/setorder?topic=ho&channel=c&order=false") == (200, b"")
    got = {(await message(s)).body, (await message(s)).body}
    assert got == {b"0-1", b"1-1"}


async def test_ordered_topic_flag_and_sample_rate_refusal(nsqd: NsqdServer) -> None:
    await create_topic(nsqd, "of", 2, "&ordered=true")
    assert await post(nsqd, "/channel/create?topic=of&channel=c") == (200, b"")
    assert nsqd.broker.topics["of"].channels["c"].ordered
    wire = await AsyncWire.connect(nsqd.tcp_port)
    await wire.send(identify({"sample_rate": 50}))
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(b"SUB_ORDERED of c\n")
    frame = await wire.read_frame()
    assert frame == (1, b"E_INVALID order consume is not allowed while sample rate is not 0")
