"""nsqpy's test kit, shipped as public API for nsqpy's own tests and for users' tests.

Product code never imports this package; it imports the product (and never ``pytest``,
except ``pytest_plugin``). What it holds, by module:

- ``clock``: ``FakeClock``, the injected time that moves only when a test says.
- ``polling``: ``wait_for`` (blocking) and ``eventually`` (async), to wait for a condition
  with a deadline instead of sleeping; a failure names the condition.
- ``wire``: protocol V2 clients for wire transcripts (``WireClient``, ``AsyncWire``), the
  commands they send unchecked (``identify``, ``pub``, ``mpub``, ``dpub``), the usual
  openings (``publisher``, ``subscriber``, ``publish``), ``read_message`` (a
  ``WireMessage``: timestamp, attempts, id, body) and ``consume`` (messages FIN'd on a
  blocking connection, for a daemon in another process).
- ``inprocess``: ``nsqd_options``, ``NsqdServers`` (in-process ``NsqdServer``), and
  ``FrameSink`` (a consumer of a ``Broker`` without a socket).
- ``processes``: the programs as subprocesses (``DaemonProcess``, ``nsqd_process``,
  ``lookupd_process``, ``free_ports``).
- ``disks``: ``SmallDisk`` (a tmpfs to fill), ``simulate_reboot``, and where a channel's
  cursor is kept (``cursor_path``) and what it says (``saved_cursor``).
- ``http``: blocking ``http_get`` / ``http_request``, nsqd's ``/stats`` read that way
  (``nsqd_stats``, ``topic_stats``, ``channel_stats``) for a daemon in another process, and
  ``serve_http`` (a stub HTTP server on a free port).
- ``certs``: throw-away TLS certificates.
- ``pytest_plugin``: the fixtures (``clock``, ``nsqd``, ``nsqd_servers``, ``data_path``,
  ``start_nsqd``, and closing every test's connections).

A test with the plugin loaded (``pytest_plugins = ["nsqpy.testing.pytest_plugin"]`` in a
``conftest.py``)::

    from nsqpy.nsqd.server import NsqdServer
    from nsqpy.testing import FakeClock, eventually, pub, publisher, subscriber

    async def test_a_message_goes_round(nsqd: NsqdServer, clock: FakeClock) -> None:
        consumer = await subscriber(nsqd.tcp_port, "events", "archive")
        producer = await publisher(nsqd.tcp_port)
        await producer.send(pub("events", b"hello"))
        assert await producer.read_frame() == (0, b"OK")
        ftype, data = await consumer.read_frame()
        assert ftype == 2 and data.endswith(b"hello")
        channel = nsqd.broker.topics["events"].channels["archive"]
        await eventually(lambda: channel.in_flight_count == 1, what="one message in flight")
"""

from __future__ import annotations

from nsqpy.testing.clock import FakeClock
from nsqpy.testing.disks import SmallDisk, cursor_path, saved_cursor, simulate_reboot
from nsqpy.testing.http import (
    channel_stats,
    http_get,
    http_request,
    nsqd_stats,
    serve_http,
    topic_stats,
)
from nsqpy.testing.inprocess import FrameSink, NsqdServers, count_lane, nsqd_options
from nsqpy.testing.polling import eventually, wait_for
from nsqpy.testing.processes import (
    DaemonProcess,
    StartNsqd,
    free_ports,
    lookupd_process,
    nsqd_process,
    proc_status_kb,
)
from nsqpy.testing.wire import (
    AsyncWire,
    WireClient,
    WireMessage,
    close_test_connections,
    consume,
    dpub,
    identify,
    mpub,
    pub,
    publish,
    publisher,
    read_message,
    subscriber,
)

__all__ = [
    "AsyncWire",
    "DaemonProcess",
    "FakeClock",
    "FrameSink",
    "NsqdServers",
    "SmallDisk",
    "StartNsqd",
    "WireClient",
    "WireMessage",
    "channel_stats",
    "close_test_connections",
    "consume",
    "count_lane",
    "cursor_path",
    "dpub",
    "eventually",
    "free_ports",
    "http_get",
    "http_request",
    "identify",
    "lookupd_process",
    "mpub",
    "nsqd_options",
    "nsqd_process",
    "nsqd_stats",
    "proc_status_kb",
    "pub",
    "publish",
    "publisher",
    "read_message",
    "saved_cursor",
    "serve_http",
    "simulate_reboot",
    "subscriber",
    "topic_stats",
    "wait_for",
]
