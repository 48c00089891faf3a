"""Daemons and a broker in-process: ``nsqd_options`` (loopback, ephemeral ports, data under
a temp dir), ``NsqdServers`` (start, stop and restart ``NsqdServer`` on one data path and
clock), ``FrameSink`` (a client connection as the broker sees it, without a socket) and
``count_lane`` (how many publishes a connection's publish lane took).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nsqpy.errors import ProtocolError
from nsqpy.options import NsqdOptions
from nsqpy.testing.clock import FakeClock
from nsqpy.testing.wire import AsyncWire

if TYPE_CHECKING:
    from nsqpy.nsqd.server import NsqdServer
    from nsqpy.nsqd.tcp import V2Connection


def count_lane(conn: V2Connection) -> list[int]:
    """Wrap the publish lane of ``conn`` (a server-side connection that has one): the list
    returned holds how many publishes it took since, an answer it gave itself (a refusal it
    raised) included."""
    inner = conn._lane
    assert inner is not None, "the connection has a publish lane"
    taken = [0]

    def counting(*args: object) -> bool:
        try:
            took = bool(inner(*args))  # type: ignore[arg-type]
        except ProtocolError:
            taken[0] += 1
            raise
        taken[0] += took
        return took

    conn._lane = counting  # type: ignore[assignment]
    return taken


def nsqd_options(tmp_path: Path, **overrides: object) -> NsqdOptions:
    """Options for an in-process nsqd on loopback ephemeral ports, data under ``tmp_path``,
    with a fast queue scan; ``overrides`` set any other field."""
    opts = NsqdOptions(
        tcp_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        data_path=str(tmp_path / "data"),
        broadcast_address="127.0.0.1",
        queue_scan_interval_ms=10,
    )
    for key, value in overrides.items():
        setattr(opts, key, value)
    return opts


class NsqdServers:
    """In-process nsqd servers on one data path and clock; ``restart`` stops one and starts
    another on the same data (what a test of recovery needs). ``stop_all`` at the end."""

    def __init__(self, tmp_path: Path, clock: FakeClock) -> None:
        self.tmp_path = tmp_path
        self.clock = clock
        self.running: list[NsqdServer] = []

    async def start(self, **overrides: object) -> NsqdServer:
        """A started server with ``nsqd_options(tmp_path, **overrides)``."""
        from nsqpy.nsqd.server import NsqdServer  # here: ``import nsqpy.testing`` stays light

        server = NsqdServer(nsqd_options(self.tmp_path, **overrides), clock=self.clock)
        await server.start()
        self.running.append(server)
        return server

    async def stop(self, server: NsqdServer) -> None:
        """Close the test's wires, then stop ``server``."""
        self.running.remove(server)
        await AsyncWire.close_all()
        await server.stop()

    async def restart(self, server: NsqdServer, **overrides: object) -> NsqdServer:
        await self.stop(server)
        return await self.start(**overrides)

    async def stop_all(self) -> None:
        await AsyncWire.close_all()
        for server in list(self.running):
            await server.stop()


class FrameSink:
    """A client connection as the broker sees it (``Client.sink``): keeps the message
    frames it is sent, for tests and benchmarks that drive a broker without sockets."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.closed = False

    def send_message(self, frame: bytes) -> None:
        self.frames.append(frame)

    def close_by_server(self) -> None:
        self.closed = True

    def bodies(self) -> list[bytes]:
        """The message bodies sent, in order (frames carry size, type, then the message)."""
        from nsqpy.protocol.message import decode_message

        return [decode_message(frame[8:]).body for frame in self.frames]
