"""The nsqadmin daemon in-process: ``NsqAdmin(opts)`` with ``start()``, ``stop()``, ``http_port``.

Owns the aiohttp application (every route mounted under ``--base-path``), static assets,
the optional graphite ``/render`` proxy, response compression, and the background tasks:
the stats sampler that feeds the built-in graphs and the notification sender. It builds
the ``AdminContext`` the API, pages and trace are given (none of them imports this
module). Errors are ``HttpError`` written by ``nsq_middleware``; the middlewares run
outermost first: compression, NSQ's error body, the cluster's failures as HTTP errors.
Logs ``HTTP: listening on <host>:<port>`` once the listener is up. Imports aiohttp and
the nsqadmin modules; never nsqd or lookupd code.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from nsqpy.daemon import cancel_and_wait
from nsqpy.flags import listen_host_port
from nsqpy.flags.cluster import cluster_tls_on
from nsqpy.httpapi import HttpError, nsq_middleware
from nsqpy.nsqadmin.api import Api, cluster_errors
from nsqpy.nsqadmin.api import routes as api_routes
from nsqpy.nsqadmin.cluster import Cluster, Errors, NotFound
from nsqpy.nsqadmin.context import AdminContext
from nsqpy.nsqadmin.history import History, samples_from_stats
from nsqpy.nsqadmin.notify import Notifier
from nsqpy.nsqadmin.options import NsqAdminOptions, validate
from nsqpy.nsqadmin.pages import Pages
from nsqpy.nsqadmin.pages import routes as page_routes
from nsqpy.nsqadmin.trace import Trace
from nsqpy.nsqadmin.trace import routes as trace_routes
from nsqpy.nsqadmin.upstream import Upstream, UpstreamError, tls_context

log = logging.getLogger("nsqpy.nsqadmin")

STATIC_DIR = Path(__file__).with_name("static")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def compress(request: web.Request, handler: Handler) -> web.StreamResponse:
    """gzip/deflate when the client asks (as NSQ's nsqadmin does)."""
    resp = await handler(request)
    if isinstance(resp, web.Response) and request.headers.get("Accept-Encoding"):
        body = resp.body
        if isinstance(body, bytes) and len(body) > 256:
            resp.enable_compression()
    return resp


class NsqAdmin:
    """One nsqadmin: HTTP server, cluster view, sampler and notifier."""

    def __init__(self, opts: NsqAdminOptions) -> None:
        validate(opts)  # ConfigError naming the bad option; normalises --base-path
        self.opts = opts
        lookupds = list(opts.lookupd_http_addresses)
        if cluster_tls_on(opts):  # a secure cluster's nsqlookupd, at its --rpc-address
            context = tls_context(
                root_ca=opts.cluster_tls_root_ca_file,
                cert=opts.cluster_tls_cert,
                key=opts.cluster_tls_key,
            )
            lookupds = [a if "://" in a else f"https://{a}" for a in lookupds]
        else:
            context = tls_context(
                insecure=opts.http_client_tls_insecure_skip_verify,
                root_ca=opts.http_client_tls_root_ca_file,
                cert=opts.http_client_tls_cert,
                key=opts.http_client_tls_key,
            )
        connect_s = opts.http_client_connect_timeout_ms / 1000
        request_s = opts.http_client_request_timeout_ms / 1000
        self.upstream = Upstream(  # the daemons
            connect_timeout_s=connect_s, request_timeout_s=request_s, ssl_context=context
        )
        # graphite and --notification-http-endpoint: the system's CAs, not the cluster's
        self.outside = (
            Upstream(connect_timeout_s=connect_s, request_timeout_s=request_s)
            if cluster_tls_on(opts)
            else self.upstream
        )
        self.cluster = Cluster(self.upstream, lookupds, list(opts.nsqd_http_addresses))
        self.history = History(opts.stats_history_size)
        self.sampled = asyncio.Condition()
        self.samples_taken = 0  # sampling attempts, failed ones included
        self.notifier = Notifier(self.outside, opts.notification_http_endpoint)
        self.http_port = 0
        self._runner: web.AppRunner | None = None
        self._sampler: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        host, port = listen_host_port("http-address", self.opts.http_address)
        self._runner = web.AppRunner(self.make_app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            await self._close_upstreams()
            raise
        sockets = getattr(site._server, "sockets", None) or []  # asyncio's or uvloop's Server
        self.http_port = sockets[0].getsockname()[1]
        log.info("HTTP: listening on %s:%d", host, self.http_port)
        self.notifier.start()
        if self.opts.stats_sample_interval_ms > 0:
            self._sampler = asyncio.create_task(self._sample_loop())

    async def stop(self) -> None:
        if self._sampler is not None:
            await cancel_and_wait(self._sampler)
            self._sampler = None
        await self.notifier.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self._close_upstreams()

    async def _close_upstreams(self) -> None:
        await self.upstream.close()
        if self.outside is not self.upstream:
            await self.outside.close()

    # -- sampling ------------------------------------------------------------------------

    async def sample(self) -> list[str]:
        """Take one sample of every nsqd's /stats into the history; returns the failures."""
        errors = Errors()
        try:
            producers = await self.cluster.producers(errors)
            per_node = await self.cluster.node_stats(producers, errors, include_clients=False)
        except (UpstreamError, NotFound) as exc:  # AllFailed is an UpstreamError
            errors.add(str(exc))
        else:
            values, tags = samples_from_stats(per_node)
            self.history.record(time.time(), values, tags)
        async with self.sampled:
            self.samples_taken += 1
            self.sampled.notify_all()
        return errors.items

    async def wait_for_samples(self, count: int = 1) -> None:
        """Until ``count`` more sampling attempts have finished (for tests and tools)."""
        async with self.sampled:
            target = self.samples_taken + count
            await self.sampled.wait_for(lambda: self.samples_taken >= target)

    async def _sample_loop(self) -> None:
        interval = self.opts.stats_sample_interval_ms / 1000
        while True:
            started = time.monotonic()
            try:
                failures = await self.sample()
                if failures:
                    log.warning("stats sample incomplete: %s", "; ".join(failures))
            except Exception:  # the sampler must outlive any surprise
                log.exception("stats sample failed")
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    # -- the application -----------------------------------------------------------------

    def context(self) -> AdminContext:
        """What the request handlers are given."""
        return AdminContext(
            opts=self.opts,
            cluster=self.cluster,
            history=self.history,
            upstream=self.outside,
            notifier=self.notifier,
        )

    def make_app(self) -> web.Application:
        # compress sees every answer, NSQ's error bodies included (only long ones, such as
        # UPSTREAM_ERROR, are worth compressing); cluster_errors raises for nsq_middleware.
        middlewares = [compress, nsq_middleware, cluster_errors]
        app = web.Application(middlewares=middlewares, client_max_size=1024**2 + 1)
        base = "" if self.opts.base_path == "/" else self.opts.base_path
        ctx = self.context()
        for method, path, handler in api_routes(Api(ctx)):
            app.router.add_route(method, base + path, handler)
        for method, path, handler in page_routes(Pages(ctx)):
            if path == "/" and base:
                app.router.add_route(method, base, handler)
            app.router.add_route(method, base + path, handler)
        for method, path, handler in trace_routes(Trace(ctx)):  # nsqpy: message trace
            app.router.add_route(method, base + path, handler)
        app.router.add_route("GET", base + "/static/{asset}", self.static)
        app.router.add_route("GET", base + "/fonts/{asset}", self.static)
        if self.opts.proxy_graphite:
            app.router.add_route("GET", base + "/render", self.render_proxy)
        return app

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["asset"]
        folder = Path(self.opts.dev_static_dir) if self.opts.dev_static_dir else STATIC_DIR
        path = folder / name
        if "/" in name or "\\" in name or name.startswith(".") or not path.is_file():
            raise HttpError(404, "NOT_FOUND")
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        headers = {"Cache-Control": "no-cache"}
        return web.Response(body=path.read_bytes(), content_type=ctype, headers=headers)

    async def render_proxy(self, request: web.Request) -> web.StreamResponse:
        """``/render`` passed through to graphite (``--proxy-graphite``)."""
        url = self.opts.graphite_url.rstrip("/") + "/render"
        if request.query_string:
            url += "?" + request.query_string
        try:
            status, ctype, body = await self.outside.fetch(url)
        except UpstreamError as exc:
            raise HttpError(502, f"UPSTREAM_ERROR: {exc}") from None
        return web.Response(body=body, status=status, headers={"Content-Type": ctype})
