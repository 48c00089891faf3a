"""Fixtures: an in-process nsqlookupd on 127.0.0.1:0 with a FakeClock, and an HTTP client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from nsqpy.lookupd.app import NsqLookupd
from nsqpy.testing import FakeClock

from .helpers import Api, LookupWire, make_opts


@pytest.fixture
async def lookupd(clock: FakeClock) -> AsyncIterator[NsqLookupd]:
    daemon = NsqLookupd(make_opts(), clock=clock)
    await daemon.start()
    yield daemon
    await LookupWire.close_all()
    await daemon.stop()


@pytest.fixture
async def http(lookupd: NsqLookupd) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, lookupd.http_port)
