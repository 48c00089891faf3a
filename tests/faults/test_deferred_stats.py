"""A DPUB'd or delayed-REQ message counts in a channel's ``deferred_count``, not its
``depth``, in /stats (as NSQ does), before and after a restart (SIGTERM or SIGKILL).

NSQ puts a DPUB'd message straight into the deferred queue of every channel of its topic,
consumer or not; a topic with no channel holds it in its own depth until a channel comes.
A message requeued with a delay is deferred on its channel as well. A channel that lags
behind many DPUBs keeps them out of its cursor until it reads that far: its cursor file
stays a few bytes, not 16 bytes per DPUB rewritten at every save.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from nsqpy.testing import (
    DaemonProcess,
    StartNsqd,
    WireClient,
    channel_stats,
    cursor_path,
    dpub,
    http_request,
    pub,
    topic_stats,
    wait_for,
)

from .wire import subscribe

MESSAGE = 2
DELAY_MS = 60_000  # far beyond the test: the message stays deferred throughout


def counts(nsqd: DaemonProcess, topic: str, channel: str) -> tuple[int, int, int]:
    """(depth, deferred_count, in_flight_count) of the channel."""
    doc = channel_stats(nsqd.http, topic, channel)
    return doc["depth"], doc["deferred_count"], doc["in_flight_count"]


def publish(nsqd: DaemonProcess, *commands: bytes) -> None:
    wire = WireClient(nsqd.tcp_port)
    wire.send(b"  V2" + b"".join(commands))
    for _ in commands:
        assert wire.read_frame() == (0, b"OK")
    wire.close()


def restart(nsqd: DaemonProcess, how: str, start_nsqd: StartNsqd) -> DaemonProcess:
    if how == "SIGTERM":
        assert nsqd.stop() == 0
    else:
        nsqd.signal(signal.SIGKILL)
        assert nsqd.wait() == -signal.SIGKILL
    return start_nsqd()


def create(nsqd: DaemonProcess, topic: str, *channels: str) -> None:
    assert http_request("POST", f"{nsqd.http}/topic/create?topic={topic}")[0] == 200
    for channel in channels:
        url = f"{nsqd.http}/channel/create?topic={topic}&channel={channel}"
        assert http_request("POST", url)[0] == 200


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_dpub_to_a_channel_without_consumer_is_deferred(start_nsqd: StartNsqd, how: str) -> None:
    nsqd = start_nsqd()
    create(nsqd, "t", "idle", "idle2")
    publish(nsqd, pub("t", b"now"), dpub("t", DELAY_MS, b"later"))
    for channel in ("idle", "idle2"):  # each channel defers its copy
        assert counts(nsqd, "t", channel) == (1, 1, 0)
    assert topic_stats(nsqd.http, "t")["depth"] == 0
    nsqd = restart(nsqd, how, start_nsqd)
    for channel in ("idle", "idle2"):
        assert counts(nsqd, "t", channel) == (1, 1, 0)
    # The immediate message is the one delivered; the deferred one waits.
    consumer = subscribe(nsqd, "t", "idle", 10)
    frame_type, data = consumer.read_frame()
    assert frame_type == MESSAGE and data.endswith(b"now")
    wait_for(lambda: counts(nsqd, "t", "idle") == (0, 1, 1))


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_dpub_to_a_channel_with_a_consumer_is_deferred(start_nsqd: StartNsqd, how: str) -> None:
    nsqd = start_nsqd()
    create(nsqd, "t", "c")
    consumer = subscribe(nsqd, "t", "c", 10)
    publish(nsqd, dpub("t", DELAY_MS, b"later"))
    wait_for(lambda: counts(nsqd, "t", "c") == (0, 1, 0))
    consumer.close()
    nsqd = restart(nsqd, how, start_nsqd)
    assert counts(nsqd, "t", "c") == (0, 1, 0)
    subscribe(nsqd, "t", "c", 10)
    assert counts(nsqd, "t", "c") == (0, 1, 0)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_req_with_a_delay_is_deferred(start_nsqd: StartNsqd, how: str) -> None:
    nsqd = start_nsqd()
    create(nsqd, "t", "c")
    publish(nsqd, pub("t", b"retry me"), pub("t", b"waiting"))
    consumer = subscribe(nsqd, "t", "c", 1)
    frame_type, data = consumer.read_frame()
    assert frame_type == MESSAGE and data.endswith(b"retry me")
    msg_id = data[10:26]
    consumer.send(b"RDY 0\nREQ " + msg_id + f" {DELAY_MS}\n".encode())
    wait_for(lambda: counts(nsqd, "t", "c") == (1, 1, 0))
    consumer.close()
    nsqd = restart(nsqd, how, start_nsqd)
    assert counts(nsqd, "t", "c") == (1, 1, 0)


def test_a_topic_without_channels_holds_a_dpub_until_a_channel_comes(
    start_nsqd: StartNsqd,
) -> None:
    nsqd = start_nsqd()
    publish(nsqd, dpub("t", DELAY_MS, b"later"), pub("t", b"now"))
    assert topic_stats(nsqd.http, "t")["depth"] == 2  # NSQ: the topic holds both
    create(nsqd, "t", "first")
    assert counts(nsqd, "t", "first") == (1, 1, 0)
    assert topic_stats(nsqd.http, "t")["depth"] == 0
    nsqd = restart(nsqd, "SIGKILL", start_nsqd)
    assert counts(nsqd, "t", "first") == (1, 1, 0)


def test_ephemeral_channels_and_topics_defer_a_dpub_in_memory(start_nsqd: StartNsqd) -> None:
    nsqd = start_nsqd()
    idle = subscribe(nsqd, "t", "c#ephemeral", 0)  # kept alive by its consumer
    idle_eph = subscribe(nsqd, "e#ephemeral", "c", 0)
    for topic in ("t", "e#ephemeral"):
        publish(nsqd, dpub(topic, DELAY_MS, b"later"), pub(topic, b"now"))
    assert counts(nsqd, "t", "c#ephemeral") == (1, 1, 0)
    assert counts(nsqd, "e#ephemeral", "c") == (1, 1, 0)
    for wire in (idle, idle_eph):
        wire.send(b"RDY 10\n")
        frame_type, data = wire.read_frame()
        assert frame_type == MESSAGE and data.endswith(b"now")
    wait_for(lambda: counts(nsqd, "t", "c#ephemeral") == (0, 1, 1))
    wait_for(lambda: counts(nsqd, "e#ephemeral", "c") == (0, 1, 1))


def test_a_lagging_channel_keeps_its_dpubs_out_of_its_cursor(
    start_nsqd: StartNsqd, data_path: Path
) -> None:
    nsqd = start_nsqd()
    create(nsqd, "t", "idle")
    n = 1000
    commands = [dpub("t", DELAY_MS, b"later-%d" % i) for i in range(n)]
    commands += [pub("t", b"now-%d" % i) for i in range(n)]
    commands[::2], commands[1::2] = commands[n:], commands[:n]  # PUB and DPUB in turn
    publish(nsqd, *commands)
    assert counts(nsqd, "t", "idle") == (n, n, 0)
    assert nsqd.stop() == 0  # the cursor is saved at exit
    cursor = cursor_path(data_path, "t", "idle")
    assert cursor.stat().st_size < 100  # was 16 bytes per DPUB: 16 KB here

    nsqd = start_nsqd()
    assert counts(nsqd, "t", "idle") == (n, n, 0)
    consumer = subscribe(nsqd, "t", "idle", 100)
    got: list[bytes] = []
    while len(got) < n:
        frame_type, data = consumer.read_frame()
        assert frame_type == MESSAGE
        got.append(data[26:])
        consumer.send(b"FIN " + data[10:26] + b"\n")
    assert got == [b"now-%d" % i for i in range(n)]  # each once, no DPUB before its time
    wait_for(lambda: counts(nsqd, "t", "idle") == (0, n, 0))
