"""A failing disk: /ping and /stats turn NOK, publishes fail, consumers go on, health returns.

The failure is real I/O failing where the topic log writes: inside ``nsqpy.storage.log``
the ``os`` module is replaced by one whose ``pwrite``/``pwritev`` raise ENOSPC for the
segment files of chosen topics (found from the file descriptor), as a full disk would.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import aiohttp
import pytest

import nsqpy.storage.log as log_module
from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing import (
    AsyncWire,
    dpub,
    eventually,
    mpub,
    pub,
    publisher,
    read_message,
    subscriber,
)

from .conftest import get, post

ERR = 1
ENOSPC_TEXT = os.strerror(errno.ENOSPC)


class FailingDisk:
    """Stands in for ``os`` in the log module: writes to the named topics' files fail."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real
        self.topics: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def _check(self, fd: int) -> None:
        path = self._real.readlink(f"/proc/self/fd/{fd}")
        if any(f"/topic-{name}/" in path for name in self.topics):
            raise OSError(errno.ENOSPC, ENOSPC_TEXT)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        self._check(fd)
        return int(self._real.pwrite(fd, data, offset))

    def pwritev(self, fd: int, buffers: Any, offset: int) -> int:
        self._check(fd)
        return int(self._real.pwritev(fd, buffers, offset))


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[FailingDisk]:
    fake = FailingDisk(os)
    monkeypatch.setattr(log_module, "os", fake)
    yield fake


async def expect_fatal(nsqd: NsqdServer, command: bytes, prefix: bytes) -> None:
    wire = await AsyncWire.connect(nsqd.tcp_port)
    await wire.send(command)
    ftype, data = await wire.read_frame()
    assert ftype == ERR and data.startswith(prefix), data
    assert ENOSPC_TEXT.encode() in data
    await wire.expect_closed()


async def test_failed_write_turns_health_nok_and_fails_publishes(
    nsqd: NsqdServer, disk: FailingDisk, http: tuple[aiohttp.ClientSession, str]
) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(mpub("h", [b"stored1", b"stored2", b"stored3"]))
    assert await p.read_frame() == (0, b"OK")
    consumer = await subscriber(nsqd.tcp_port, "h", "c", rdy=0)
    assert await get(http, "/ping") == (200, b"OK")
    # nsqd.dat naming the new channel is written by the next tick: a write that works would
    # resolve the failure below (only the topic's log writes fail on this fake disk)
    dat = nsqd.broker.data_path / "nsqd.dat"
    await eventually(lambda: dat.exists() and '"c"' in dat.read_text())

    disk.topics.add("h")
    await expect_fatal(nsqd, pub("h", b"lost"), b"E_PUB_FAILED PUB failed ")
    status, body = await get(http, "/ping")
    assert status == 500 and body.startswith(b"NOK - ") and ENOSPC_TEXT.encode() in body
    await expect_fatal(nsqd, mpub("h", [b"x", b"y"]), b"E_MPUB_FAILED MPUB failed ")
    await expect_fatal(nsqd, dpub("h", 1000, b"z"), b"E_DPUB_FAILED DPUB failed ")
    assert await post(http, "/pub?topic=h", b"lost") == (503, b'{"message":"EXITING"}')
    assert await post(http, "/mpub?topic=h", b"a\nb") == (503, b'{"message":"EXITING"}')
    doc = json.loads((await get(http, "/stats?format=json"))[1])
    assert doc["health"] == body.decode()
    assert f"Health: {body.decode()}\n" in (await get(http, "/stats"))[1].decode()

    # Consumers keep receiving what was stored before the failure, and only that.
    await consumer.send(b"RDY 10\n")
    got = [(await read_message(consumer))[3] for _ in range(3)]
    assert got == [b"stored1", b"stored2", b"stored3"]
    channel = nsqd.broker.topics["h"].channels["c"]
    assert channel.depth == 0 and nsqd.broker.topics["h"].log.flushed_offset == 3

    # The next successful write restores health (NSQ's SetHealth(nil) on a good write).
    disk.topics.clear()
    again = await publisher(nsqd.tcp_port)
    await again.send(pub("h", b"after"))
    assert await again.read_frame() == (0, b"OK")
    assert await get(http, "/ping") == (200, b"OK")
    assert json.loads((await get(http, "/stats?format=json"))[1])["health"] == "OK"
    assert (await read_message(consumer))[3] == b"after"


async def test_a_failing_topic_does_not_fail_others_written_in_the_same_commit(
    nsqd: NsqdServer, disk: FailingDisk
) -> None:
    p = await publisher(nsqd.tcp_port)
    await p.send(pub("bad", b"warm") + pub("good", b"warm"))
    assert [await p.read_frame() for _ in range(2)] == [(0, b"OK"), (0, b"OK")]
    disk.topics.add("bad")
    # Both PUBs arrive in one read, so both land in one group commit.
    await p.send(pub("good", b"kept") + pub("bad", b"lost"))
    assert await p.read_frame() == (0, b"OK")
    ftype, data = await p.read_frame()
    assert ftype == ERR and data.startswith(b"E_PUB_FAILED PUB failed ")
    await p.expect_closed()
    c = await subscriber(nsqd.tcp_port, "good", "c")
    assert [(await read_message(c))[3] for _ in range(2)] == [b"warm", b"kept"]
    assert nsqd.broker.topics["bad"].log.flushed_offset == 1
