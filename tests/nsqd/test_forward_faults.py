"""Publishes forwarded to a leader (``nsqd.forward``) that fail or never end (in-process,
loopback).

The TCP side: a connection's reply to a forwarded publish waits, in order, for the
forward's outcome, so EVERY outcome must answer it: the leader's error, a fault of the
forward itself (any exception: the client gets ``E_FAILED_ON_NOT_LEADER``, the fault is
logged once, the commands after it are answered), or nsqd stopping (the forward is
cancelled and answered as exiting). The forward tasks are held by the server until they end
and none is left after its stop. A ``TopicGate`` double stands in for the cluster: every
topic is led elsewhere and ``forward`` does what the test says.

The forwarder side: ``Forwarder.close`` ends a forward waiting for a leader, or for its
leader's answer, at once, and opens no connection after it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from nsqpy.errors import NotLeader
from nsqpy.nsqd import server as server_module
from nsqpy.nsqd.forward import Forwarder, Route
from nsqpy.nsqd.gate import ELSEWHERE
from nsqpy.nsqd.server import NsqdServer
from nsqpy.nsqd.tcp import ConnectionContext, V2Connection
from nsqpy.nsqd.tls import TlsSettings
from nsqpy.protocol.extend import (
    encode_mpub_ext,
    encode_pub_ext,
    encode_pub_trace,
    encode_traced_reply,
)
from nsqpy.testing import AsyncWire, FakeClock, eventually, nsqd_options, pub

HANG = "hang"  # a fault: the forward never ends by itself


class Gate:
    """A cluster in which every topic is led elsewhere; ``forward`` takes its next fault
    (an exception to raise, ``HANG``), or succeeds when none is left."""

    peer_tls: TlsSettings | None = None  # (an insecure cluster)

    def __init__(self) -> None:
        self.faults: list[BaseException | str] = []
        self.calls = 0
        self.commands: list[tuple[bytes, bytes]] = []  # (encoded for partition 3, key)
        self.answer = b"OK"  # what the leader answers a forwarded Youzan form

    def where(self, topic: str, partition: int = -1) -> str:
        return ELSEWHERE

    async def prepare(self, topic: str, *, create: bool = True, partition: int = -1) -> None:
        return None

    async def create_partitions(self, topic: str, count: int) -> None:
        return None

    def cursor_moved(self, topic: str, partition: int = -1) -> None:
        return None

    async def forward(
        self, topic: str, partition: int, bodies: Sequence[bytes], defer_ms: int, key: bytes
    ) -> None:
        self.calls += 1
        fault = self.faults.pop(0) if self.faults else None
        if fault == HANG:
            await asyncio.Event().wait()
        if isinstance(fault, BaseException):
            raise fault

    async def forward_command(
        self, topic: str, partition: int, count: int, encode: Callable[[int], bytes], key: bytes
    ) -> bytes:
        await self.forward(topic, partition, [], 0, key)
        self.commands.append((encode(3), key))
        return self.answer


@dataclasses.dataclass
class Forwarding:
    server: NsqdServer
    gate: Gate
    ctx: ConnectionContext
    port: int  # where connections to the gated node listen


@pytest.fixture
async def forwarding(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Forwarding]:
    """An in-process nsqd plus a listener of connections wired to it as the server wires
    its own, but with ``Gate`` as their cluster."""
    monkeypatch.setattr(server_module, "STOP_GRACE", 0.2, raising=False)
    server = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await server.start()
    listener: asyncio.Server | None = None
    try:
        probe = await AsyncWire.connect(server.tcp_port)
        await eventually(lambda: server.connections, 5, what="the probe connected")
        ctx = dataclasses.replace(next(iter(server.connections)).ctx, cluster=Gate())
        await probe.close()
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(lambda: V2Connection(ctx), "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        assert isinstance(ctx.cluster, Gate)
        yield Forwarding(server, ctx.cluster, ctx, port)
    finally:
        if listener is not None:
            listener.close()
        if server._tcp_server is not None and server._tcp_server.is_serving():
            await asyncio.wait_for(server.stop(), 30)


@pytest.mark.parametrize(
    "fault",
    [RuntimeError("boom"), ConnectionResetError(104, "reset"), TimeoutError(), ValueError("x")],
    ids=lambda e: type(e).__name__,
)
async def test_a_failing_forward_answers_and_the_connection_goes_on(
    forwarding: Forwarding, fault: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    forwarding.gate.faults.append(fault)
    wire = await AsyncWire.connect(forwarding.port)
    with caplog.at_level(logging.ERROR, logger="nsqpy.nsqd"):
        await wire.send(pub("t", b"first") + pub("t", b"second"))
        ftype, data = await wire.read_frame()
        assert ftype == 1 and data.startswith(b"E_FAILED_ON_NOT_LEADER "), data
        assert await wire.read_frame() == (0, b"OK")  # the next command is answered
        await wire.send(b"NOP\n" + pub("t", b"third"))
        assert await wire.read_frame() == (0, b"OK")
    assert forwarding.gate.calls == 3
    failures = [r for r in caplog.records if "forward" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]  # logged once
    await eventually(lambda: len(forwarding.ctx.tasks) == 0, 5, what="no forward task left")


async def test_stop_answers_a_forward_that_never_ends(forwarding: Forwarding) -> None:
    forwarding.gate.faults.append(HANG)
    wire = await AsyncWire.connect(forwarding.port)
    await wire.send(pub("t", b"m"))
    await eventually(lambda: forwarding.gate.calls == 1, 5, what="the forward began")
    await asyncio.wait_for(forwarding.server.stop(), 10)
    ftype, data = await wire.read_frame()
    assert (ftype, data) == (1, b"E_FAILED_ON_NOT_LEADER nsqd is exiting: publish not forwarded")
    await wire.expect_closed()
    assert len(forwarding.ctx.tasks) == 0  # cancelled and awaited by the stop


async def test_the_server_holds_a_forward_task_until_it_ends(forwarding: Forwarding) -> None:
    forwarding.gate.faults.append(HANG)
    wire = await AsyncWire.connect(forwarding.port)
    await wire.send(pub("t", b"m"))
    await eventually(lambda: forwarding.gate.calls == 1, 5, what="the forward began")
    assert len(forwarding.ctx.tasks) == 1
    await wire.send(pub("t", b"m"))  # (its forward succeeds, but answers after the first)
    await eventually(lambda: forwarding.gate.calls == 2, 5, what="the second forward began")
    await eventually(lambda: len(forwarding.ctx.tasks) == 1, 5, what="the second one ended")


# -- Forwarder.close -------------------------------------------------------------------------


@pytest.fixture
async def silent_leader(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[NsqdServer]:
    """An nsqd whose topic ``t`` commits nothing more: a PUB to it is never answered."""
    monkeypatch.setattr(server_module, "STOP_GRACE", 0.1, raising=False)
    server = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await server.start()
    server.broker.topic("t").partitions[0].commit_bound = 0
    yield server
    await asyncio.wait_for(server.stop(), 30)


async def ends_within(publish: asyncio.Task[None], seconds: float) -> BaseException | None:
    started = time.monotonic()
    try:
        await asyncio.wait_for(publish, seconds)
    except TimeoutError:
        raise AssertionError(f"the forward did not end within {seconds}s of close") from None
    except NotLeader as exc:
        assert time.monotonic() - started < seconds
        return exc
    return None


async def test_close_ends_a_forward_waiting_for_its_leader_answer(
    silent_leader: NsqdServer,
) -> None:
    leader = f"127.0.0.1:{silent_leader.tcp_port}"
    forwarder = Forwarder(lambda topic, partition, tried: Route(0, leader), patience=30)
    publish = asyncio.create_task(forwarder.publish("t", -1, [b"m"]))
    log_ = silent_leader.broker.topics["t"].partitions[0].log
    await eventually(lambda: log_.flushed_offset >= 1, 10, what="the leader has the message")
    await forwarder.close()
    assert isinstance(await ends_within(publish, 2.0), NotLeader)
    assert forwarder.in_flight == 0
    assert log_.flushed_offset == 1  # not sent again after close
    assert forwarder._producers == {}


async def test_close_ends_a_forward_waiting_for_a_leader() -> None:
    asked: list[str] = []

    def no_leader(topic: str, partition: int, tried: frozenset[int]) -> None:
        asked.append(topic)

    forwarder = Forwarder(no_leader, patience=30)
    publish = asyncio.create_task(forwarder.publish("t", -1, [b"m"]))
    await eventually(lambda: asked, 5, what="the forward looked for a leader")
    await forwarder.close()
    exc = await ends_within(publish, 2.0)
    assert isinstance(exc, NotLeader)
    with pytest.raises(NotLeader, match="exiting"):  # and a forward after close at once
        await asyncio.wait_for(forwarder.publish("t", -1, [b"m"]), 1)


# -- Youzan's forms -------------------------------------------------------------------------


async def test_a_traced_publish_forwarded_gets_the_leaders_traced_reply(
    forwarding: Forwarding,
) -> None:
    """PUB_TRACE to a node that does not lead goes to the leader, encoded again naming the
    partition asked of it, and the client gets the leader's traced reply as it is."""
    forwarding.gate.answer = encode_traced_reply(7, 42, 100, 50)
    wire = await AsyncWire.connect(forwarding.port)
    await wire.send(encode_pub_trace("t", 42, b"body") + pub("t", b"after"))
    assert await wire.read_frame() == (0, forwarding.gate.answer)
    assert await wire.read_frame() == (0, b"OK")  # (a plain PUB behind it: its own reply)
    assert forwarding.gate.commands[0] == (encode_pub_trace("t", 42, b"body", 3), b"")


async def test_extended_publishes_are_forwarded_when_they_go_to_one_partition(
    forwarding: Forwarding,
) -> None:
    wire = await AsyncWire.connect(forwarding.port)
    header = b'{"k":"v","##partition_key":"a"}'
    await wire.send(encode_pub_ext("t", header, b"one"))
    assert await wire.read_frame() == (0, b"OK")
    assert forwarding.gate.commands[-1] == (encode_pub_ext("t", header, b"one", 3), b"a")
    same = [(b'{"##partition_key":"a"}', b"x"), (b'{"##partition_key":"a"}', b"y")]
    await wire.send(encode_mpub_ext("t", same))
    assert await wire.read_frame() == (0, b"OK")
    assert forwarding.gate.commands[-1] == (encode_mpub_ext("t", same, 3), b"a")
    calls = forwarding.gate.calls
    split = [(b'{"##partition_key":"a"}', b"x"), (b'{"##partition_key":"b"}', b"y")]
    await wire.send(encode_mpub_ext("t", split))  # (two partitions, maybe two leaders)
    ftype, data = await wire.read_frame()
    assert ftype == 1 and data.startswith(b"E_FAILED_ON_NOT_LEADER"), data
    assert forwarding.gate.calls == calls
