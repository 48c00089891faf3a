"""docs/http-api.md documents every HTTP route the daemons serve: the route tables are read
from the applications themselves (nsqd's, nsqlookupd's with and without a cluster,
nsqadmin's with every optional route), and each ``METHOD /path`` must appear, in
backticks, in its daemon's section of the page; a route heading there must name a route
that is served. No daemon is started: the applications are built around stand-ins."""

from __future__ import annotations

import re
from pathlib import Path
from unittest.mock import MagicMock

from aiohttp import web

from nsqpy.lookupd.cluster_http import ClusterHttpApi
from nsqpy.lookupd.http import make_app as lookupd_app
from nsqpy.nsqadmin.options import NsqAdminOptions
from nsqpy.nsqadmin.server import NsqAdmin
from nsqpy.nsqd.http import make_app as nsqd_app
from nsqpy.options import NsqdOptions

PAGE = Path(__file__).parents[1] / "docs" / "http-api.md"
ROUTE = re.compile(r"`(GET|POST|PUT|DELETE|PATCH) (/[^`\s]*)`")
Route = tuple[str, str]


def served(app: web.Application) -> set[Route]:
    return {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None and route.method != "HEAD"
    }


def nsqd_routes() -> set[Route]:
    server = MagicMock()
    server.opts = NsqdOptions()
    return served(nsqd_app(server))


def lookupd_routes() -> set[Route]:
    alone = served(lookupd_app(MagicMock()))
    cluster = ClusterHttpApi(MagicMock(), MagicMock())
    return alone | served(lookupd_app(MagicMock(), cluster))


def nsqadmin_routes() -> set[Route]:
    opts = NsqAdminOptions(
        http_address="127.0.0.1:0",
        lookupd_http_addresses=["127.0.0.1:4161"],
        graphite_url="http://127.0.0.1:8080",
        proxy_graphite=True,  # adds /render
    )
    return served(NsqAdmin(opts).make_app())


def section(daemon: str) -> str:
    """The text of the page's ``## <daemon>`` section, up to the next ``## ``."""
    parts = re.split(r"^## ", PAGE.read_text(), flags=re.MULTILINE)
    found = [p for p in parts if p.split("\n", 1)[0].strip() == daemon]
    assert len(found) == 1, f"docs/http-api.md needs one '## {daemon}' section"
    return found[0]


def documented(text: str) -> set[Route]:
    return set(ROUTE.findall(text))


def headed(text: str) -> set[Route]:
    return {r for line in text.splitlines() if line.startswith("#") for r in ROUTE.findall(line)}


DAEMONS = [("nsqd", nsqd_routes), ("nsqlookupd", lookupd_routes), ("nsqadmin", nsqadmin_routes)]


def test_the_route_tables_are_found():
    counts = {daemon: len(routes()) for daemon, routes in DAEMONS}
    assert counts["nsqd"] >= 30 and counts["nsqlookupd"] >= 20 and counts["nsqadmin"] >= 30
    assert ("POST", "/pub") in nsqd_routes()
    assert ("POST", "/topic/partition/move") in lookupd_routes()  # (cluster only)
    assert ("GET", "/render") in nsqadmin_routes()  # (--proxy-graphite only)


def test_every_served_route_is_documented_in_its_daemons_section():
    missing = [
        f"{daemon}: {method} {path}"
        for daemon, routes in DAEMONS
        for method, path in sorted(routes() - documented(section(daemon)))
    ]
    assert not missing, missing


def test_every_route_heading_names_a_served_route():
    unknown = [
        f"{daemon}: {method} {path}"
        for daemon, routes in DAEMONS
        for method, path in sorted(headed(section(daemon)) - routes())
    ]
    assert not unknown, unknown
