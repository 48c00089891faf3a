"""IDENTIFY feature negotiation against the in-process nsqd: TLS, snappy, deflate, in NSQ's
order, each followed by an OK in the new encoding; refusals; the per-client /stats fields."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nsqpy.broker.stats import stats
from nsqpy.nsqd.server import NsqdServer
from nsqpy.protocol.extend import decode_traced_reply, encode_pub_ext, encode_pub_trace
from nsqpy.protocol.message import decode_message
from nsqpy.testing import identify, pub
from nsqpy.testing.certs import CertFiles

from .conftest import MakeNsqd
from .helpers import SecureWire, client_context


def client_stats(server: NsqdServer) -> list[dict[str, Any]]:
    doc = stats(server.broker)
    out: list[dict[str, Any]] = list(doc.get("producers") or [])  # type: ignore[call-overload]
    for topic in doc["topics"]:  # type: ignore[attr-defined]
        for channel in topic["channels"]:
            out.extend(channel["clients"])
    unique = {c["remote_address"]: c for c in out}  # a client can both publish and subscribe
    return list(unique.values())


async def sub_and_receive(wire: SecureWire, topic: str, body: bytes) -> None:
    await wire.send(f"SUB {topic} ch\n".encode())
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(b"RDY 5\n")
    await wire.send(pub(topic, body))
    frames = [await wire.read_frame(), await wire.read_frame()]
    assert (0, b"OK") in frames
    message = next(data for ftype, data in frames if ftype == 2)
    assert message[26:] == body
    await wire.send(b"FIN " + message[10:26] + b"\n")


@pytest.mark.both_loops
async def test_tls_upgrade_then_pub_sub_and_stats(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(**tls_opts)
    wire = await SecureWire.connect(server.tcp_port)
    settings = await wire.negotiate({"tls_v1": True}, tls=client_context(certs))
    assert settings["tls_v1"] is True and settings["snappy"] is False
    await sub_and_receive(wire, "tls_t", b"secret payload")
    (client,) = client_stats(server)
    assert client["tls"] is True
    assert client["tls_version"] in ("TLS1.2", "TLS1.3")
    assert client["tls_cipher_suite"].startswith("TLS_")
    assert client["tls_negotiated_protocol"] == ""
    assert client["tls_negotiated_protocol_is_mutual"] is True
    assert client["snappy"] is False and client["deflate"] is False
    await wire.close()


@pytest.mark.both_loops
@pytest.mark.parametrize("kind", ["snappy", "deflate"])
async def test_compression_upgrade_sends_ok_compressed(make_nsqd: MakeNsqd, kind: str) -> None:
    server = await make_nsqd()
    wire = await SecureWire.connect(server.tcp_port)
    await wire.send(identify({"feature_negotiation": True, kind: True}))
    _ftype, data = await wire.read_frame()
    assert json.loads(data)[kind] is True
    # The raw bytes after the JSON reply are the compressed OK, not a plain OK frame.
    wire._compress_from_here(kind, 6)
    assert await wire.read_frame() == (0, b"OK")
    after_reply = bytes(wire.raw_seen[8 + len(data) :])
    assert after_reply != b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    if kind == "snappy":
        assert after_reply.startswith(b"\xff\x06\x00\x00sNaPpY")
    body = b"compressible " * 500
    await sub_and_receive(wire, f"{kind}_t", body)
    assert body not in wire.raw_seen
    (client,) = client_stats(server)
    assert client[kind] is True and client["tls"] is False
    await wire.close()


async def test_tls_then_snappy_each_with_its_ok(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(**tls_opts)
    wire = await SecureWire.connect(server.tcp_port)
    settings = await wire.negotiate({"tls_v1": True, "snappy": True}, tls=client_context(certs))
    assert settings["tls_v1"] and settings["snappy"]
    await sub_and_receive(wire, "both_t", b"x" * 3000)
    (client,) = client_stats(server)
    assert client["tls"] is True and client["snappy"] is True
    await wire.close()


async def test_deflate_level_is_clamped_to_max_deflate_level(make_nsqd: MakeNsqd) -> None:
    server = await make_nsqd(max_deflate_level=3)
    wire = await SecureWire.connect(server.tcp_port)
    settings = await wire.negotiate({"deflate": True, "deflate_level": 9})
    assert settings["deflate"] is True
    assert settings["deflate_level"] == 3 and settings["max_deflate_level"] == 3
    await sub_and_receive(wire, "deflate_lvl", b"abc" * 100)
    await wire.close()


async def test_snappy_and_deflate_together_are_refused(make_nsqd: MakeNsqd) -> None:
    server = await make_nsqd()
    wire = await SecureWire.connect(server.tcp_port)
    await wire.send(identify({"feature_negotiation": True, "snappy": True, "deflate": True}))
    assert await wire.read_frame() == (
        1,
        b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression",
    )
    await wire.expect_closed()


async def test_no_feature_negotiation_means_ok_and_no_upgrade(
    make_nsqd: MakeNsqd, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(**tls_opts)
    wire = await SecureWire.connect(server.tcp_port)
    await wire.send(identify({"tls_v1": True, "snappy": True}))
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(pub("plain_t", b"hi"))
    assert await wire.read_frame() == (0, b"OK")
    await wire.close()


async def test_features_the_server_lacks_or_disabled_are_not_negotiated(
    make_nsqd: MakeNsqd,
) -> None:
    server = await make_nsqd(snappy=False, deflate=False)
    wire = await SecureWire.connect(server.tcp_port)
    settings = await wire.negotiate({"tls_v1": True, "snappy": True, "deflate": True})
    assert (settings["tls_v1"], settings["snappy"], settings["deflate"]) == (False, False, False)
    assert settings["auth_required"] is False
    await wire.send(pub("plain_t", b"hi"))
    assert await wire.read_frame() == (0, b"OK")
    await wire.close()


async def test_tls_required_refuses_commands_until_upgraded(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any]
) -> None:
    server = await make_nsqd(tls_required="tcp-https", **tls_opts)
    plain = await SecureWire.connect(server.tcp_port)
    await plain.send(pub("t", b"x"))
    assert await plain.read_frame() == (1, b"E_INVALID cannot PUB in current state (TLS required)")
    await plain.expect_closed()
    wire = await SecureWire.connect(server.tcp_port)
    await wire.negotiate({"tls_v1": True}, tls=client_context(certs))
    await wire.send(pub("t", b"x"))
    assert await wire.read_frame() == (0, b"OK")
    await wire.close()


async def test_publish_before_identify_gets_its_ok_in_plain_text_first(
    make_nsqd: MakeNsqd,
) -> None:
    server = await make_nsqd()
    wire = await SecureWire.connect(server.tcp_port)
    # Pipelined: PUB's OK waits for the group commit, IDENTIFY's reply and upgrade after it.
    await wire.send(pub("early", b"x") + identify({"feature_negotiation": True, "snappy": True}))
    assert await wire.read_frame() == (0, b"OK")
    _ftype, data = await wire.read_frame()
    assert json.loads(data)["snappy"] is True
    wire._compress_from_here("snappy", 6)
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(pub("early", b"y"))
    assert await wire.read_frame() == (0, b"OK")
    await wire.close()


async def test_bytes_pipelined_after_identify_are_read_in_the_new_encoding(
    make_nsqd: MakeNsqd,
) -> None:
    import zlib

    server = await make_nsqd()
    wire = await SecureWire.connect(server.tcp_port)
    z = zlib.compressobj(6, zlib.DEFLATED, -15)
    piped = z.compress(pub("piped", b"z")) + z.flush(zlib.Z_SYNC_FLUSH)
    await wire.send(identify({"feature_negotiation": True, "deflate": True}) + piped)
    _ftype, data = await wire.read_frame()
    assert json.loads(data)["deflate"] is True
    wire._compress_from_here("deflate", 6)
    assert await wire.read_frame() == (0, b"OK")
    assert await wire.read_frame() == (0, b"OK")  # the pipelined PUB
    await wire.close()


@pytest.mark.parametrize("kind", ["snappy", "deflate"])
async def test_extensions_over_tls_and_compression(
    make_nsqd: MakeNsqd, certs: CertFiles, tls_opts: dict[str, Any], kind: str
) -> None:
    """youzan's commands after the TLS and compression upgrades: PUB_EXT/PUB_TRACE into
    a partitioned topic, SUB_ORDERED with extend_support gets extended frames (through the
    connection's output buffer) in order."""
    server = await make_nsqd(**tls_opts)
    server.broker.create_topic("x", 2)
    wire = await SecureWire.connect(server.tcp_port)
    fields = {"tls_v1": True, kind: True, "extend_support": True}
    settings = await wire.negotiate(fields, tls=client_context(certs))
    assert settings["tls_v1"] is True and settings[kind] is True
    await wire.send(encode_pub_ext("x", {"app": "a"}, b"one", partition=1))
    assert await wire.read_frame() == (0, b"OK")
    await wire.send(encode_pub_trace("x", 42, b"two", partition=1))
    ftype, data = await wire.read_frame()
    assert ftype == 0 and decode_traced_reply(data)[1:3] == (42, 1)
    await wire.send(b"SUB_ORDERED x c\nRDY 5\n")
    assert await wire.read_frame() == (0, b"OK")
    # the first channel gets what the topic kept, in order, then what follows
    await wire.send(encode_pub_ext("x", {"app": "b"}, b"three", partition=1))
    await wire.send(encode_pub_trace("x", 43, b"four", partition=1))
    got: list[tuple[bytes, Any]] = []
    while len(got) < 4:
        ftype, data = await wire.read_frame()
        if ftype == 2:
            msg = decode_message(data, extended=True, detail=True)
            got.append((msg.body, json.loads(msg.ext)))
            await wire.send(b"FIN " + msg.id + b"\n")
        else:
            assert ftype == 0, data
    assert got == [
        (b"one", {"app": "a"}),
        (b"two", {"##trace_id": "42"}),
        (b"three", {"app": "b"}),
        (b"four", {"##trace_id": "43"}),
    ]
    await wire.close()
