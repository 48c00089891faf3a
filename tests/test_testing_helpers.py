"""The test kit itself (nsqpy.testing): distinct free ports, a daemon that dies at start, the
polling helpers' results and failures, what the wire and /stats readers return, and the
example of the package docstring."""

from __future__ import annotations

import socket
import ssl
import sys
import urllib.request
from pathlib import Path

import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import (
    DaemonProcess,
    FakeClock,
    WireMessage,
    channel_stats,
    consume,
    eventually,
    free_ports,
    http_request,
    nsqd_process,
    pub,
    publish,
    publisher,
    read_message,
    subscriber,
    topic_stats,
    wait_for,
)
from nsqpy.testing.certs import make_certs


def test_free_ports_are_distinct() -> None:
    for _ in range(50):
        ports = free_ports(6)
        assert len(set(ports)) == 6


def test_free_ports_never_come_from_what_port_0_draws_and_never_twice() -> None:
    """A daemon binding port 0 (its own listener) while another's port was chosen but not
    yet bound cannot take it: chosen ports lie below the ephemeral range (a CI run lost a
    cluster's start to exactly that collision)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
        ephemeral_low = int(fh.read().split()[0])
    seen: set[int] = set()
    for _ in range(100):
        ports = free_ports(5)
        assert all(p < ephemeral_low for p in ports), ports
        assert not seen & set(ports)
        seen.update(ports)


def test_free_ports_of_two_test_workers_never_meet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under pytest-xdist each worker draws from its own share of the range, so two
    workers (two processes, each remembering only its own ports) never hand out the same
    port."""
    drawn: dict[str, set[int]] = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        drawn[worker] = {p for _ in range(40) for p in free_ports(5)}
    assert len(drawn["gw0"]) == len(drawn["gw1"]) == 200
    assert max(drawn["gw0"]) < min(drawn["gw1"]), "each worker keeps to its own share"


def test_a_daemon_that_cannot_bind_fails_its_start_clearly() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        daemon = DaemonProcess(
            "nsqlookupd", [f"--http-address=127.0.0.1:{port}", "--tcp-address=127.0.0.1:0"]
        )
        with pytest.raises(RuntimeError, match="nsqlookupd exited with"):
            daemon.start()


# Runs nsqd (its path is the first argument) with its HTTPS listener started half a
# second late: a machine under load can delay it that much after the HTTP one.
LATE_HTTPS = """
import asyncio, sys
import nsqpy.nsqd.server as server
real = server.start_https
async def late(*args, **kwargs):
    await asyncio.sleep(0.5)
    return await real(*args, **kwargs)
server.start_https = late
sys.argv = sys.argv[1:]
from nsqpy.nsqd.app import main
sys.exit(main())
"""


def test_an_nsqd_given_a_certificate_is_started_once_it_listens_on_https_too(
    tmp_path: Path,
) -> None:
    certs = make_certs(tmp_path / "certs")
    daemon = nsqd_process(
        tmp_path / "data", f"--tls-cert={certs.server_cert}", f"--tls-key={certs.server_key}"
    )
    daemon.prefix = [sys.executable, "-c", LATE_HTTPS]
    with daemon:
        assert {"TCP", "HTTP", "HTTPS"} <= set(daemon.ports)
        context = ssl.create_default_context(cafile=certs.ca)
        url = f"https://127.0.0.1:{daemon.ports['HTTPS']}/ping"
        with urllib.request.urlopen(url, context=context, timeout=5) as resp:
            assert resp.read() == b"OK"


def test_an_nsqd_whose_https_address_is_emptied_again_is_started_without_https(
    tmp_path: Path,
) -> None:
    certs = make_certs(tmp_path / "certs")
    flags = [f"--tls-cert={certs.server_cert}", f"--tls-key={certs.server_key}"]
    with nsqd_process(tmp_path / "data", *flags, "--https-address=") as daemon:
        assert set(daemon.ports) == {"TCP", "HTTP"}


def test_wait_for_returns_the_first_truthy_value_or_names_the_condition() -> None:
    calls = iter([0, [], "ready"])
    assert wait_for(lambda: next(calls), interval=0) == "ready"
    with pytest.raises(AssertionError, match=r"not met within 0.05s: the queue drained"):
        wait_for(lambda: False, 0.05, what="the queue drained")
    with pytest.raises(AssertionError, match=r"wait_for\(lambda: 1 > 2, 0.05\)"):
        wait_for(lambda: 1 > 2, 0.05)  # no ``what``: the lambda's source names it


async def test_eventually_polls_plain_and_coroutine_predicates() -> None:
    calls = iter([None, 0, 7])
    assert await eventually(lambda: next(calls), interval=0) == 7

    async def ready() -> str:
        return "yes"

    assert await eventually(ready) == "yes"

    async def never() -> bool:
        return False

    with pytest.raises(AssertionError, match=r"not met within 0.05s: .*never"):
        await eventually(never, 0.05)


async def test_read_message_and_frame_within(nsqd: NsqdServer, clock: FakeClock) -> None:
    await publish(nsqd.tcp_port, pub("kit", b"one"))
    consumer = await subscriber(nsqd.tcp_port, "kit", "c")
    msg = await read_message(consumer)
    assert isinstance(msg, WireMessage) and (msg.attempts, msg.body) == (1, b"one")
    _, attempts, msg_id, body = msg  # also a tuple
    assert (attempts, msg_id, body) == (1, msg.id, b"one") and len(msg_id) == 16
    assert await consumer.frame_within(0.05) is None


def test_stats_readers_and_consume_against_a_process(tmp_path: Path) -> None:
    with nsqd_process(tmp_path / "data") as nsqd:
        assert http_request("POST", f"{nsqd.http}/pub?topic=k%23ephemeral", b"x")[0] == 200
        assert topic_stats(nsqd.http, "k#ephemeral")["message_count"] == 1
        with pytest.raises(AssertionError, match="no topic 'absent'"):
            topic_stats(nsqd.http, "absent")
        assert http_request("POST", f"{nsqd.http}/pub?topic=k", b"y")[0] == 200
        assert consume(nsqd.tcp_port, "k", "c", 1) == [b"y"]
        assert channel_stats(nsqd.http, "k", "c")["message_count"] == 1
        with pytest.raises(AssertionError, match="no channel 'k'/'other'"):
            channel_stats(nsqd.http, "k", "other")


async def test_the_package_docstring_example(nsqd: NsqdServer, clock: FakeClock) -> None:
    consumer = await subscriber(nsqd.tcp_port, "events", "archive")
    producer = await publisher(nsqd.tcp_port)
    await producer.send(pub("events", b"hello"))
    assert await producer.read_frame() == (0, b"OK")
    ftype, data = await consumer.read_frame()
    assert ftype == 2 and data.endswith(b"hello")
    channel = nsqd.broker.topics["events"].channels["archive"]
    await eventually(lambda: channel.in_flight_count == 1, what="one message in flight")
