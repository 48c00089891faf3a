"""TCP protocol V1 against an in-process nsqlookupd: conversations read like wire transcripts."""

from __future__ import annotations

import json
import socket
import struct

import pytest

from nsqpy.lookupd.app import NsqLookupd
from nsqpy.lookupd.registry import CLIENT_REGISTRATION, Registration
from nsqpy.protocol.limits import MAX_LINE_LENGTH
from nsqpy.protocol.lookupd import (
    MAX_IDENTIFY_BODY,
    encode_identify_v1,
    encode_ping,
    encode_register,
    encode_unregister,
    encode_v1_magic,
)
from nsqpy.testing import FakeClock, eventually

from .helpers import LookupWire, identify_raw, make_opts, peer_info


def producer_ids(lookupd: NsqLookupd, topic: str) -> list[str]:
    found = lookupd.registry.lookup(topic)
    assert found is not None, topic
    return [p.id for p in found[1]]


async def test_full_conversation(lookupd: NsqLookupd) -> None:
    wire = await LookupWire.connect(lookupd.tcp_port, magic=False)
    await wire.send(encode_v1_magic())
    assert await wire.request(encode_ping()) == b"OK"  # PING before IDENTIFY is fine
    reply = await wire.request(encode_identify_v1(peer_info()))
    assert json.loads(reply) == {
        "broadcast_address": "127.0.0.1",
        "hostname": socket.gethostname(),
        "http_port": lookupd.http_port,
        "partitions": True,  # (nsqpy's PARTITIONS taken; nsqd ignores fields it does not know)
        "tcp_port": lookupd.tcp_port,
        "version": "1.3.0",
    }
    assert list(json.loads(reply)) == sorted(json.loads(reply))  # Go marshals maps sorted
    assert await wire.request(encode_register("t", "c")) == b"OK"
    assert await wire.request(encode_register("t2")) == b"OK"
    me = wire.local_address
    found = lookupd.registry.lookup("t")
    assert found is not None
    channels, (peer,) = found
    assert channels == ["c"]
    assert (peer.id, peer.remote_address, peer.broadcast_address) == (me, me, "10.0.0.1")
    assert (peer.hostname, peer.tcp_port, peer.http_port, peer.version) == (
        "nsqd-host",
        4150,
        4151,
        "1.3.0",
    )
    assert await wire.request(encode_unregister("t", "c")) == b"OK"
    assert lookupd.registry.lookup("t") == (["c"], [peer])
    assert await wire.request(encode_unregister("t")) == b"OK"
    assert lookupd.registry.lookup("t") == (["c"], [])
    assert await wire.request(b"PING\r\n") == b"OK"
    await wire.close()
    await eventually(lambda: lookupd.registry.db.lookup_registrations(me) == [])
    assert lookupd.registry.lookup("t2") == ([], [])  # registrations stay, producers go


async def test_ping_keeps_a_producer_active(lookupd: NsqLookupd, clock: FakeClock) -> None:
    wire = await LookupWire.identified(lookupd.tcp_port)
    assert await wire.request(b"REGISTER t\n") == b"OK"
    clock.advance_ms(300_001)
    assert producer_ids(lookupd, "t") == []
    assert await wire.request(b"PING\n") == b"OK"
    assert producer_ids(lookupd, "t") == [wire.local_address]


async def test_params_split_on_single_spaces_and_empty_channel_means_none(
    lookupd: NsqLookupd,
) -> None:
    wire = await LookupWire.identified(lookupd.tcp_port)
    assert await wire.request(b"  REGISTER t  c \t\r\n") == b"OK"  # channel param is ""
    assert lookupd.registry.channels("t") == []
    assert await wire.request(b"REGISTER t c extra ignored\n") == b"OK"
    assert lookupd.registry.channels("t") == ["c"]
    await wire.send(b"IDENTIFYx\n")  # verbs match exactly
    await wire.expect_closed()
    assert wire.replies == [b"E_INVALID invalid command IDENTIFYx"]


ERRORS = [
    # (identify first?, bytes sent, the one error reply)
    (False, b"  V2", b"E_BAD_PROTOCOL"),
    (False, b"GET / HTTP/1.1\r\n", b"E_BAD_PROTOCOL"),
    (False, b"  V1HELLO\n", b"E_INVALID invalid command HELLO"),
    (False, b"  V1ping\n", b"E_INVALID invalid command ping"),
    (False, b"  V1\n", b"E_INVALID invalid command "),
    (False, b"  V1\xff\xfe\x00\n", b"E_INVALID invalid command \xff\xfe\x00"),
    (False, b"  V1REGISTER t\n", b"E_INVALID client must IDENTIFY"),
    (False, b"  V1UNREGISTER t c\n", b"E_INVALID client must IDENTIFY"),
    (False, b"  V1REGISTER\n", b"E_INVALID client must IDENTIFY"),
    (
        False,
        b"  V1" + identify_raw(b"{not json"),
        b"E_BAD_BODY IDENTIFY failed to decode JSON body",
    ),
    (False, b"  V1" + identify_raw(b""), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (False, b"  V1" + identify_raw(b"[]"), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (
        False,
        b"  V1" + identify_raw(b'{"tcp_port":"4150"}'),
        b"E_BAD_BODY IDENTIFY failed to decode JSON body",
    ),
    (False, b"  V1" + identify_raw(b'{"hostname":"h"}'), b"E_BAD_BODY IDENTIFY missing fields"),
    (
        False,
        b"  V1" + identify_raw(json.dumps(peer_info(tcp_port=0)).encode()),
        b"E_BAD_BODY IDENTIFY missing fields",
    ),
    (False, b"  V1" + identify_raw(b"null"), b"E_BAD_BODY IDENTIFY missing fields"),
    (False, b"  V1IDENTIFY\n" + struct.pack(">i", -1), b"E_BAD_BODY IDENTIFY invalid body size -1"),
    (
        False,
        b"  V1IDENTIFY\n" + struct.pack(">i", MAX_IDENTIFY_BODY + 1),
        f"E_BAD_BODY IDENTIFY body too big {MAX_IDENTIFY_BODY + 1} > {MAX_IDENTIFY_BODY}".encode(),
    ),
    (
        False,
        b"  V1" + b"P" * (MAX_LINE_LENGTH + 1),
        f"E_INVALID command line longer than {MAX_LINE_LENGTH} bytes".encode(),
    ),
    (True, b"IDENTIFY\n", b"E_INVALID cannot IDENTIFY again"),
    (True, b"REGISTER\n", b"E_INVALID REGISTER insufficient number of params"),
    (True, b"UNREGISTER \n", b"E_INVALID UNREGISTER insufficient number of params"),
    (True, b"REGISTER bad!topic\n", b"E_BAD_TOPIC REGISTER topic name 'bad!topic' is not valid"),
    (
        True,
        b"UNREGISTER " + b"x" * 65 + b"\n",
        b"E_BAD_TOPIC UNREGISTER topic name '" + b"x" * 65 + b"' is not valid",
    ),
    (True, b"REGISTER t \xffc\n", b"E_BAD_CHANNEL REGISTER channel name '\xffc' is not valid"),
    (
        True,
        b"UNREGISTER t c#ephemeral#ephemeral\n",
        b"E_BAD_CHANNEL UNREGISTER channel name 'c#ephemeral#ephemeral' is not valid",
    ),
]


@pytest.mark.parametrize(("identify_first", "data", "error"), ERRORS)
async def test_every_error_is_sent_then_the_connection_closes(
    lookupd: NsqLookupd, identify_first: bool, data: bytes, error: bytes
) -> None:
    other = await LookupWire.identified(lookupd.tcp_port)
    assert await other.request(b"REGISTER keep ch\n") == b"OK"
    if identify_first:
        wire = await LookupWire.identified(lookupd.tcp_port)
        assert await wire.request(b"REGISTER mine\n") == b"OK"
    else:
        wire = await LookupWire.connect(lookupd.tcp_port, magic=False)
    await wire.send(data)
    await wire.expect_closed()
    assert wire.replies == [error]
    await eventually(lambda: len(lookupd.connections) == 1)
    # the failed peer left everything; the other peer's registrations are intact
    assert producer_ids(lookupd, "keep") == [other.local_address]
    assert lookupd.registry.channels("keep") == ["ch"]
    assert [p.id for p, _, _ in lookupd.registry.nodes()] == [other.local_address]
    assert await other.request(b"PING\n") == b"OK"


async def test_byte_by_byte_conversation(lookupd: NsqLookupd) -> None:
    wire = await LookupWire.connect(lookupd.tcp_port, magic=False)
    stream = (
        encode_v1_magic()
        + encode_identify_v1(peer_info())
        + encode_register("t", "c")
        + encode_ping()
        + encode_unregister("t", "c")
    )
    for i in range(len(stream)):
        await wire.send(stream[i : i + 1])
    assert json.loads(await wire.read())["tcp_port"] == lookupd.tcp_port
    assert [await wire.read() for _ in range(3)] == [b"OK", b"OK", b"OK"]
    assert producer_ids(lookupd, "t") == [wire.local_address]


async def test_pipelined_commands_answered_in_order_until_an_error(lookupd: NsqLookupd) -> None:
    wire = await LookupWire.connect(lookupd.tcp_port)
    await wire.send(
        identify_raw(json.dumps(peer_info()).encode())
        + b"REGISTER a\nPING\nREGISTER b!\nREGISTER never\n"
    )
    await wire.expect_closed()
    assert len(wire.replies) == 4
    assert wire.replies[1:] == [b"OK", b"OK", b"E_BAD_TOPIC REGISTER topic name 'b!' is not valid"]
    assert lookupd.registry.lookup("never") is None
    assert lookupd.registry.lookup("a") == ([], [])  # registered, then left on disconnect


async def test_garbage_in_the_identify_body_never_harms_others(lookupd: NsqLookupd) -> None:
    other = await LookupWire.identified(lookupd.tcp_port)
    assert await other.request(b"REGISTER t c\n") == b"OK"
    bad = await LookupWire.connect(lookupd.tcp_port)
    await bad.send(b"IDENTIFY\n" + struct.pack(">i", 5000))
    await bad.send(b"\x00\xff" * 2500)  # exactly the announced size, not JSON
    await bad.expect_closed()
    assert bad.replies == [b"E_BAD_BODY IDENTIFY failed to decode JSON body"]
    assert producer_ids(lookupd, "t") == [other.local_address]


async def test_disconnect_removes_only_that_peers_registrations(lookupd: NsqLookupd) -> None:
    a = await LookupWire.identified(lookupd.tcp_port, broadcast_address="a")
    b = await LookupWire.identified(lookupd.tcp_port, broadcast_address="b")
    for wire in (a, b):
        assert await wire.request(b"REGISTER t c\n") == b"OK"
        assert await wire.request(b"REGISTER t e#ephemeral\n") == b"OK"
    a_id = a.local_address
    await a.close()
    await eventually(lambda: lookupd.registry.db.lookup_registrations(a_id) == [])
    assert producer_ids(lookupd, "t") == [b.local_address]
    assert sorted(lookupd.registry.channels("t")) == ["c", "e#ephemeral"]
    regs = lookupd.registry.db.lookup_registrations(b.local_address)
    assert set(regs) == {
        CLIENT_REGISTRATION,
        Registration("topic", "t"),
        Registration("channel", "t", "c"),
        Registration("channel", "t", "e#ephemeral"),
    }


async def test_stop_closes_connections_and_empties_the_registry(clock: FakeClock) -> None:
    daemon = NsqLookupd(make_opts(), clock=clock)
    await daemon.start()
    wire = await LookupWire.identified(daemon.tcp_port)
    assert await wire.request(b"REGISTER t\n") == b"OK"
    await daemon.stop()
    await wire.expect_closed()
    assert daemon.connections == set()
    assert daemon.registry.lookup("t") == ([], [])


async def test_identify_reply_announces_broadcast_ports(clock: FakeClock) -> None:
    daemon = NsqLookupd(make_opts(broadcast_tcp_port=14160, broadcast_http_port=14161), clock=clock)
    await daemon.start()
    try:
        wire = await LookupWire.connect(daemon.tcp_port)
        reply = json.loads(await wire.request(encode_identify_v1(peer_info())))
        assert (reply["tcp_port"], reply["http_port"]) == (14160, 14161)
    finally:
        await LookupWire.close_all()
        await daemon.stop()
