"""``GET /metrics`` on an aiohttp application, and the HTTP request counter behind it.

``add_metrics_route(app, prefix, collect)`` counts every response the application sends
(by route and status, so garbage paths cannot grow the label set) and serves
``collect()`` plus ``<prefix>_http_requests_total`` in the Prometheus text format. Imports
aiohttp and ``exposition``; knows nothing of nsqd or nsqlookupd.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from aiohttp import web

from nsqpy.metrics.exposition import CONTENT_TYPE, Family, render

REQUESTS = web.AppKey("nsqpy_http_requests", Counter)


async def _count_response(request: web.Request, response: web.StreamResponse) -> None:
    resource = request.match_info.route.resource
    path = resource.canonical if resource is not None else "unmatched"
    request.app[REQUESTS][(path, response.status)] += 1


def requests_family(app: web.Application, prefix: str) -> Family:
    family = Family(f"{prefix}_http_requests", "counter", "HTTP responses sent, by route and code")
    counts: Counter[tuple[str, int]] = app[REQUESTS]
    for (path, code), n in sorted(counts.items()):
        family.add(n, path=path, code=str(code))
    return family


def add_metrics_route(
    app: web.Application, prefix: str, collect: Callable[[], list[Family]]
) -> None:
    """Register ``GET /metrics`` and start counting the application's responses."""
    app[REQUESTS] = Counter()
    app.on_response_prepare.append(_count_response)

    async def metrics(request: web.Request) -> web.StreamResponse:
        text = render([*collect(), requests_family(request.app, prefix)])
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    app.router.add_route("GET", "/metrics", metrics)
