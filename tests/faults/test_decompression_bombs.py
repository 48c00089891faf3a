"""Compressed input is bounded in output and work per read: a bomb costs nsqd neither memory
nor the other clients' service.

nsqd inflates a client's DEFLATE or snappy stream 64 KiB at a time and hands at most two such
pieces to the connection per event-loop turn, not reading the socket while inflated input
waits. So 100 KB that inflate to 100 MB of zeros are closed at the first 16 KiB without a
newline ("failed to read command", one log line, as nsqd), a snappy chunk that claims more
than 64 KiB is refused from its header, and 200 KB inflating to 200 MB of valid commands run
a slice at a time while everyone else is served.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator

import cramjam
import pytest

from nsqpy.protocol.compress import STREAM_IDENTIFIER, masked_crc
from nsqpy.testing import DaemonProcess, StartNsqd, WireClient, wait_for
from nsqpy.testing.auth import timed_pub

RSS_BOUND = 32 * 1024 * 1024  # growth allowed while a bomb goes off
_SOCKETS: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    yield
    while _SOCKETS:
        _SOCKETS.pop().close()


def negotiated(nsqd: DaemonProcess, compression: str) -> socket.socket:
    """A raw connection that has negotiated ``compression``; what follows is compressed."""
    sock = socket.create_connection(("127.0.0.1", nsqd.tcp_port), timeout=5.0)
    _SOCKETS.append(sock)
    body = json.dumps({"feature_negotiation": True, compression: True}).encode()
    sock.sendall(b"  V2IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    reply = json.loads(sock.recv(size, socket.MSG_WAITALL)[4:])
    assert reply[compression] is True
    return sock


def deflate_bomb(piece: bytes, total: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = piece * (1_048_576 // len(piece))
    out = [z.compress(block) for _ in range(total // len(block))]
    return b"".join(out) + z.flush(zlib.Z_SYNC_FLUSH)


def closed_by_server(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def probed(nsqd: DaemonProcess) -> WireClient:
    probe = WireClient(nsqd.tcp_port, timeout=5.0)
    probe.send(b"  V2")
    timed_pub(probe, "probe")
    return probe


def test_a_deflate_bomb_of_zeros_is_closed_with_a_log_line(start_nsqd: StartNsqd) -> None:
    nsqd = start_nsqd()
    probe = probed(nsqd)
    rss = nsqd.rss_bytes()
    bomb = deflate_bomb(b"\0", 100 * 1024 * 1024)
    assert len(bomb) < 200_000
    sock = negotiated(nsqd, "deflate")
    try:
        sock.sendall(bomb)
    except OSError:
        pass  # closed before all of it was sent
    assert closed_by_server(sock)
    assert timed_pub(probe, "probe") < 0.5
    assert nsqd.rss_bytes() - rss < RSS_BOUND
    wait_for(lambda: any("failed to read command" in line for line in nsqd.log_lines), 5.0)


def test_a_deflate_bomb_of_commands_does_not_hold_other_clients(start_nsqd: StartNsqd) -> None:
    nsqd = start_nsqd()
    probe = probed(nsqd)
    rss = nsqd.rss_bytes()
    bomb = deflate_bomb(b"NOP\n", 200 * 1024 * 1024)  # 200 MB of commands in ~200 KB
    sock = negotiated(nsqd, "deflate")
    sender = threading.Thread(target=sock.sendall, args=(bomb,), daemon=True)
    sender.start()
    latencies = []
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        latencies.append(timed_pub(probe, "probe"))
    sock.close()
    sender.join(5.0)
    # (inflating all of it at once would hold the probe for tens of seconds; a bound near
    # one turn of the loop would time how busy the machine is, not the bomb)
    assert max(latencies) < 2.0, max(latencies)
    assert nsqd.rss_bytes() - rss < RSS_BOUND


def test_a_snappy_chunk_claiming_more_than_64_kib_is_refused(start_nsqd: StartNsqd) -> None:
    nsqd = start_nsqd()
    probe = probed(nsqd)
    rss = nsqd.rss_bytes()
    # A compressed chunk whose block says it inflates to 4 GB (its varint length) ...
    block = b"\x80\x80\x80\x80\x0f" + bytes(cramjam.snappy.compress_raw(b"\0" * 60000))[3:]
    crc = masked_crc(b"").to_bytes(4, "little")
    chunk = bytes((0,)) + (len(block) + 4).to_bytes(3, "little") + crc + block
    sock = negotiated(nsqd, "snappy")
    sock.sendall(STREAM_IDENTIFIER + chunk)
    assert closed_by_server(sock)
    # ... and one whose header claims 16 MB: refused before any of it arrives.
    sock = negotiated(nsqd, "snappy")
    sock.sendall(STREAM_IDENTIFIER + b"\x00\xff\xff\xff")
    assert closed_by_server(sock)
    assert timed_pub(probe, "probe") < 0.5
    assert nsqd.rss_bytes() - rss < RSS_BOUND
    wait_for(lambda: sum("snappy" in line for line in nsqd.log_lines) >= 2, 5.0)
