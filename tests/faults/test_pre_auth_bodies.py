"""A large IDENTIFY (or AUTH) from a client that has not AUTHed is refused at its size field.

nsqd decodes IDENTIFY's JSON on its one event loop: megabytes of small objects took about a
second for each such body, during which no other client was served, and when AUTH is
required anybody who can connect could send them (a megabytes-long AUTH secret, URL-encoded
for the auth server, cost a third of a second). Until a client has AUTHed, an IDENTIFY or
AUTH body may be at most ``PRE_AUTH_BODY_SIZE`` bytes: a larger size is the fatal
``E_BAD_BODY ... body too big`` as soon as the size arrives, before any of the body is read.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterator

import pytest

from nsqpy.protocol.limits import MAX_IDENTIFY_BODY_SIZE, PRE_AUTH_BODY_SIZE
from nsqpy.testing import StartNsqd, WireClient
from nsqpy.testing.auth import AuthStub, authed_client, grant, timed_pub

MAX_BODY = 16 * 1024 * 1024  # --max-body-size: what an authenticated client may send


@pytest.fixture
def auth_stub() -> Iterator[AuthStub]:
    with AuthStub() as stub:
        stub.replies = {"probe": grant("^probe$")}
        yield stub


def costly_identify(size: int) -> bytes:
    """An IDENTIFY whose JSON is ``size`` bytes of tiny objects (the slowest to decode)."""
    count = (size - 8) // 3
    body = b'{"x":[' + b",".join([b"{}"] * count) + b"]}"
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("verb", [b"IDENTIFY", b"AUTH"])
def test_a_large_body_before_auth_is_refused_at_its_size(
    start_nsqd: StartNsqd, auth_stub: AuthStub, verb: bytes
) -> None:
    nsqd = start_nsqd(f"--auth-http-address={auth_stub.address}", f"--max-body-size={MAX_BODY}")
    client = WireClient(nsqd.tcp_port, timeout=3.0)
    client.send(b"  V2" + verb + b"\n" + struct.pack(">i", 4_800_000))  # the size, no body
    expected = b"E_BAD_BODY %s body too big 4800000 > %d" % (verb, PRE_AUTH_BODY_SIZE)
    assert client.read_frame() == (1, expected)  # answered with none of the body sent
    assert client.closed()

    small = WireClient(nsqd.tcp_port, timeout=3.0)  # an ordinary IDENTIFY still works
    body = json.dumps({"client_id": "c", "feature_negotiation": True}).encode()
    small.send(b"  V2IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    ftype, data = small.read_frame()
    assert ftype == 0 and json.loads(data)["auth_required"] is True
    authed_client(nsqd.tcp_port, "probe")  # and so does an ordinary AUTH


def test_after_auth_the_identify_limit_is_back_to_its_usual_64_kib(
    start_nsqd: StartNsqd, auth_stub: AuthStub
) -> None:
    nsqd = start_nsqd(f"--auth-http-address={auth_stub.address}")
    client = authed_client(nsqd.tcp_port, "probe")
    body = json.dumps({"user_agent": "u" * 60_000}).encode()
    client.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    assert client.read_frame() == (0, b"OK")
    client.send(b"IDENTIFY\n" + struct.pack(">i", MAX_IDENTIFY_BODY_SIZE + 1))
    expected = b"E_BAD_BODY IDENTIFY body too big %d > %d" % (
        MAX_IDENTIFY_BODY_SIZE + 1,
        MAX_IDENTIFY_BODY_SIZE,
    )
    assert client.read_frame() == (1, expected)


def test_without_auth_a_large_identify_is_refused_at_its_size_too(start_nsqd: StartNsqd) -> None:
    nsqd = start_nsqd(f"--max-body-size={MAX_BODY}")
    client = WireClient(nsqd.tcp_port, timeout=3.0)
    client.send(b"  V2" + costly_identify(4_800_000)[:13])  # the size, then the body trickles
    expected = b"E_BAD_BODY IDENTIFY body too big 4799998 > %d" % MAX_IDENTIFY_BODY_SIZE
    assert client.read_frame() == (1, expected)
    other = WireClient(nsqd.tcp_port, timeout=3.0)
    other.send(b"  V2")
    timed_pub(other, "t")  # (answered OK: nothing of the refused body is waited for)


def test_large_identify_bodies_before_auth_do_not_hold_other_clients(
    start_nsqd: StartNsqd, auth_stub: AuthStub
) -> None:
    nsqd = start_nsqd(f"--auth-http-address={auth_stub.address}", f"--max-body-size={MAX_BODY}")
    probe = authed_client(nsqd.tcp_port, "probe", timeout=5.0)
    timed_pub(probe, "probe")
    command = costly_identify(MAX_BODY - 64)  # decoding it took nsqd several seconds
    answers: list[bytes] = []

    def attack() -> None:
        for _ in range(2):
            try:
                client = WireClient(nsqd.tcp_port, timeout=10.0)
                try:
                    client.send(b"  V2" + command)
                except OSError:
                    pass  # refused and closed before all of it was sent
                answers.append(client.read_frame()[1])
            except OSError:
                answers.append(b"closed")

    attacker = threading.Thread(target=attack)
    attacker.start()
    latencies = []
    while attacker.is_alive():
        latencies.append(timed_pub(probe, "probe"))
    attacker.join()
    assert max(latencies) < 0.5, latencies
    refused = b"E_BAD_BODY IDENTIFY body too big"
    assert all(a.startswith(refused) or a == b"closed" for a in answers), answers
