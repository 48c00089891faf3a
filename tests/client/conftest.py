from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .client_fakes import FakeLookupd, FakeNsqd


@pytest.fixture
async def fake_nsqd() -> AsyncIterator[FakeNsqd]:
    server = await FakeNsqd().start()
    yield server
    await server.stop()


@pytest.fixture
async def fake_nsqds() -> AsyncIterator[list[FakeNsqd]]:
    servers = [await FakeNsqd().start() for _ in range(3)]
    yield servers
    for s in servers:
        await s.stop()


@pytest.fixture
async def fake_lookupd() -> AsyncIterator[FakeLookupd]:
    server = await FakeLookupd().start()
    yield server
    await server.stop()
