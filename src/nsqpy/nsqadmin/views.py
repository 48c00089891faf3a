"""The bodies of nsqadmin's topic pages, built from the API's JSON documents. Pure: no I/O.

One method per page: topic list, topic (per-node queue table with tombstone buttons,
channel table, actions, graphs), channel (per-node table, client connections). Each takes
the document the JSON API returns for the same resource, so the page and the API cannot
disagree. The node, counter and lookup pages are in ``views_nodes``; a cluster topic's
partitions table is ``views_cluster``'s. Imports render, graphite (for the graphite image
URLs), views_cluster and the stats types.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsqpy.nsqadmin.graphite import metric_key, rate_target, render_url
from nsqpy.nsqadmin.render import (
    NONE,
    Links,
    attrs,
    button,
    commafy,
    duration_ns,
    esc,
    filter_box,
    graph,
    rate_text,
    table,
)
from nsqpy.nsqadmin.stats import Json
from nsqpy.nsqadmin.views_cluster import partitions_section


@dataclass
class Graphite:
    """What the pages need to draw graphite images and rates (``--graphite-url``)."""

    url: str
    prefix: str
    counter_format: str
    gauge_format: str
    interval_s: int

    def key(self, topic: str, channel: str, metric: str) -> str:
        return metric_key(
            prefix=self.prefix,
            counter_format=self.counter_format,
            gauge_format=self.gauge_format,
            node="*",
            topic=topic,
            channel=channel,
            metric=metric,
        )

    def rate_target(self, topic: str) -> str:
        return rate_target(
            prefix=self.prefix,
            counter_format=self.counter_format,
            gauge_format=self.gauge_format,
            node="*",
            topic=topic,
            channel="",
        )


def action_buttons(api: str, *, paused: bool, what: str, kind: str, after: str) -> str:
    """Pause (or Unpause), Empty Queue and Delete for a topic or a channel, each confirmed;
    ``what`` names it in the confirmations, Delete goes to ``after``."""
    pause = "unpause" if paused else "pause"
    return (
        button(
            pause.capitalize(),
            method="POST",
            url=api,
            body={"action": pause},
            confirm=f"Are you sure you want to {pause} {what}?",
            name=pause,
        )
        + button(
            "Empty Queue",
            method="POST",
            url=api,
            body={"action": "empty"},
            confirm=f"Are you sure you want to empty {what}?",
            name="empty",
        )
        + button(
            f"Delete {kind}",
            method="DELETE",
            url=api,
            danger=True,
            name="delete",
            confirm=f"Are you sure you want to delete {what}?",
            after=after,
        )
    )


def paused_badge(paused: bool) -> str:
    return ' <span class="badge paused">paused</span>' if paused else ""


def mem_disk(d: Json) -> str:
    return f"{commafy(d['memory_depth'])} + {commafy(d['backend_depth'])}"


def client_attributes(c: Json) -> str:
    """TLS, deflate, snappy, auth and sample-rate flags of a client connection."""
    parts = []
    if c["tls"]:
        parts.append(f"TLS {c['tls_version']}".strip())
    if c["deflate"]:
        parts.append("Deflate")
    if c["snappy"]:
        parts.append("Snappy")
    if c["authed"]:
        parts.append(f"Authed {c['auth_identity']}".strip())
    if c["sample_rate"]:
        parts.append(f"Sampled {c['sample_rate']}%")
    return ", ".join(parts) or NONE


def channel_sums(channels: list[Json]) -> list[str]:
    """In-flight and deferred counts of a topic: the sums over its channels."""
    return [
        commafy(sum(c["in_flight_count"] for c in channels)),
        commafy(sum(c["deferred_count"] for c in channels)),
    ]


def topic_counters(t: Json) -> list[str]:
    """A topic's queue cells, for one node's row or the total: depth, memory + disk,
    in-flight, deferred, messages, rate, channels."""
    return [
        commafy(t["depth"]),
        mem_disk(t),
        *channel_sums(t["channels"]),
        commafy(t["message_count"]),
        rate_text(t.get("rate")),
        commafy(len(t["channels"])),
    ]


# The columns of ``channel_counters``: a topic page's channel table and a channel page's
# per-node table show the same counters.
CHANNEL_COUNTER_HEADERS = [
    "Depth",
    "Memory + Disk",
    "In-Flight",
    "Deferred",
    "Requeued",
    "Timed Out",
    "Messages",
    "Rate",
    "Connections",
]


def channel_counters(c: Json) -> list[str]:
    """A channel's cells under ``CHANNEL_COUNTER_HEADERS`` (one node's or the sum)."""
    return [
        commafy(c["depth"]),
        mem_disk(c),
        commafy(c["in_flight_count"]),
        commafy(c["deferred_count"]),
        commafy(c["requeue_count"]),
        commafy(c["timeout_count"]),
        commafy(c["message_count"]),
        rate_text(c.get("rate")),
        commafy(c["client_count"]),
    ]


def e2e_text(latency: Json) -> str:
    items = latency["percentiles"] or []
    text = ", ".join(f"p{p['quantile'] * 100:g}: {duration_ns(int(p['max']))}" for p in items)
    return text or NONE


class Views:
    """Page bodies for one nsqadmin configuration."""

    def __init__(
        self, links: Links, *, refresh_ms: int, graphite: Graphite | None, proxy_graphite: bool
    ) -> None:
        self.links = links
        self.refresh_ms = refresh_ms  # 0: sampling is off, no built-in graphs
        self.graphite = graphite
        self.graphite_base = (
            (links.to() if proxy_graphite else graphite.url).rstrip("/") if graphite else ""
        )

    def a(self, href: str, text: str, cls: str | None = None) -> str:
        return f"<a{attrs(href=href, class_=cls)}>{esc(text)}</a>"

    # -- graphs ----------------------------------------------------------------------------

    def graphs(self, topic: str, channel: str = "") -> str:
        """Built-in graphs (sampled history) and, when configured, graphite images."""
        out = ""
        if self.refresh_ms:
            metrics = [("message rate (msgs/s)", "rate"), ("depth", "depth")]
            if channel:
                metrics.append(("in-flight", "in_flight_count"))
            out += (
                '<div class="graphs">'
                + "".join(
                    graph(
                        self.links,
                        title,
                        topic=topic,
                        channel=channel,
                        metric=metric,
                        refresh_ms=self.refresh_ms,
                    )
                    for title, metric in metrics
                )
                + "</div>"
            )
        if self.graphite:
            imgs = []
            for metric in ("depth", "message_count"):
                target = f"sumSeries({self.graphite.key(topic, channel, metric)})"
                url = render_url(
                    self.graphite_base,
                    target,
                    self.graphite.interval_s,
                    large=False,
                    counter=metric == "message_count",
                )
                imgs.append(f'<img class="graphite"{attrs(src=url, alt=f"graphite {metric}")}>')
            out += '<div class="graphite-graphs">' + "".join(imgs) + "</div>"
        return out

    # -- topics ----------------------------------------------------------------------------

    def topics(self, rows: list[Json], q: str) -> str:
        shown = [t for t in rows if q.lower() in t["topic_name"].lower()]
        headers = ["Topic", "Depth", "Messages", "Rate", "Channels", "Nodes"]
        if self.graphite:
            headers.append("Rate (graphite)")
        cells = []
        for t in shown:
            name = t["topic_name"]
            row = [
                self.a(self.links.topic(name), name) + paused_badge(t["paused"]),
                commafy(t["depth"]),
                commafy(t["message_count"]),
                rate_text(t["rate"]),
                commafy(len(t["channels"])),
                commafy(len(t["nodes"])),
            ]
            if self.graphite:
                target = self.graphite.rate_target(name)
                row.append(
                    f"<span{attrs(class_='graphite-rate', data_graphite_target=target)}>…</span>"
                )
            cells.append(row)
        found = f"{len(shown)} of {len(rows)} topics" if q else f"{len(rows)} topics"
        if q:
            found += f" matching “{q}”"
        listing = (
            table(headers, cells, table_id="topics")
            if shown
            else '<p class="empty">No topics found.</p>'
        )
        return (
            f'<h1>Topics</h1><p class="summary">{esc(found)}</p>'
            + filter_box("topics", "filter topics")
            + listing
        )

    def topic(self, name: str, t: Json) -> str:
        actions = action_buttons(
            self.links.to("api", "topics", name),
            paused=bool(t["paused"]),
            what=f"topic {name}",
            kind="Topic",
            after=self.links.to("topics"),
        )
        rows = []
        for n in t["nodes"]:
            tomb = button(
                "Tombstone",
                method="DELETE",
                url=self.links.to("api", "nodes", n["node"]),
                body={"topic": name},
                name="tombstone",
                danger=True,
                confirm=f"Are you sure you want to tombstone topic {name} on {n['node']}?",
            )
            rows.append(
                [
                    self.a(self.links.node(n["node"]), n["node"]) + paused_badge(n["paused"]),
                    *topic_counters(n),
                    tomb,
                ]
            )
        foot = ["Total", *topic_counters(t), ""]
        nodes = table(
            [
                "NSQd Host",
                "Depth",
                "Memory + Disk",
                "In-Flight",
                "Deferred",
                "Messages",
                "Rate",
                "Channels",
                "",
            ],
            rows,
            table_id="topic-nodes",
            foot=foot,
        )
        channels = (
            self.channel_table(name, t["channels"])
            if t["channels"]
            else '<p class="empty">No channels.</p>'
        )
        return (
            f'<h1>Topic <span class="name">{esc(name)}</span>{paused_badge(t["paused"])}</h1>'
            f'<div class="actions">{actions}</div>'
            + self.graphs(name)
            + "<h2>Topic message queue</h2>"
            + nodes
            + (partitions_section(self.links, t["partitions"], name) if "partitions" in t else "")
            + "<h2>Channel message queues</h2>"
            + channels
        )

    def channel_table(self, topic: str, channels: list[Json]) -> str:
        rows = [
            [
                self.a(self.links.channel(topic, c["channel_name"]), c["channel_name"])
                + paused_badge(c["paused"]),
                *channel_counters(c),
                esc(e2e_text(c["e2e_processing_latency"])),
            ]
            for c in channels
        ]
        return table(
            ["Channel", *CHANNEL_COUNTER_HEADERS, "E2E latency"], rows, table_id="channels"
        )

    # -- channel ---------------------------------------------------------------------------

    def channel(self, topic: str, name: str, c: Json) -> str:
        actions = action_buttons(
            self.links.to("api", "topics", topic, name),
            paused=bool(c["paused"]),
            what=f"channel {name} of topic {topic}",
            kind="Channel",
            after=self.links.topic(topic),
        )
        nodes = table(
            ["NSQd Host", *CHANNEL_COUNTER_HEADERS],
            [self.channel_row(n, n["node"]) for n in c["nodes"]],
            table_id="channel-nodes",
            foot=self.channel_row(c, ""),
        )
        return (
            f"<h1>Topic {self.a(self.links.topic(topic), topic, 'name')}"
            f' / Channel <span class="name">{esc(name)}</span>{paused_badge(c["paused"])}</h1>'
            f'<div class="actions">{actions}</div>'
            + self.graphs(topic, name)
            + "<h2>Channel message queues</h2>"
            + nodes
            + "<h2>Client connections</h2>"
            + self.clients(c["clients"])
        )

    def channel_row(self, n: Json, node: str) -> list[str]:
        host = self.a(self.links.node(node), node) + paused_badge(n["paused"]) if node else "Total"
        return [host, *channel_counters(n)]

    def clients(self, clients: list[Json]) -> str:
        if not clients:
            return '<p class="empty">No clients connected.</p>'
        rows = [
            [
                esc(c["hostname"] or c["remote_address"]),
                esc(f"V2 {c['user_agent']}".strip()),
                esc(client_attributes(c)),
                self.a(self.links.node(c["node"]), c["node"]),
                commafy(c["in_flight_count"]),
                commafy(c["ready_count"]),
                commafy(c["finish_count"]),
                commafy(c["requeue_count"]),
                commafy(c["message_count"]),
                esc(duration_ns(c["connected"])),
            ]
            for c in clients
        ]
        return table(
            [
                "Client Host",
                "Protocol",
                "Attributes",
                "NSQd Host",
                "In-Flight",
                "Ready Count",
                "Finished",
                "Requeued",
                "Messages",
                "Connected",
            ],
            rows,
            table_id="clients",
        )
