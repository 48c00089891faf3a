"""No client can fill the disk through the log: a flood of bad requests writes a bounded
number of lines, and says how many it left out.

Each bad request was one log line (tracebacks are folded into it), so a client that sent a
thousand of them wrote a thousand lines, without end. Now each place in the code that logs
writes ``RATE_BURST`` lines at once and then one a second; the lines it leaves out are
counted and reported: "N more similar messages suppressed ...; the last: <its text>", at the
latest when the daemon exits.
"""

from __future__ import annotations

import re
import socket
import time

from nsqpy.logs import RATE_BURST, RATE_PER_S
from nsqpy.testing import DaemonProcess, StartNsqd, WireClient

FLOOD = 1000
_NOTE = re.compile(r"(\d+) more similar messages suppressed .*; the last: (.*)$")


def bad_tcp_client(nsqd: DaemonProcess) -> None:
    client = WireClient(nsqd.tcp_port, timeout=5.0)
    client.send(b"  V2BAD\n")
    assert client.read_frame() == (1, b"E_INVALID invalid command BAD")
    client.close()


def bad_http_request(nsqd: DaemonProcess) -> None:
    with socket.create_connection(("127.0.0.1", nsqd.http_port), timeout=5.0) as sock:
        sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nnot a header\r\n\r\n")
        assert b" 400 " in sock.recv(65536).split(b"\r\n", 1)[0]


def accounted(lines: list[str], marker: str) -> tuple[int, int]:
    """(lines written with ``marker``, lines reported suppressed whose last had it)."""
    written = suppressed = 0
    for line in lines:
        note = _NOTE.search(line)
        if note is not None:
            if marker in note.group(2):
                suppressed += int(note.group(1))
        elif marker in line:
            written += 1
    return written, suppressed


def test_a_flood_of_bad_requests_writes_a_bounded_log(start_nsqd: StartNsqd) -> None:
    nsqd = start_nsqd()
    started = time.monotonic()
    for _ in range(FLOOD):
        bad_tcp_client(nsqd)
        bad_http_request(nsqd)
    assert nsqd.stop() == 0
    took = time.monotonic() - started
    lines = nsqd.log_lines
    # each of the two sites may write RATE_PER_S lines a second more, each with a note
    # before it and a sweep's note: a busy machine floods for longer (a flood of 2,000
    # lines, one per request, is still far beyond it within the test's timeout)
    per_second = 2 * 3 * RATE_PER_S
    assert len(lines) < 4 * RATE_BURST + 60 + per_second * took, (took, lines[-20:])
    for marker in ("fatal error: E_INVALID invalid command BAD", "Error handling request"):
        written, suppressed = accounted(lines, marker)
        assert written >= RATE_BURST, (marker, lines[-20:])
        assert written + suppressed == FLOOD, (marker, written, suppressed)
    assert not any("Traceback" in line for line in lines)
