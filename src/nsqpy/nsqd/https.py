"""nsqd's HTTPS listener and the plain listener's ``--tls-required=true`` refusal (SPEC 2.1).

``start_https`` serves the same API as the HTTP listener over TLS on ``--https-address``,
only when ``--tls-cert``/``--tls-key`` are set (as nsqd), and returns its runner (the server
reads the port from it). ``plain_http_app`` makes the plain HTTP listener answer every
request 403 ``{"message": "TLS_REQUIRED", "https_port": N}`` when ``--tls-required`` is
``true`` (not ``tcp-https``): nsqd writes that body by hand (spaces after the colons, no
JSON content type), so it is written here as such, not as an ``HttpError``. Imports aiohttp
and the TLS settings; the routes themselves stay in ``nsqd.http``, the server is never named.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

from nsqpy.flags import listen_host_port
from nsqpy.httpapi import V1_HEADER, Handler
from nsqpy.nsqd.http_limits import runner_options
from nsqpy.nsqd.tls import TlsSettings
from nsqpy.options import NsqdOptions

log = logging.getLogger("nsqpy.nsqd")


def plain_http_app(
    app: web.Application, tls: TlsSettings, https_port: Callable[[], int]
) -> web.Application:
    """The plain listener's app: every request refused when TLS is required for HTTP too
    (``https_port`` is read per request: the HTTPS listener starts after this)."""
    if not tls.http_required:
        return app

    @web.middleware
    async def tls_required(request: web.Request, handler: Handler) -> web.StreamResponse:
        body = f'{{"message": "TLS_REQUIRED", "https_port": {https_port()}}}'
        return web.Response(status=403, text=body, headers=V1_HEADER)

    app.middlewares.insert(0, tls_required)
    return app


async def start_https(
    make_app: Callable[[], web.Application], opts: NsqdOptions, tls: TlsSettings
) -> web.AppRunner | None:
    """Listen on --https-address when a certificate is configured; None when not."""
    context = tls.context
    if context is None or not opts.https_address:
        return None
    host, port = listen_host_port("https-address", opts.https_address)
    runner = web.AppRunner(make_app(), **runner_options(opts))
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=context, reuse_address=True)
    await site.start()
    log.info("HTTPS: listening on %s:%d", host, int(runner.addresses[0][1]))
    return runner
