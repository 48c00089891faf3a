"""Read deadlines: a command that arrives slower than the heartbeat allows closes the connection.

Before, any byte reset nsqd's idle timer, so a client trickling a byte a second held its
connection (and up to a --max-body-size body) forever. nsqd's rule is now nsqpy's: a command,
line and body, must arrive within two heartbeat intervals of when the connection began
waiting for it, before IDENTIFY (the default interval, half of --client-timeout) and after
it (the negotiated one); a client that disabled heartbeats has no deadline, as in nsqd,
except before AUTH when AUTH is required, and what it may send before AUTH is bounded. Output
left unread for one heartbeat interval closes the connection too (nsqd's write deadline).
Over HTTP, a request head must arrive within --client-timeout of the connection's start or
its previous response, and its body as long again after the head.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Iterator

import pytest

from nsqpy.nsqd.flow import pre_auth_budget
from nsqpy.protocol.limits import Limits
from nsqpy.testing import StartNsqd, WireClient, http_request, identify, pub, wait_for
from nsqpy.testing.auth import AuthStub, authed_client, grant

SHORT = "--client-timeout=2s"  # heartbeat 1 s: the deadline is 2 s
DEADLINE = 2.0
LATE = DEADLINE + 2.5  # the ticker's period, a loaded machine


def closed_now(sock: socket.socket, received: bytearray) -> bool:
    """True when the server has closed the connection; what it sent is added to ``received``."""
    while select.select([sock], [], [], 0)[0]:
        try:
            data = sock.recv(1 << 16)
        except ConnectionError:
            return True
        if not data:
            return True
        received += data
    return False


def trickle(
    sock: socket.socket, data: bytes, limit: float, received: bytearray | None = None
) -> float | None:
    """Send ``data`` a byte every 0.25 s; the seconds until the server closed the connection,
    or None when it had not within ``limit`` (or all of ``data`` was sent)."""
    received = bytearray() if received is None else received
    started = time.monotonic()
    for byte in data:
        if time.monotonic() - started > limit:
            return None
        try:
            sock.sendall(bytes([byte]))
        except ConnectionError:
            return time.monotonic() - started
        time.sleep(0.25)  # the trickle's pace, not a wait for nsqd
        if closed_now(sock, received):
            return time.monotonic() - started
    return None


@pytest.fixture
def wire() -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    yield socks
    for sock in socks:
        sock.close()


def connect(socks: list[socket.socket], port: int, hello: bytes = b"  V2") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5.0)
    socks.append(sock)
    sock.sendall(hello)
    return sock


def test_a_trickled_body_before_identify_is_closed(
    start_nsqd: StartNsqd, wire: list[socket.socket]
) -> None:
    nsqd = start_nsqd(SHORT)
    sock = connect(wire, nsqd.tcp_port, b"  V2PUB trickle\n" + struct.pack(">i", 100))
    took = trickle(sock, b"x" * 100, limit=LATE + 2)
    assert took is not None and DEADLINE - 0.5 < took < LATE, took
    wait_for(lambda: any("no complete command within 2000ms" in x for x in nsqd.log_lines), 5)


@pytest.mark.parametrize("part", ["line", "body"])
def test_a_trickled_command_after_identify_is_closed(
    start_nsqd: StartNsqd, wire: list[socket.socket], part: str
) -> None:
    nsqd = start_nsqd()  # the default heartbeat (30 s) until IDENTIFY asks for 1 s
    sock = connect(wire, nsqd.tcp_port, b"  V2" + identify({"heartbeat_interval": 1000}))
    assert sock.recv(100).endswith(b"OK")
    if part == "line":
        sock.sendall(b"NOP\n")  # complete commands are fine however many
        took = trickle(sock, b"PUB " + b"t" * 60 + b"\n", limit=LATE + 2)
    else:
        sock.sendall(b"PUB trickle\n" + struct.pack(">i", 100))
        took = trickle(sock, b"x" * 100, limit=LATE + 2)
    assert took is not None and DEADLINE - 0.5 < took < LATE, took


def test_with_heartbeats_disabled_a_slow_command_is_waited_for(
    start_nsqd: StartNsqd, wire: list[socket.socket]
) -> None:
    """As in nsqd: heartbeat_interval -1 means no read deadline."""
    nsqd = start_nsqd(SHORT)
    sock = connect(wire, nsqd.tcp_port, b"  V2" + identify({"heartbeat_interval": -1}))
    assert sock.recv(100).endswith(b"OK")
    received = bytearray()
    assert trickle(sock, pub("slow", b"x" * 12), 30.0, received) is None  # 22 bytes, 5.5 s
    sock.settimeout(5.0)
    while len(received) < 10:
        received += sock.recv(100)
    assert received == struct.pack(">ii", 6, 0) + b"OK"


def test_before_auth_disabled_heartbeats_do_not_lift_the_deadline(
    start_nsqd: StartNsqd, wire: list[socket.socket]
) -> None:
    with AuthStub() as stub:
        nsqd = start_nsqd(SHORT, f"--auth-http-address={stub.address}")
        sock = connect(wire, nsqd.tcp_port, b"  V2" + identify({"heartbeat_interval": -1}))
        assert sock.recv(100).endswith(b"OK")
        sock.sendall(b"AUTH\n" + struct.pack(">i", 100))
        took = trickle(sock, b"s" * 100, limit=LATE + 2)
        assert took is not None and DEADLINE - 0.5 < took < LATE, took


def test_what_a_client_sends_before_auth_is_bounded(start_nsqd: StartNsqd) -> None:
    max_body = 65536
    budget = pre_auth_budget(Limits(max_body_size=max_body))
    with AuthStub() as stub:
        stub.replies = {"ok": grant(".*")}
        nsqd = start_nsqd(f"--auth-http-address={stub.address}", f"--max-body-size={max_body}")
        flood = WireClient(nsqd.tcp_port, timeout=5.0)
        try:
            flood.send(b"  V2" + b"NOP\n" * (budget // 4 + 1))
        except OSError:
            pass  # refused and closed before all of it was sent
        refused = b"E_AUTH_FIRST AUTH required before more than %d bytes" % budget
        assert flood.read_frame() == (1, refused)
        assert flood.closed()
        authed = authed_client(nsqd.tcp_port, "ok")  # after AUTH there is no such bound
        authed.send(b"NOP\n" * (budget // 4 + 1) + pub("after", b"x"))
        assert authed.read_frame() == (0, b"OK")


def test_output_not_read_for_a_heartbeat_closes_the_connection(
    start_nsqd: StartNsqd, wire: list[socket.socket]
) -> None:
    nsqd = start_nsqd(SHORT)
    sock = socket.socket()
    wire.append(sock)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", nsqd.tcp_port))
    sock.sendall(b"  V2SUB unread c\n")  # (no RDY: nothing is delivered)
    # FINs of IDs not in flight: 21 bytes in, each answered with a non-fatal E_FIN_FAILED of
    # some 70 bytes out, nothing stored (PUBs, answered with 10 bytes each, took some 40 MB
    # of publishing to fill the buffers: up to 17 s of a loaded machine)
    chunk = b"".join(b"FIN %016x\n" % i for i in range(1000))
    sock.settimeout(0.2)
    started, closed = time.monotonic(), None
    while closed is None and time.monotonic() - started < 15:
        try:
            sock.send(chunk)  # a partial send leaves a torn command: nsqd never gets that far
        except TimeoutError:
            pass
        except ConnectionError:
            closed = time.monotonic() - started
    assert closed is not None, "nsqd kept a client that reads nothing"
    wait_for(lambda: any("output not read for 1000ms" in x for x in nsqd.log_lines), 5)


def test_a_connection_nsqd_closes_is_let_go_when_its_last_output_is_not_read(
    start_nsqd: StartNsqd, wire: list[socket.socket]
) -> None:
    """A consumer that reads nothing loses its channel: nsqd closes the connection after
    its output, which the client does not read either. One heartbeat interval after nsqd
    began closing it, the connection is let go (not kept for ever)."""
    nsqd = start_nsqd(SHORT)
    body = b"m" * 65536
    for _ in range(4):  # 12.8 MB for the consumer, far more than the sockets' buffers hold
        status, _, _ = http_request(
            "POST", f"{nsqd.http}/mpub?topic=stuck", b"\n".join([body] * 50)
        )
        assert status == 200
    status, _, _ = http_request("POST", f"{nsqd.http}/channel/create?topic=stuck&channel=c")
    assert status == 200
    sock = socket.socket()
    wire.append(sock)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", nsqd.tcp_port))
    sock.sendall(b"  V2" + identify({"heartbeat_interval": 3000}))  # (3 s to stall)
    sock.sendall(b"SUB stuck c\nRDY 200\n")  # and nothing read from here on
    time.sleep(0.5)  # (the messages went out until the buffers were full)
    status, _, _ = http_request("POST", f"{nsqd.http}/channel/delete?topic=stuck&channel=c")
    assert status == 200  # nsqd closes the consumer's connection after its output
    wait_for(lambda: any("output not read for 3000ms" in x for x in nsqd.log_lines), LATE + 3)


def http_connect(socks: list[socket.socket], port: int) -> socket.socket:
    return connect(socks, port, b"")


def test_a_trickled_http_request_head_is_closed(
    start_nsqd: StartNsqd, wire: list[socket.socket]
) -> None:
    nsqd = start_nsqd(SHORT)
    sock = http_connect(wire, nsqd.http_port)
    head = b"POST /pub?topic=slow HTTP/1.1\r\nHost: n\r\nX-Slow: " + b"s" * 100
    took = trickle(sock, head, limit=LATE + 2)
    assert took is not None and DEADLINE - 0.5 < took < LATE, took


def test_a_trickled_http_body_is_answered_408_and_closed(
    start_nsqd: StartNsqd, wire: list[socket.socket]
) -> None:
    nsqd = start_nsqd(SHORT)
    sock = http_connect(wire, nsqd.http_port)
    sock.sendall(b"POST /pub?topic=slow HTTP/1.1\r\nHost: n\r\nContent-Length: 100\r\n\r\n")
    started = time.monotonic()
    answer = b""
    for byte in b"x" * 100:  # a byte every 0.25 s
        try:
            sock.sendall(bytes([byte]))
        except ConnectionError:
            break
        time.sleep(0.25)
        if select.select([sock], [], [], 0)[0]:
            data = sock.recv(1 << 16)
            answer += data
            if not data:
                break
        if time.monotonic() - started > LATE + 2:
            break
    took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer[:100]
    assert answer.endswith(b'{"message":"REQUEST_TIMEOUT"}'), answer[-100:]
    assert DEADLINE - 0.5 < took < LATE, took
    assert not (b"POST" in answer and b"200 OK" in answer)
    wait_for(lambda: any("body not received within 2s" in x for x in nsqd.log_lines), 5)
