"""nsqadmin's HTML pages over HTTP (no browser): every page renders what the cluster holds,
errors are shown on the page, links honour --base-path, nothing is loaded from elsewhere."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from nsqpy.nsqadmin.server import STATIC_DIR
from nsqpy.testing import WireClient

from .helpers import AdminClient, MakeAdmin, Stack, registered, unique


class Refs(HTMLParser):
    """Every href/src/action and the text of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.refs += [
            v or "" for k, v in attrs if k in ("href", "src", "action", "data-url", "data-history")
        ]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> Refs:
    refs = Refs()
    refs.feed(html)
    return refs


async def test_every_page_renders_the_cluster(stack: Stack, lookupd_admin: AdminClient) -> None:
    topic = unique()
    client = WireClient(stack.nsqd[0].tcp_port)
    try:
        client.send(b"  V2")
        client.send(f"SUB {topic} ch\n".encode())
        assert client.read_frame() == (0, b"OK")
        stack.pub(0, topic, b"a", b"b")
        await registered(stack, topic)
        pages = {
            "/": [topic],
            "/topics": [topic],
            f"/topics/{topic}": [topic, stack.node(0), "ch", "Delete Topic", "Tombstone"],
            f"/topics/{topic}/ch": [
                topic,
                "ch",
                "Client connections",
                "127.0.0.1",
                "Delete Channel",
                "Empty Queue",
            ],
            "/nodes": [stack.node(0), stack.node(1), topic, "Lookupd Conns"],
            f"/nodes/{stack.node(0)}": [topic, "ch"],
            "/counter": ["Messages processed"],
            "/lookup": [stack.lookupd_http, "Create"],
        }
        for path, wanted in pages.items():
            status, html = await lookupd_admin.get(path)
            assert status == 200, (path, html)
            text = " ".join(parse(html).text)
            for want in wanted:
                assert want in text or want in html, (path, want)
            assert "alert error" not in html and "WARNING" not in text, path
    finally:
        client.close()


async def test_search_filters_the_topic_list(stack: Stack, nsqd_admin: AdminClient) -> None:
    keep, drop = unique("keepme"), unique("other")
    stack.pub(0, keep, b"x")
    stack.pub(0, drop, b"x")
    status, html = await nsqd_admin.get("/topics?q=KEEPME")
    assert status == 200 and keep in html and drop not in html
    assert 'value="KEEPME"' in html  # the search box keeps the query
    status, html = await nsqd_admin.get(f"/nodes?q={stack.node(1)}")
    assert stack.node(1) in html and f"/nodes/{stack.node(0)}" not in html


async def test_unreachable_nodes_are_shown_on_the_page(stack: Stack, make_admin: MakeAdmin) -> None:
    topic = unique()
    stack.pub(0, topic, b"x")
    partial = await make_admin(nsqd_http_addresses=[stack.nsqd_http(0), "127.0.0.1:1"])
    for path in ("/", "/nodes", f"/topics/{topic}", "/counter"):
        status, html = await partial.get(path)
        assert status == 200, path
        assert "WARNING" in html and "127.0.0.1:1" in html and "connection refused" in html, path
    dead = await make_admin(lookupd_http_addresses=["127.0.0.1:1"])
    for path in (
        "/",
        "/topics/t",
        "/topics/t/c",
        "/nodes",
        "/nodes/127.0.0.1:1",
        "/counter",
        "/lookup",
    ):
        status, html = await dead.get(path)
        assert status == 200, path  # as NSQ's nsqadmin: the page is served, the API says 502
        assert 'class="alert error"' in html and "UPSTREAM_ERROR" in html, path
        assert "<nav>" in html  # a whole page, never a blank one
    status, doc = await dead.get("/api/topics")
    assert status == 502 and doc["message"].startswith("UPSTREAM_ERROR")


async def test_missing_and_invalid_names_are_pages_too(
    stack: Stack, nsqd_admin: AdminClient
) -> None:
    status, html = await nsqd_admin.get(f"/topics/{unique('missing')}")
    assert status == 404 and "TOPIC_NOT_FOUND" in html
    status, html = await nsqd_admin.get("/nodes/127.0.0.1:1")
    assert status == 404 and "NODE_NOT_FOUND" in html
    status, html = await nsqd_admin.get("/topics/bad%20name")
    assert status == 400 and "INVALID_TOPIC" in html
    status, html = await nsqd_admin.get("/topics/t/%3Cscript%3E")
    assert status == 400 and "INVALID_CHANNEL" in html and "<script>" not in html


async def test_base_path_prefixes_every_route_and_link(stack: Stack, make_admin: MakeAdmin) -> None:
    topic = unique()
    stack.pub(0, topic, b"x")
    admin = await make_admin(
        nsqd_http_addresses=[stack.nsqd_http(0)],
        base_path="nsqadmin/",
        stats_sample_interval_ms=1000,
    )
    assert admin.admin.opts.base_path == "/nsqadmin"
    status, html = await admin.get(f"/topics/{topic}")
    assert status == 200
    refs = parse(html).refs
    assert refs and all(r.startswith("/nsqadmin/") or r == "/nsqadmin" for r in refs), refs
    status, doc = await admin.get("/api/topics")
    assert status == 200 and topic in doc["topics"]
    status, _ = await admin.get("")
    assert status == 200
    status, js = await admin.get("/static/nsqadmin.js")
    assert status == 200 and "confirm" in js
    root = f"http://127.0.0.1:{admin.admin.http_port}/api/topics"
    async with admin.session.get(root) as resp:
        assert resp.status == 404


async def test_nothing_is_loaded_from_another_site(stack: Stack, nsqd_admin: AdminClient) -> None:
    for path in ("/", "/nodes", "/counter", "/lookup"):
        _, html = await nsqd_admin.get(path)
        assert all(r.startswith("/") for r in parse(html).refs), path
    for asset in STATIC_DIR.iterdir():
        text = asset.read_text()
        code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # (a package's banner names its home)
        urls = re.findall(r"https?://[^\s\"')]+", code)
        assert urls in ([], ["http://www.w3.org/2000/svg"]), (asset.name, urls)  # SVG namespace
        status, body = await nsqd_admin.get(f"/static/{asset.name}")
        assert status == 200 and body == text


async def test_pages_are_compressed_when_asked(nsqd_admin: AdminClient) -> None:
    async with nsqd_admin.session.get(
        nsqd_admin.url + "/nodes", headers={"Accept-Encoding": "gzip"}
    ) as resp:
        assert resp.status == 200 and resp.headers["Content-Encoding"] == "gzip"
        assert "<nav>" in await resp.text()


async def test_dev_static_dir_replaces_the_bundled_assets(
    stack: Stack, make_admin: MakeAdmin, tmp_path: Path
) -> None:
    (tmp_path / "nsqadmin.css").write_text("body { color: red; }")
    admin = await make_admin(nsqd_http_addresses=[stack.nsqd_http(0)], dev_static_dir=str(tmp_path))
    assert await admin.get("/static/nsqadmin.css") == (200, "body { color: red; }")
    assert await admin.get("/static/nsqadmin.js") == (404, {"message": "NOT_FOUND"})


class Graphite(HTMLParser):
    """The graphite parts of a page: image URLs, rate targets and the table headings."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.targets: list[str] = []
        self.headings: list[str] = []
        self._in_th = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img" and "graphite" in (a.get("class") or ""):
            self.images.append(a.get("src") or "")
        if "data-graphite-target" in a:
            self.targets.append(a["data-graphite-target"] or "")
        self._in_th = tag == "th"

    def handle_endtag(self, tag: str) -> None:
        self._in_th = False

    def handle_data(self, data: str) -> None:
        if self._in_th:
            self.headings.append(data.strip())


def graphite_parts(html: str) -> Graphite:
    parts = Graphite()
    parts.feed(html)
    return parts


def render_target(src: str) -> str:
    from urllib.parse import parse_qs, urlsplit

    (target,) = parse_qs(urlsplit(src).query)["target"]
    return target


async def test_graphite_graphs_and_rates_on_the_pages(
    stack: Stack, make_admin: MakeAdmin, graphite: tuple[str, list[dict[str, str]]]
) -> None:
    url, seen = graphite
    topic = unique("graphed")
    stack.nsqd_post(0, f"/topic/create?topic={topic}")
    stack.nsqd_post(0, f"/channel/create?topic={topic}&channel=work")
    admin = await make_admin(
        nsqd_http_addresses=[stack.nsqd_http(0)],
        graphite_url=url,
        statsd_prefix="nsq.%s",
        statsd_interval_ms=60_000,
    )
    counter = f"stats.counters.nsq.*.topic.{topic}.message_count.count"

    # topic list: a "Rate (graphite)" column whose cells name the series to ask for
    status, html = await admin.get("/topics")
    parts = graphite_parts(html)
    assert status == 200 and "Rate (graphite)" in parts.headings
    assert f"sumSeries({counter})" in parts.targets
    # the page script asks /api/graphite for each target; graphite gives 300 per 60 s
    from urllib.parse import quote

    status, doc = await admin.get(
        f"/api/graphite?metric=rate&target={quote(f'sumSeries({counter})')}"
    )
    assert (status, doc) == (200, {"rate": "5.00"})
    assert seen[-1]["target"] == f"sumSeries({counter})"

    # topic and channel pages: sparklines of depth and message count from graphite itself
    channel_counter = f"stats.counters.nsq.*.topic.{topic}.channel.work.message_count.count"
    for path, depth, count in [
        (f"/topics/{topic}", f"stats.gauges.nsq.*.topic.{topic}.depth", counter),
        (
            f"/topics/{topic}/work",
            f"stats.gauges.nsq.*.topic.{topic}.channel.work.depth",
            channel_counter,
        ),
    ]:
        status, html = await admin.get(path)
        images = graphite_parts(html).images
        assert status == 200 and len(images) == 2, path
        assert all(src.startswith(f"{url}/render?") for src in images), images
        assert [render_target(src) for src in images] == [
            f'summarize(sumSeries({depth}),"60sec","avg")',
            f'summarize(sumSeries({count}),"60sec","avg")',
        ]
        for src in images:  # each is an image graphite serves
            async with admin.session.get(src) as resp:
                assert (resp.status, resp.content_type) == (200, "image/png")

    # --proxy-graphite: the images come through nsqadmin's own /render
    proxied = await make_admin(
        nsqd_http_addresses=[stack.nsqd_http(0)], graphite_url=url, proxy_graphite=True
    )
    _, html = await proxied.get(f"/topics/{topic}")
    images = graphite_parts(html).images
    assert len(images) == 2 and all(src.startswith("/render?") for src in images), images
    status, png = await proxied.get(images[0])
    assert (status, png) == (200, "\x89PNG fake")

    # without --graphite-url, none of it
    _, html = await (await make_admin(nsqd_http_addresses=[stack.nsqd_http(0)])).get("/topics")
    parts = graphite_parts(html)
    assert "Rate (graphite)" not in parts.headings and not parts.targets


async def test_pages_load_the_graph_package_from_the_static_folder(
    nsqd_admin: AdminClient,
) -> None:
    _, html = await nsqd_admin.get("/")
    refs = parse(html).refs
    assert "/static/uPlot.iife.min.js" in refs and "/static/uPlot.min.css" in refs
    status, js = await nsqd_admin.get("/static/uPlot.iife.min.js")
    assert status == 200 and "uPlot" in js
    status, license_text = await nsqd_admin.get("/static/uPlot.LICENSE.txt")
    assert status == 200 and "MIT" in license_text
