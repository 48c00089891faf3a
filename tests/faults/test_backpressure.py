"""Backpressure: a client that sends and never reads its replies holds bounded memory.

Before, nsqd read on and queued every reply: 10 s of pipelined PUBs from a client reading
nothing grew it by ~440 MB, a FIN flood by ~180 MB. Now a connection whose unread replies are
over the high-water mark is not read until they drain (``nsqd.flow``), so its memory stays
under ``connection_bytes`` (``docs/limits.md``); its sends block in the kernel, other clients
are served meanwhile, and once it reads, every command it sent is answered, in order. Over
HTTP, aiohttp queues at most 32 pipelined requests; nsqd refuses header fields over 8 KiB
(a single request used to hold up to 128 MiB of headers) and a body over --max-body-size.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from nsqpy.nsqd.flow import connection_bytes
from nsqpy.protocol.frames import OK_FRAME
from nsqpy.protocol.limits import Limits
from nsqpy.testing import StartNsqd, WireClient, pub

# RSS is not payload: the interpreter's allocator keeps what a burst used, and nsqd's log,
# topic and channel structures grow a little with what was published.
SLACK = 8 << 20
# A few request heads and a body of 1 MiB; aiohttp's error path (a request refused while
# megabytes more arrive) leaves up to ~14 MiB with the allocator under uvloop.
HTTP_BOUND = 32 << 20
FLOOD_SECONDS = 2.0  # nsqd reads nothing from the flooding client for this long
FLOOD_LIMIT = 60.0  # ... within this long


_OPEN: list[socket.socket] = []


@pytest.fixture(autouse=True)
def close_sockets() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def raw_client(port: int) -> socket.socket:
    """A connection with a small receive buffer, so unread replies back up into nsqd soon."""
    sock = socket.socket()
    _OPEN.append(sock)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    return sock


def flood(sock: socket.socket, command: bytes, seconds: float) -> tuple[int, bytes, bool]:
    """Send ``command`` over and over without reading, until nothing more is taken for
    ``seconds`` (nsqd stopped reading), or for ``FLOOD_LIMIT`` seconds. Returns how many
    were sent (the last perhaps in part), the rest of the last one, and whether nsqd
    stopped reading. When it stops depends on how fast it answers: its replies fill the
    kernel's socket buffers first (megabytes of them), so this waits for that however busy
    the machine is, rather than a fixed time."""
    chunk = command * max(1, 65536 // len(command))
    sock.settimeout(0.2)
    sent, stuck_since = 0, None
    end = time.monotonic() + FLOOD_LIMIT
    while (now := time.monotonic()) < end:
        if stuck_since is not None and now - stuck_since >= seconds:
            break
        try:
            sent += sock.send(chunk[sent % len(chunk) :])
        except TimeoutError:  # (nothing taken for 0.2 s)
            stuck_since = now if stuck_since is None else stuck_since
            continue
        stuck_since = None
    blocked = stuck_since is not None and time.monotonic() - stuck_since >= seconds
    whole, part = divmod(sent, len(command))
    return whole + bool(part), command[part:] if part else b"", blocked


def finish_and_read(sock: socket.socket, tail: bytes, want: int, timeout: float = 30.0) -> bytes:
    """Send ``tail`` (the rest of the last command) while reading ``want`` bytes of replies."""
    sock.settimeout(timeout)
    sender = threading.Thread(target=sock.sendall, args=(tail,))
    sender.start()
    got = bytearray()
    while len(got) < want:
        data = sock.recv(1 << 20)
        assert data, f"closed after {len(got)} of {want} bytes"
        got += data
    sender.join(timeout)
    return bytes(got)


def test_a_pub_flood_that_reads_nothing_holds_bounded_memory(start_nsqd: StartNsqd) -> None:
    nsqd = start_nsqd()
    bound = connection_bytes(Limits()) + SLACK
    before = nsqd.rss_bytes()
    command = pub("flood", b"x" * 100)
    sock = raw_client(nsqd.tcp_port)
    sock.sendall(b"  V2")
    count, tail, blocked = flood(sock, command, FLOOD_SECONDS)
    grown = nsqd.rss_bytes() - before
    assert grown < bound, f"nsqd grew {grown >> 20} MiB (bound {bound >> 20} MiB)"
    assert blocked, "nsqd read on from a client that reads nothing"

    other = WireClient(nsqd.tcp_port, timeout=3.0)  # others are served meanwhile
    other.send(b"  V2" + pub("other", b"y"))
    assert other.read_frame() == (0, b"OK")

    replies = finish_and_read(sock, tail, len(OK_FRAME) * count)
    assert replies == OK_FRAME * count  # nothing lost, nothing out of order


def test_a_fin_flood_that_reads_nothing_holds_bounded_memory(start_nsqd: StartNsqd) -> None:
    nsqd = start_nsqd()
    bound = connection_bytes(Limits()) + SLACK
    sock = raw_client(nsqd.tcp_port)
    sock.sendall(b"  V2SUB flood c\nRDY 0\n")
    before = nsqd.rss_bytes()
    command = b"FIN 0000000000000000\n"  # not in flight: E_FIN_FAILED each, not fatal
    count, tail, blocked = flood(sock, command, FLOOD_SECONDS)
    grown = nsqd.rss_bytes() - before
    assert grown < bound, f"nsqd grew {grown >> 20} MiB (bound {bound >> 20} MiB)"
    assert blocked, "nsqd read on from a client that reads nothing"

    error = b"E_FIN_FAILED FIN 0000000000000000 failed ID not in flight"
    frame = struct.pack(">ii", 4 + len(error), 1) + error
    replies = finish_and_read(sock, tail, len(OK_FRAME) + len(frame) * count)
    assert replies == OK_FRAME + frame * count  # SUB's OK, then one error per FIN


def http_client(port: int) -> socket.socket:
    sock = raw_client(port)
    sock.settimeout(5.0)
    return sock


def read_http_responses(sock: socket.socket, count: int) -> list[bytes]:
    """The status lines of ``count`` responses (each with a Content-Length body)."""
    buf = b""
    lines: list[bytes] = []
    while len(lines) < count:
        head_end = buf.find(b"\r\n\r\n")
        if head_end < 0:
            data = sock.recv(1 << 16)
            assert data, f"closed after {len(lines)} of {count} responses"
            buf += data
            continue
        head = buf[:head_end].split(b"\r\n")
        length = next(
            int(h.split(b":")[1]) for h in head if h.lower().startswith(b"content-length")
        )
        while len(buf) < head_end + 4 + length:
            buf += sock.recv(1 << 16)
        lines.append(head[0])
        buf = buf[head_end + 4 + length :]
    return lines


def test_pipelined_http_publishes_that_read_nothing_hold_bounded_memory(
    start_nsqd: StartNsqd,
) -> None:
    """aiohttp queues at most 32 pipelined requests per connection and stops reading."""
    nsqd = start_nsqd()
    before = nsqd.rss_bytes()
    request = b"POST /pub?topic=pipelined HTTP/1.1\r\nHost: n\r\nContent-Length: 100\r\n\r\n"
    request += b"x" * 100
    sock = raw_client(nsqd.http_port)
    count, tail, blocked = flood(sock, request, FLOOD_SECONDS)
    grown = nsqd.rss_bytes() - before
    assert grown < HTTP_BOUND, f"nsqd grew {grown >> 20} MiB"
    assert blocked, "nsqd read on from a client that reads nothing"
    sock.settimeout(30.0)
    sender = threading.Thread(target=sock.sendall, args=(tail,))
    sender.start()
    assert set(read_http_responses(sock, count)) == {b"HTTP/1.1 200 OK"}
    sender.join()


def test_http_header_fields_over_8_kib_are_refused_not_buffered(start_nsqd: StartNsqd) -> None:
    """One request's header fields could take 128 MiB (128 fields of 1 MiB each): 120 of
    1000 KiB grew nsqd by 230 MiB."""
    nsqd = start_nsqd()
    before = nsqd.rss_bytes()
    sock = http_client(nsqd.http_port)
    field = b"a" * (1000 << 10)
    head = b"GET /ping HTTP/1.1\r\nHost: n\r\n"
    try:
        sock.sendall(head + b"".join(b"X-%d: %s\r\n" % (i, field) for i in range(120)) + b"\r\n")
    except OSError:
        pass  # refused and closed before all of it was sent
    grown = nsqd.rss_bytes() - before
    assert grown < HTTP_BOUND, f"nsqd grew {grown >> 20} MiB"
    status = sock.recv(1 << 16).split(b"\r\n")[0]
    assert status.endswith(b" 400 Bad Request"), status


def test_an_mpub_body_over_max_body_size_is_not_buffered(start_nsqd: StartNsqd) -> None:
    nsqd = start_nsqd("--max-body-size=1048576")
    before = nsqd.rss_bytes()
    sock = http_client(nsqd.http_port)
    sock.sendall(b"POST /mpub?topic=big HTTP/1.1\r\nHost: n\r\nTransfer-Encoding: chunked\r\n\r\n")
    line = b"m" * 65535 + b"\n"
    chunk = b"%x\r\n" % len(line) + line + b"\r\n"
    try:
        for _ in range(48 << 4):  # 48 MiB
            sock.sendall(chunk)
    except OSError:
        pass  # answered and closed first
    grown = nsqd.rss_bytes() - before
    assert grown < HTTP_BOUND, f"nsqd grew {grown >> 20} MiB"
    assert read_http_responses(sock, 1) == [b"HTTP/1.1 413 Request Entity Too Large"]
