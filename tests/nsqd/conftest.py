"""The HTTP side of nsqd's in-process tests: the ``http`` fixture (an aiohttp session and the
in-process nsqd's base URL) and ``get``/``post`` through it, answering (status, body). The
in-process ``nsqd`` on a ``clock``, the commands, ``publisher``/``subscriber`` and
``read_message`` come from ``nsqpy.testing``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from nsqpy.nsqd.server import NsqdServer

Http = tuple[aiohttp.ClientSession, str]  # a session and "http://127.0.0.1:<port>"


@pytest.fixture
async def http(nsqd: NsqdServer) -> AsyncIterator[Http]:
    async with aiohttp.ClientSession() as session:
        yield session, f"http://127.0.0.1:{nsqd.http_port}"


async def get(http: Http, path: str) -> tuple[int, bytes]:
    session, base = http
    async with session.get(base + path) as resp:
        return resp.status, await resp.read()


async def post(http: Http, path: str, body: bytes = b"") -> tuple[int, bytes]:
    session, base = http
    async with session.post(base + path, data=body) as resp:
        return resp.status, await resp.read()
