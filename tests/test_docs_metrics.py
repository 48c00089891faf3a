"""docs/metrics.md names every metric the daemons can emit, with its type and labels.

The names come from the code, not from a list kept beside it: nsqd's and nsqlookupd's real
``GET /metrics`` handlers are called in-process (no socket) on a broker, a registry and a
cluster snapshot holding one of everything (a topic, a channel, a partition in a cluster
role, a follower, an etcd call, an HTTP response), so every family is rendered with its
labels; the statsd keys are what nsqd's real collector makes of the same broker's stats.
Every ``Family(...)`` written in the source must then be one of the rendered families, so
a metric added where this fixture does not reach fails here rather than going unchecked.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from nsqpy.broker.broker import Broker
from nsqpy.broker.stats import memory_stats, stats
from nsqpy.cluster.model import Replicas, Snapshot, TopicMeta, Versioned
from nsqpy.lookupd.registry import PeerInfo, Registry
from nsqpy.metrics.lookupd_metrics import ClusterFigures, Peer, add_lookupd_metrics
from nsqpy.metrics.nsqd_metrics import NodeFigures, add_nsqd_metrics
from nsqpy.metrics.routes import REQUESTS
from nsqpy.metrics.statsd import StatsdCollector
from nsqpy.options import NsqdOptions
from nsqpy.testing import nsqd_options

ROOT = Path(__file__).parents[1]
DOC = ROOT / "docs" / "metrics.md"
SOURCE = ROOT / "src" / "nsqpy"
TOPIC, CHANNEL = "orders", "billing"
ETCD_CALL = ([0] * 12, 0.0, 0)  # one kind of etcd call, no time spent
TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.M)
SAMPLE = re.compile(r"^([a-z0-9_]+)(?:\{(.*)\})? \S+$", re.M)
LABEL = re.compile(r'([a-z_]+)="')
TICKED = re.compile(r"`([^`]+)`")
STATSD_KINDS = {"c": "counter", "g": "gauge"}

# (name, type, labels), as a scrape shows them: a counter's name with its ``_total``; the
# labels None for a family without a sample
Metric = tuple[str, str, frozenset[str] | None]


@dataclass
class Nsqd:
    """What nsqd's exporter reads (``NsqdView``), as a node of a cluster."""

    broker: Broker
    opts: NsqdOptions
    connections: list[object] = field(default_factory=list)

    def cluster_figures(self) -> NodeFigures:
        return NodeFigures(
            live=True,
            reports_written=1,
            forwarded=0,
            forward_failures=0,
            lags=[(TOPIC, 0, "node-2", 0, 0.0)],
            lease_left=3.0,
            etcd_latency={"get": ETCD_CALL},
        )


@dataclass
class Lookupd:
    """What nsqlookupd's exporter reads (``LookupdView``), as a node of a cluster."""

    registry: Registry
    command_counts: dict[str, int] = field(default_factory=lambda: {"PING": 1})
    connections: list[Peer] = field(default_factory=list)
    rpc_connections: int = 0

    def cluster_figures(self) -> ClusterFigures:
        replicas = Versioned(Replicas("node-1", ("node-1",)), 1)
        snapshot = Snapshot(topics={TOPIC: TopicMeta(1, 1)}, replicas={(TOPIC, 0): replicas})
        return ClusterFigures(snapshot, True, 0, 0, etcd_latency={"get": ETCD_CALL})


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """One topic with one channel, its partition reported as a cluster node reports it."""
    b = Broker(nsqd_options(tmp_path, e2e_processing_latency_percentiles=[0.99]))
    b.channel(b.topic(TOPIC), CHANNEL)
    b.cluster_mode = True
    b.partition_info = lambda topic, partition: {"isr": ["node-1"]}
    yield b
    b.close()


async def scrape(app: web.Application) -> str:
    """The text of ``GET /metrics``, from the route's own handler."""
    app[REQUESTS][("/ping", 200)] += 1  # (one response counted before)
    for route in app.router.routes():
        if route.method == "GET" and route.resource and route.resource.canonical == "/metrics":
            response = await route.handler(make_mocked_request("GET", "/metrics", app=app))
            assert isinstance(response, web.Response) and response.text is not None
            return response.text
    raise AssertionError("no GET /metrics route")


def metrics(text: str) -> list[Metric]:
    """Each family of a scrape with the labels its samples carry (``le`` aside)."""
    labels: dict[str, set[str]] = {}
    kinds = dict(TYPE_LINE.findall(text))
    for sample, raw in SAMPLE.findall(text):
        base = re.sub(r"_(bucket|sum|count)$", "", sample)
        name = sample if sample in kinds else base
        labels.setdefault(name, set()).update(LABEL.findall(raw or ""))
    return [
        (n, k, frozenset(labels[n] - {"le"}) if n in labels else None) for n, k in kinds.items()
    ]


def statsd_keys(broker: Broker) -> list[tuple[str, str]]:
    """(key, type) of every line nsqd's statsd push makes, names turned into placeholders."""
    topics = stats(broker, include_clients=False, include_mem=False)["topics"]
    assert isinstance(topics, list)
    lines = StatsdCollector("").collect(topics, memory_stats())
    out = []
    for line in lines:
        key, _, rest = line.strip().rpartition(":")
        key = key.replace(f"topic.{TOPIC}.", "topic.<t>.")
        key = key.replace(f".channel.{CHANNEL}.", ".channel.<c>.")
        key = re.sub(r"\.partition\.\d+\.", ".partition.<p>.", key)
        key = re.sub(r"e2e_processing_latency_\d+$", "e2e_processing_latency_<pct>", key)
        out.append((key, STATSD_KINDS[rest.rpartition("|")[2]]))
    return sorted(set(out))


def documented() -> dict[str, tuple[str, frozenset[str]]]:
    """The doc's table rows: first cell a ticked name, then its type, then its labels
    (ticked, or none)."""
    rows: dict[str, tuple[str, frozenset[str]]] = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not (name := TICKED.fullmatch(cells[0])):
            continue
        labels = frozenset(TICKED.findall(cells[2])) if len(cells) > 3 else frozenset()
        rows[name[1]] = (cells[1], labels)
    return rows


async def scrapes(broker: Broker, registry: Registry) -> list[Metric]:
    """The metrics of nsqd's scrape, then of nsqlookupd's."""
    nsqd = web.Application()
    add_nsqd_metrics(nsqd, Nsqd(broker, broker.opts))
    lookupd = web.Application()
    add_lookupd_metrics(lookupd, Lookupd(registry))
    return metrics(await scrape(nsqd)) + metrics(await scrape(lookupd))


async def test_every_metric_of_metrics_is_documented(broker: Broker) -> None:
    registry = Registry()
    peer = PeerInfo("n", "127.0.0.1:1", "host", "127.0.0.1", 4150, 4151, "1.3.0")
    registry.identify(peer)
    registry.register(peer, TOPIC, CHANNEL)
    found = await scrapes(broker, registry)
    rows = documented()
    wrong = []
    for name, kind, labels in found:
        row = rows.get(name)
        if labels is None:
            wrong.append(f"{name} has no sample here: give the fixture what it counts")
        elif row is None:
            wrong.append(f"{name} ({kind}) is missing")
        elif row != (kind, labels):
            wrong.append(f"{name}: the doc says {row}, a scrape shows {(kind, sorted(labels))}")
    emitted = {name for name, _, _ in found}
    for name in rows:
        if name.startswith("nsq") and "." not in name and name not in emitted:
            wrong.append(f"{name} is documented but never emitted")
    assert not wrong, wrong


def test_every_statsd_key_is_documented(broker: Broker) -> None:
    rows = documented()
    keys = statsd_keys(broker)
    assert any(".partition.<p>." in key for key, _ in keys)  # (the cluster's keys too)
    wrong = []
    for key, kind in keys:
        if key not in rows:
            wrong.append(f"{key} ({kind}) is missing")
        elif rows[key][0] != kind:
            wrong.append(f"{key}: the doc says {rows[key][0]}, nsqd sends a {kind}")
    sent = {key for key, _ in keys}
    for name in rows:
        if "." in name and name not in sent:
            wrong.append(f"{name} is documented but never sent")
    assert not wrong, wrong


def _pattern(node: ast.expr) -> re.Pattern[str] | None:
    """The names a ``Family`` name argument can take: a literal, or an f-string whose
    holes stand for a word; None for anything else (a name from a table: rendered)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.compile(re.escape(node.value))
    if isinstance(node, ast.JoinedStr):
        parts = [
            re.escape(str(p.value)) if isinstance(p, ast.Constant) else "[a-z_]+"
            for p in node.values
        ]
        return re.compile("".join(parts))
    return None


async def test_every_family_in_the_source_is_rendered(broker: Broker) -> None:
    rendered = set()
    for name, kind, _ in await scrapes(broker, Registry()):
        rendered.add(name.removesuffix("_total") if kind == "counter" else name)
    unseen = []
    for path in sorted(SOURCE.rglob("*.py")):
        text = path.read_text()
        if "Family(" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Family"):
                continue
            pattern = _pattern(node.args[0]) if node.args else None
            if pattern is not None and not any(pattern.fullmatch(n) for n in rendered):
                unseen.append(f"{path.relative_to(ROOT)}:{node.lineno} {pattern.pattern}")
    assert not unseen, f"families this test's fixture does not render: {unseen}"
