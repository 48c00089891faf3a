"""Fixtures of nsqadmin's tests: a live cluster (a real nsqlookupd and two real nsqd programs,
started once per session, nsqd registered with lookupd) and nsqadmin in-process
(``make_admin``) or as the real program (``admin_program``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from nsqpy.nsqadmin.app import NsqAdmin, NsqAdminOptions
from nsqpy.nsqadmin.options import validate
from nsqpy.testing import lookupd_process, nsqd_process, serve_http

from .helpers import AdminClient, AdminProgram, MakeAdmin, Stack, start_all


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    base = tmp_path_factory.mktemp("nsqadmin-stack")
    lookupd = lookupd_process()
    lookupd.start()
    nsqds = [
        nsqd_process(base / f"nsqd{i}", f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}")
        for i in range(2)
    ]
    try:
        start_all(nsqds)
        yield Stack(lookupd, nsqds)
    finally:
        for d in [*nsqds, lookupd]:
            d.kill()


@pytest.fixture
async def make_admin() -> AsyncIterator[MakeAdmin]:
    admins: list[NsqAdmin] = []
    session = aiohttp.ClientSession()

    async def make(**options: Any) -> AdminClient:
        options.setdefault("stats_sample_interval_ms", 0)
        opts = NsqAdminOptions(http_address="127.0.0.1:0", **options)
        validate(opts)
        admin = NsqAdmin(opts)
        await admin.start()
        admins.append(admin)
        return AdminClient(admin, session)

    yield make
    for admin in admins:
        await admin.stop()
    await session.close()


@pytest.fixture
async def lookupd_admin(stack: Stack, make_admin: MakeAdmin) -> AdminClient:
    return await make_admin(lookupd_http_addresses=[stack.lookupd_http])


@pytest.fixture
async def nsqd_admin(stack: Stack, make_admin: MakeAdmin) -> AdminClient:
    return await make_admin(nsqd_http_addresses=[stack.nsqd_http(0), stack.nsqd_http(1)])


@pytest.fixture(scope="session")
def admin_program(stack: Stack) -> Iterator[AdminProgram]:
    """The real program in lookupd mode, sampling stats every 200 ms for the graphs."""
    program = AdminProgram(
        f"--lookupd-http-address={stack.lookupd_http}", "--stats-sample-interval=200ms"
    )
    yield program
    program.stop()


@pytest.fixture
async def graphite() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A fake but real graphite on 127.0.0.1: /render answers JSON for format=json (300
    messages in the first interval) and a PNG otherwise; ``seen`` holds each query."""
    seen: list[dict[str, str]] = []

    async def render(request: web.Request) -> web.Response:
        seen.append(dict(request.query))
        if request.query.get("format") == "json":
            body = [{"target": request.query["target"], "datapoints": [[300.0, 1], [9.0, 2]]}]
            return web.json_response(body)
        return web.Response(body=b"\x89PNG fake", content_type="image/png")

    app = web.Application()
    app.router.add_get("/render", render)
    async with serve_http(app) as port:
        yield f"http://127.0.0.1:{port}", seen
