"""Fixtures for TLS, compression and AUTH: an nsqd factory, event loops (``certs`` is the
test kit's, made once per session).

Tests here run on uvloop (the loop the nsqd program uses); those marked ``both_loops`` run
on asyncio's default loop as well.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import uvloop

from nsqpy.nsqd.server import NsqdServer
from nsqpy.options import NsqdOptions
from nsqpy.testing import nsqd_options
from nsqpy.testing.certs import CertFiles

from .helpers import OPEN

MakeNsqd = Callable[..., Awaitable[NsqdServer]]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "both_loops: run on asyncio's loop as well as uvloop")


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.get_closest_marker("both_loops") is not None:
        return {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture(autouse=True)
async def _close_secure_wires() -> AsyncIterator[None]:
    yield
    while OPEN:
        await OPEN.pop().close()


def nsqd_opts(tmp_path: Path, **overrides: Any) -> NsqdOptions:
    """``nsqpy.testing.nsqd_options`` with an HTTPS listener; overrides must name options."""
    unknown = set(overrides) - {f.name for f in dataclasses.fields(NsqdOptions)}
    assert not unknown, unknown
    return nsqd_options(tmp_path, https_address="127.0.0.1:0", **overrides)


@pytest.fixture
async def make_nsqd(tmp_path: Path) -> AsyncIterator[MakeNsqd]:
    servers: list[NsqdServer] = []

    async def make(**overrides: Any) -> NsqdServer:
        server = NsqdServer(nsqd_opts(tmp_path / f"n{len(servers)}", **overrides))
        await server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()


@pytest.fixture
def tls_opts(certs: CertFiles) -> dict[str, Any]:
    return {"tls_cert": certs.server_cert, "tls_key": certs.server_key}
