"""Suite-wide teardown: no test leaves a connection open behind it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from nsqpy.testing import AsyncWire, close_test_connections


@pytest.fixture(autouse=True)
def _close_sync_connections() -> Iterator[None]:
    yield
    close_test_connections()


@pytest.fixture(autouse=True)
async def _close_async_wires() -> AsyncIterator[None]:
    yield
    await AsyncWire.close_all()
