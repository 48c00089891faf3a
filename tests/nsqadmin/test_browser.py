"""nsqadmin in a real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright).

Against the live stack and the real nsqadmin program: every page loads with no script
error and is screenshotted (under $NSQPY_ARTIFACTS, else the test's tmp dir); the pause,
empty, delete and tombstone buttons, once confirmed, change what nsqd's /stats says; a
dismissed confirmation changes nothing; a graph moves after publishing; the counter
counts; an unreachable node is shown on the page.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Dialog, Page, sync_playwright

from nsqpy.testing import WireClient, http_request, wait_for

from .helpers import AdminProgram, Stack, unique

CHROMIUM = "/usr/bin/chromium"


@dataclass
class Dialogs:
    """Confirmations seen; accepted unless a test sets ``accept`` to False."""

    accept: bool = True
    seen: list[str] = field(default_factory=list)

    def handle(self, dialog: Dialog) -> None:
        self.seen.append(dialog.message)
        if self.accept:
            dialog.accept()
        else:
            dialog.dismiss()


class Ui:
    """One headless Chromium, driven from its own thread.

    Playwright's sync API runs an event loop of its own in the thread that uses it, which
    would clash with the test suite's asyncio fixtures in the main thread; so every
    browser step runs here: ``ui.run(steps)`` calls ``steps(page, dialogs)`` with a fresh
    page and fails the test on any script error of the page.
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chromium")
        self._pool.submit(self._launch).result(60)

    def _launch(self) -> None:
        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=CHROMIUM, headless=True)

    def run(self, steps: Callable[[Page, Dialogs], None]) -> None:
        self._pool.submit(self._with_page, steps).result(120)

    def _with_page(self, steps: Callable[[Page, Dialogs], None]) -> None:
        context = self.browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.set_default_timeout(15_000)
        dialogs = Dialogs()
        script_errors: list[str] = []
        page.on("pageerror", lambda exc: script_errors.append(str(exc)))
        page.on("dialog", dialogs.handle)
        try:
            steps(page, dialogs)
        finally:
            context.close()
        assert script_errors == []

    def close(self) -> None:
        def stop() -> None:
            self.browser.close()
            self._pw.stop()

        self._pool.submit(stop).result(60)
        self._pool.shutdown()


@pytest.fixture(scope="module")
def ui() -> Iterator[Ui]:
    assert Path(CHROMIUM).exists(), "Debian's chromium is needed (scripts/install-system-deps)"
    browser = Ui()
    yield browser
    browser.close()


@pytest.fixture
def shots(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    base = os.environ.get("NSQPY_ARTIFACTS")
    folder = Path(base) / "nsqadmin" / request.node.name if base else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def open_page(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']")


def click_confirmed(page: Page, selector: str) -> None:
    """Click an action button, accept its confirmation, wait for the page it leads to."""
    with page.expect_navigation():
        page.click(selector)
    page.wait_for_selector("body[data-ready='1']")


def registered(stack: Stack, topic: str, nodes: int = 1) -> None:
    def check() -> bool:
        status, doc = stack.lookupd_get(f"/lookup?topic={topic}")
        return status == 200 and len(doc["producers"]) >= nodes

    wait_for(check)


def test_every_page_loads_and_shows_the_cluster(
    ui: Ui, stack: Stack, admin_program: AdminProgram, shots: Path
) -> None:
    def steps(page: Page, dialogs: Dialogs) -> None:
        topic = unique("shown")
        client = WireClient(stack.nsqd[0].tcp_port)
        try:
            client.send(b"  V2")
            client.send(f"SUB {topic} archive\n".encode())
            assert client.read_frame() == (0, b"OK")
            client.send(b"RDY 5\n")
            stack.pub(0, topic, b"one", b"two")
            registered(stack, topic)
            base = admin_program.url
            pages = {
                "topics": ("/", f"a[href='/topics/{topic}']"),
                "topic": (f"/topics/{topic}", "#channels a[href$='/archive']"),
                "channel": (f"/topics/{topic}/archive", "#clients td"),
                "nodes": ("/nodes", f"a[href='/nodes/{stack.node(0)}']"),
                "node": (f"/nodes/{stack.node(0)}", f"#node-topics a[href='/topics/{topic}']"),
                "counter": ("/counter", "#counter[data-total]"),
                "lookup": ("/lookup", "form#create"),
            }
            for name, (path, selector) in pages.items():
                open_page(page, base + path)
                page.wait_for_selector(selector, state="visible")
                assert page.locator(".alert.error").count() == 0, name
                page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
            open_page(page, f"{base}/topics/{topic}/archive")
            row = page.locator("#clients tbody tr").first.inner_text()
            assert stack.node(0) in row and "V2" in row
        finally:
            client.close()

    ui.run(steps)


def test_channel_buttons_pause_empty_and_delete(
    ui: Ui, stack: Stack, admin_program: AdminProgram, shots: Path
) -> None:
    def steps(page: Page, dialogs: Dialogs) -> None:
        topic = unique("chan")
        stack.nsqd_post(0, f"/topic/create?topic={topic}")
        stack.nsqd_post(0, f"/channel/create?topic={topic}&channel=work")
        stack.pub(0, topic, b"a", b"b", b"c")
        registered(stack, topic)
        wait_for(lambda: stack.channel_stats(0, topic, "work")["depth"] == 3)  # type: ignore[index]
        open_page(page, f"{admin_program.url}/topics/{topic}/work")

        click_confirmed(page, "button[data-name='pause']")
        assert stack.channel_stats(0, topic, "work")["paused"]  # type: ignore[index]
        assert page.locator("button[data-name='unpause']").is_visible()
        assert page.locator("h1 .badge.paused").is_visible()
        page.screenshot(path=str(shots / "paused.png"), full_page=True)

        click_confirmed(page, "button[data-name='empty']")
        assert stack.channel_stats(0, topic, "work")["depth"] == 0  # type: ignore[index]

        click_confirmed(page, "button[data-name='delete']")
        assert stack.channel_stats(0, topic, "work") is None
        assert page.url.endswith(f"/topics/{topic}")
        page.screenshot(path=str(shots / "after-delete.png"), full_page=True)

    ui.run(steps)


def test_topic_buttons_pause_tombstone_and_delete(
    ui: Ui, stack: Stack, admin_program: AdminProgram
) -> None:
    def steps(page: Page, dialogs: Dialogs) -> None:
        topic = unique("top")
        for i in (0, 1):
            stack.pub(i, topic, b"x")
        registered(stack, topic, nodes=2)
        open_page(page, f"{admin_program.url}/topics/{topic}")

        click_confirmed(page, ".actions button[data-name='pause']")
        assert stack.topic_stats(0, topic)["paused"] and stack.topic_stats(1, topic)["paused"]  # type: ignore[index]
        click_confirmed(page, ".actions button[data-name='unpause']")
        assert not stack.topic_stats(0, topic)["paused"]  # type: ignore[index]

        click_confirmed(page, f"button[data-name='tombstone'][data-url$='/{stack.node(1)}']")
        assert stack.topic_stats(1, topic) is None and stack.topic_stats(0, topic) is not None

        click_confirmed(page, ".actions button[data-name='delete']")
        assert stack.topic_stats(0, topic) is None
        assert page.url.endswith("/topics")

    ui.run(steps)


def test_a_dismissed_confirmation_changes_nothing(
    ui: Ui, stack: Stack, admin_program: AdminProgram
) -> None:
    def steps(page: Page, dialogs: Dialogs) -> None:
        topic = unique("keep")
        stack.pub(0, topic, b"x")
        registered(stack, topic)
        open_page(page, f"{admin_program.url}/topics/{topic}")
        dialogs.accept = False
        page.click(".actions button[data-name='delete']")
        wait_for(lambda: dialogs.seen)
        assert dialogs.seen == [f"Are you sure you want to delete topic {topic}?"]
        assert stack.topic_stats(0, topic) is not None
        assert page.url.endswith(f"/topics/{topic}")

    ui.run(steps)


def test_graph_moves_after_publishing(
    ui: Ui, stack: Stack, admin_program: AdminProgram, shots: Path
) -> None:
    def steps(page: Page, dialogs: Dialogs) -> None:
        topic = unique("graph")
        stack.nsqd_post(0, f"/topic/create?topic={topic}")
        registered(stack, topic)
        open_page(page, f"{admin_program.url}/topics/{topic}")
        rate = "figure.graph[data-metric='rate']"
        # One rate point means the topic was sampled twice before the publish, so a later
        # sample's rate covers it (a series' first sample has no rate: had it been taken
        # after the publish, the 40 messages would never show as a rate).
        page.wait_for_function(
            "sel => { const f = document.querySelector(sel);"
            " return f && parseInt(f.getAttribute('data-points') || '0', 10) >= 1; }",
            arg=rate,
        )
        assert float(page.get_attribute(rate, "data-max") or 0) == 0.0
        stack.pub(0, topic, *[b"m"] * 40)
        page.wait_for_function(
            "sel => { const f = document.querySelector(sel);"
            " return f && parseFloat(f.getAttribute('data-max') || '0') > 0; }",
            arg=rate,
            timeout=15_000,
        )
        # drawn by uPlot, the npm package served from nsqadmin's own static folder
        page.wait_for_selector(f"{rate}[data-renderer='uplot'] canvas")
        series = page.evaluate(
            "sel => document.querySelector(sel).nsqPlot.data[1]", f"{rate}[data-renderer='uplot']"
        )
        assert len(series) >= 2 and max(series) > 0
        page.screenshot(path=str(shots / "graph.png"), full_page=True)

    ui.run(steps)


def test_counter_counts_live(ui: Ui, stack: Stack, admin_program: AdminProgram) -> None:
    def steps(page: Page, dialogs: Dialogs) -> None:
        topic = unique("count")
        stack.nsqd_post(0, f"/topic/create?topic={topic}")
        stack.nsqd_post(0, f"/channel/create?topic={topic}&channel=c")
        registered(stack, topic)
        open_page(page, f"{admin_program.url}/counter")
        page.wait_for_selector("#counter[data-total]")
        start = int(page.get_attribute("#counter", "data-total") or "0")
        stack.pub(0, topic, *[b"n"] * 25)
        page.wait_for_function(
            "n => parseInt(document.querySelector('#counter').getAttribute('data-total')) >= n",
            arg=start + 25,
            timeout=15_000,
        )

    ui.run(steps)


def test_create_from_the_lookup_page(ui: Ui, stack: Stack, admin_program: AdminProgram) -> None:
    def steps(page: Page, dialogs: Dialogs) -> None:
        topic = unique("made")
        open_page(page, f"{admin_program.url}/lookup")
        page.fill("form#create input[name='topic']", topic)
        page.fill("form#create input[name='channel']", "first")
        with page.expect_navigation():
            page.click("form#create button[type='submit']")
        assert topic in stack.lookupd_get("/topics")[1]["topics"]
        assert stack.lookupd_get(f"/channels?topic={topic}")[1]["channels"] == ["first"]

    ui.run(steps)


def test_filter_box_hides_rows(ui: Ui, stack: Stack, admin_program: AdminProgram) -> None:
    def steps(page: Page, dialogs: Dialogs) -> None:
        a, b = unique("filtera"), unique("filterb")
        stack.pub(0, a, b"x")
        stack.pub(0, b, b"x")
        registered(stack, a)
        registered(stack, b)
        open_page(page, admin_program.url + "/topics")
        page.fill("input.filter[data-filter='topics']", a)
        assert page.locator(f"#topics a[href='/topics/{a}']").is_visible()
        assert not page.locator(f"#topics a[href='/topics/{b}']").is_visible()

    ui.run(steps)


def test_unreachable_nodes_and_refused_actions_are_shown(ui: Ui, stack: Stack, shots: Path) -> None:
    def steps(page: Page, dialogs: Dialogs) -> None:
        topic = unique("refused")
        stack.pub(0, topic, b"x")
        program = AdminProgram(
            f"--nsqd-http-address={stack.nsqd_http(0)}",
            "--nsqd-http-address=127.0.0.1:1",
            "--admin-user=alice",
        )
        try:
            dead = AdminProgram("--lookupd-http-address=127.0.0.1:1")
        except BaseException:
            program.stop()
            raise
        try:
            open_page(page, program.url + "/nodes")
            warning = page.locator(".alert.warning")
            assert warning.is_visible() and "127.0.0.1:1" in warning.inner_text()
            assert page.locator(f"a[href='/nodes/{stack.node(0)}']").is_visible()
            page.screenshot(path=str(shots / "partial.png"), full_page=True)
            open_page(page, dead.url + "/")
            error = page.locator(".alert.error")
            assert error.is_visible() and "UPSTREAM_ERROR" in error.inner_text()
            page.screenshot(path=str(shots / "down.png"), full_page=True)
            # Not an admin user: the action is refused and the page says so.
            open_page(page, f"{program.url}/topics/{topic}")
            page.click(".actions button[data-name='pause']")
            refused = page.wait_for_selector(".alert.error")
            assert refused is not None and "403" in refused.inner_text()
            assert "FORBIDDEN" in refused.inner_text()
            assert not stack.topic_stats(0, topic)["paused"]  # type: ignore[index]
        finally:
            codes = [program.stop(), dead.stop()]
        assert codes == [0, 0]

    ui.run(steps)


def lookupd_producers(stack: Stack, topic: str) -> list[str]:
    status, doc = stack.lookupd_get(f"/lookup?topic={topic}")
    if status != 200:
        return []
    return sorted(f"{p['broadcast_address']}:{p['http_port']}" for p in doc["producers"])


def test_tombstone_from_the_node_page(
    ui: Ui, stack: Stack, admin_program: AdminProgram, shots: Path
) -> None:
    def steps(page: Page, dialogs: Dialogs) -> None:
        topic, other = unique("nodetomb"), unique("nodekeep")
        for i in (0, 1):
            stack.pub(i, topic, b"x")
        stack.pub(1, other, b"y")
        registered(stack, topic, nodes=2)
        registered(stack, other)
        open_page(page, f"{admin_program.url}/nodes/{stack.node(1)}")
        page.screenshot(path=str(shots / "node.png"), full_page=True)
        button = f"#node-topics button[data-name='tombstone'][data-body*='\"{topic}\"']"
        click_confirmed(page, button)
        assert dialogs.seen == [
            f"Are you sure you want to tombstone topic {topic} on {stack.node(1)}?"
        ]
        # gone from that nsqd, kept on the other; lookupd no longer lists it there
        assert stack.topic_stats(1, topic) is None and stack.topic_stats(0, topic) is not None
        wait_for(lambda: lookupd_producers(stack, topic) == [stack.node(0)])
        assert stack.topic_stats(1, other) is not None  # the node's other topics stay
        assert page.locator(f"#node-topics a[href='/topics/{topic}']").count() == 0
        assert page.locator(f"#node-topics a[href='/topics/{other}']").is_visible()

    ui.run(steps)


def test_delete_inactive_topics_and_channels_from_the_lookup_page(
    ui: Ui, stack: Stack, admin_program: AdminProgram, shots: Path
) -> None:
    def steps(page: Page, dialogs: Dialogs) -> None:
        topic = unique("inactive")
        lookupd = f"http://{stack.lookupd_http}"
        for path in (
            f"/topic/create?topic={topic}",
            f"/channel/create?topic={topic}&channel=first",
            f"/channel/create?topic={topic}&channel=second",
        ):
            assert http_request("POST", lookupd + path, b"")[0] == 200
        open_page(page, f"{admin_program.url}/lookup")
        row = page.locator("#inactive tr", has_text=topic)
        assert "first" in row.inner_text() and "second" in row.inner_text()
        page.screenshot(path=str(shots / "lookup-inactive.png"), full_page=True)

        click_confirmed(page, f"#inactive button[data-url$='/api/topics/{topic}/first']")
        assert dialogs.seen == [f"Delete channel first of topic {topic}?"]
        assert stack.lookupd_get(f"/channels?topic={topic}")[1]["channels"] == ["second"]
        assert "first" not in page.locator("#inactive tr", has_text=topic).inner_text()

        click_confirmed(page, f"#inactive button[data-url$='/api/topics/{topic}']")
        assert topic not in stack.lookupd_get("/topics")[1]["topics"]
        assert page.locator("#inactive tr", has_text=topic).count() == 0

    ui.run(steps)


def graph_moved(page: Page, metric: str) -> None:
    """Wait until the graph of ``metric`` has drawn a maximum above zero."""
    page.wait_for_function(
        "sel => { const f = document.querySelector(sel);"
        " return f && parseFloat(f.getAttribute('data-max') || '0') > 0; }",
        arg=f"figure.graph[data-metric='{metric}']",
        timeout=15_000,
    )


def test_depth_and_channel_graphs_move_after_publishing(
    ui: Ui, stack: Stack, admin_program: AdminProgram, shots: Path
) -> None:
    def steps(page: Page, dialogs: Dialogs) -> None:
        topic = unique("graphs")
        stack.nsqd_post(0, f"/topic/create?topic={topic}")
        stack.nsqd_post(0, f"/channel/create?topic={topic}&channel=work")
        registered(stack, topic)
        client = WireClient(stack.nsqd[0].tcp_port)
        try:
            client.send(b"  V2")
            client.send(f"SUB {topic} work\n".encode())
            assert client.read_frame() == (0, b"OK")
            open_page(page, f"{admin_program.url}/topics/{topic}/work")
            for metric in ("rate", "depth", "in_flight_count"):
                page.wait_for_selector(f"figure.graph[data-metric='{metric}'][data-points]")
                sel = f"figure.graph[data-metric='{metric}']"
                assert float(page.get_attribute(sel, "data-max") or 0) == 0.0, metric
            client.send(b"RDY 5\n")  # five held in flight, never finished
            stack.pub(0, topic, *[b"g"] * 40)
            for _ in range(5):
                assert client.read_frame()[0] == 2  # a message
            for metric in ("rate", "depth", "in_flight_count"):
                graph_moved(page, metric)
            page.wait_for_function(
                "() => parseFloat(document.querySelector("
                "\"figure.graph[data-metric='in_flight_count']\").getAttribute('data-last')) === 5"
            )
            page.screenshot(path=str(shots / "channel-graphs.png"), full_page=True)
        finally:
            client.close()
        # a topic without channels keeps what is published: its own depth graph rises
        lonely = unique("depth")
        stack.nsqd_post(0, f"/topic/create?topic={lonely}")
        registered(stack, lonely)
        open_page(page, f"{admin_program.url}/topics/{lonely}")
        page.wait_for_selector("figure.graph[data-metric='depth'][data-points]")
        assert float(page.get_attribute("figure.graph[data-metric='depth']", "data-max") or 0) == 0
        stack.pub(0, lonely, *[b"d"] * 30)
        wait_for(lambda: stack.topic_stats(0, lonely)["depth"] == 30)  # type: ignore[index]
        graph_moved(page, "depth")
        page.screenshot(path=str(shots / "topic-depth-graph.png"), full_page=True)

    ui.run(steps)
