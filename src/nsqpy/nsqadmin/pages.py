"""nsqadmin's HTML pages (SPEC 4), rendered on the server from the same queries as the API.

Pages: topic list (``/``, ``/topics``, ``?q=`` search), topic, channel, node list, node,
lookup (inactive topics, create a topic/channel), counter. A page always renders: nodes
that did not answer are listed in a warning; a cluster that did not answer at all gives
the page with the error and status 200, as NSQ's nsqadmin serves its page whatever the
cluster's state (its JSON API, like ours, answers 502); an unknown topic/channel/node a
page saying so (404), a bad name in the URL a page saying so (400): pages render their own
errors as HTML, never a JSON ``HttpError``. Actions are buttons that the page script
confirms and sends to the JSON API. Given an ``AdminContext``; imports aiohttp, context,
queries, render and views, never ``api`` or ``server``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from nsqpy.nsqadmin import queries
from nsqpy.nsqadmin.cluster import AllFailed, Errors
from nsqpy.nsqadmin.context import AdminContext
from nsqpy.nsqadmin.render import Links, layout
from nsqpy.nsqadmin.views import Graphite
from nsqpy.nsqadmin.views_nodes import ClusterViews
from nsqpy.protocol.names import valid_channel_name, valid_topic_name

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Build = Callable[[Errors], Awaitable[str]]


def routes(pages: Pages) -> list[tuple[str, str, Handler]]:
    return [
        ("GET", "/", pages.topics),
        ("GET", "/topics", pages.topics),
        ("GET", "/topics/{topic}", pages.topic),
        ("GET", "/topics/{topic}/{channel}", pages.channel),
        ("GET", "/nodes", pages.nodes),
        ("GET", "/nodes/{node}", pages.node),
        ("GET", "/counter", pages.counter),
        ("GET", "/lookup", pages.lookup),
    ]


def html_response(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


class Pages:
    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx
        o = ctx.opts
        self.links = Links(o.base_path)
        interval = o.stats_sample_interval_ms
        # Graphs poll the history as often as it is sampled, at most twice a second.
        self.refresh_ms = max(500, interval) if interval else 0
        graphite = None
        if o.graphite_url:
            graphite = Graphite(
                o.graphite_url,
                o.statsd_prefix,
                o.statsd_counter_format,
                o.statsd_gauge_format,
                max(1, o.statsd_interval_ms // 1000),
            )
        self.views = ClusterViews(
            self.links,
            refresh_ms=self.refresh_ms,
            graphite=graphite,
            proxy_graphite=o.proxy_graphite,
        )

    async def _page(
        self, request: web.Request, title: str, active: str, build: Build
    ) -> web.Response:
        """Run ``build``; upstream failures and unknown names become a page, never a 500."""
        errors = Errors()
        status, body, error = 200, "", ""
        try:
            body = await build(errors)
        except queries.NotFound as exc:
            status, error = 404, f"{exc.code}: {title} was not found"
        except AllFailed as exc:  # the page itself is fine: 200, the error shown on it
            error = f"UPSTREAM_ERROR: {exc}"
        page = layout(
            self.links,
            title=title,
            active=active,
            body=body,
            warnings=errors.items,
            error=error,
            query=request.rel_url.query.get("q", ""),
            graph_refresh_ms=self.refresh_ms,
        )
        return html_response(page, status)

    def _bad_name(self, what: str, code: str) -> web.Response:
        page = layout(
            self.links,
            title=what,
            active="topics",
            body="",
            error=f"{code}: {what} is not a valid name",
        )
        return html_response(page, 400)

    @property
    def cluster(self) -> queries.Cluster:
        return self.ctx.cluster

    async def topics(self, request: web.Request) -> web.StreamResponse:
        q = request.rel_url.query.get("q", "").strip()

        async def build(errors: Errors) -> str:
            rows = await queries.overview(self.cluster, self.ctx.history, errors)
            return self.views.topics(rows, q)

        return await self._page(request, "Topics", "topics", build)

    async def topic(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        if not valid_topic_name(name):
            return self._bad_name(f"topic {name}", "INVALID_TOPIC")

        async def build(errors: Errors) -> str:
            doc = await queries.topic(self.cluster, name, errors)
            return self.views.topic(name, queries.with_rates(self.ctx.history, doc, name))

        return await self._page(request, f"topic {name}", "topics", build)

    async def channel(self, request: web.Request) -> web.StreamResponse:
        topic, name = request.match_info["topic"], request.match_info["channel"]
        if not valid_topic_name(topic):
            return self._bad_name(f"topic {topic}", "INVALID_TOPIC")
        if not valid_channel_name(name):
            return self._bad_name(f"channel {name}", "INVALID_CHANNEL")

        async def build(errors: Errors) -> str:
            doc = await queries.channel(self.cluster, topic, name, errors)
            doc = queries.with_rates(self.ctx.history, doc, topic, name)
            return self.views.channel(topic, name, doc)

        return await self._page(request, f"channel {topic}/{name}", "topics", build)

    async def nodes(self, request: web.Request) -> web.StreamResponse:
        q = request.rel_url.query.get("q", "").strip()

        async def build(errors: Errors) -> str:
            nodes, summary = await queries.nodes_and_cluster(self.cluster, errors)
            return self.views.nodes(nodes, q, lookupd=self.cluster.uses_lookupd, cluster=summary)

        return await self._page(request, "Nodes", "nodes", build)

    async def node(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["node"]

        async def build(errors: Errors) -> str:
            return self.views.node(name, await queries.node(self.cluster, name, errors))

        return await self._page(request, f"node {name}", "nodes", build)

    async def counter(self, request: web.Request) -> web.StreamResponse:
        async def build(errors: Errors) -> str:
            stats = await queries.counter(self.cluster, errors)
            return self.views.counter(sum(s["message_count"] for s in stats.values()))

        return await self._page(request, "Counter", "counter", build)

    async def lookup(self, request: web.Request) -> web.StreamResponse:
        async def build(errors: Errors) -> str:
            inactive = await queries.inactive_topics(self.cluster, errors)
            return self.views.lookup(self.cluster.lookupd, inactive)

        return await self._page(request, "Lookup", "lookup", build)
