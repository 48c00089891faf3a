"""nsqd's HTTPS listener and the plain listener's ``--tls-required=true`` refusal (SPEC 2.1).

``start_https`` serves the same API as the HTTP listener over TLS on ``--https-address``,
only when ``--tls-cert``/``--tls-key`` are set (as nsqd). ``plain_http_app`` makes the
plain HTTP listener answer every request 403 ``{"message": "TLS_REQUIRED", "https_port":
N}`` when ``--tls-required`` is ``true`` (not ``tcp-https``). Imports aiohttp; the routes
themselves stay in ``nsqd.http``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from nsqpy.flags import listen_host_port
from nsqpy.httpapi import V1_HEADER, Handler
from nsqpy.nsqd.http_limits import runner_options

if TYPE_CHECKING:
    from nsqpy.nsqd.server import NsqdServer

log = logging.getLogger("nsqpy.nsqd")


def plain_http_app(server: NsqdServer, app: web.Application) -> web.Application:
    """The plain listener's app: every request refused when TLS is required for HTTP too."""
    if not server.tls.http_required:
        return app

    @web.middleware
    async def tls_required(request: web.Request, handler: Handler) -> web.StreamResponse:
        body = f'{{"message": "TLS_REQUIRED", "https_port": {server.https_port}}}'
        return web.Response(status=403, text=body, headers=V1_HEADER)

    app.middlewares.insert(0, tls_required)
    return app


async def start_https(server: NsqdServer) -> None:
    """Listen on --https-address when a certificate is configured."""
    from nsqpy.nsqd.http import make_app

    context = server.tls.context
    if context is None or not server.opts.https_address:
        return
    host, port = listen_host_port("https-address", server.opts.https_address)
    runner = web.AppRunner(make_app(server), **runner_options(server.opts))
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=context, reuse_address=True)
    await site.start()
    server._https_runner = runner
    server.https_port = int(runner.addresses[0][1])
    log.info("HTTPS: listening on %s:%d", host, server.https_port)
