"""The bodies of nsqadmin's node list, node, counter and lookup pages. Pure: no I/O.

Extends ``views.Views`` (topic pages) with the pages about the cluster's nodes; each takes
the document the JSON API returns for the same resource. In an nsqpy cluster the node list
and node pages add what ``views_cluster`` draws (node id, lease, counts, coordinator).
Imports render, views and views_cluster.
"""

from __future__ import annotations

from nsqpy.nsqadmin.render import NONE, alert, attrs, button, commafy, esc, filter_box, graph, table
from nsqpy.nsqadmin.stats import Json
from nsqpy.nsqadmin.views import Views, mem_disk, paused_badge
from nsqpy.nsqadmin.views_cluster import (
    NODE_HEADERS,
    cluster_summary,
    held_partitions,
    node_cells,
    node_summary_cells,
)


class ClusterViews(Views):
    """Every page body: the topic pages of ``Views`` plus nodes, node, counter, lookup."""

    # -- nodes -----------------------------------------------------------------------------

    def nodes(
        self, nodes: list[Json], q: str, *, lookupd: bool, cluster: Json | None = None
    ) -> str:
        rows = []
        for n in nodes:
            node = f"{n['broadcast_address']}:{n['http_port']}"
            if q and q.lower() not in f"{n['hostname']} {node} {n.get('node_id', '')}".lower():
                continue
            topics = " ".join(
                self.a(
                    self.links.topic(t["topic"]),
                    t["topic"],
                    "tombstoned" if t["tombstoned"] else None,
                )
                for t in n["topics"]
            )
            version = esc(n["version"] or "unknown") + (
                ' <span class="badge old">out of date</span>' if n["out_of_date"] else ""
            )
            row = [
                self.a(self.links.node(node), n["hostname"] or node),
                esc(n["broadcast_address"]),
                esc(n["tcp_port"]),
                esc(n["http_port"]),
                version,
            ]
            if lookupd:
                row.append(commafy(len(n["remote_addresses"])))
            if cluster is not None:
                row.extend(node_cells(self.links, n, cluster.get("removing_nodes") or {}))
            rows.append([*row, f'<div class="wrap">{topics or NONE}</div>'])
        headers = ["Hostname", "Broadcast Address", "TCP Port", "HTTP Port", "Version"]
        if lookupd:
            headers.append("Lookupd Conns")
        if cluster is not None:
            headers.extend([*NODE_HEADERS, "Drain"])
        listing = (
            table([*headers, "Topics"], rows, table_id="nodes")
            if rows
            else '<p class="empty">No nodes found.</p>'
        )
        return (
            f"<h1>NSQd Nodes ({len(rows)})</h1>"
            + filter_box("nodes", "filter nodes")
            + listing
            + (cluster_summary(self.links, cluster) if cluster is not None else "")
        )

    def node(self, name: str, doc: Json) -> str:
        p = doc["producer"]
        rows = []
        for t in doc["topics"]:
            topic = t["topic_name"]
            tomb = button(
                "Tombstone",
                method="DELETE",
                url=self.links.to("api", "nodes", name),
                body={"topic": topic},
                name="tombstone",
                danger=True,
                confirm=f"Are you sure you want to tombstone topic {topic} on {name}?",
            )
            channels = ", ".join(
                self.a(self.links.channel(topic, c["channel_name"]), c["channel_name"])
                + f" ({commafy(len(c['clients']))} clients)"
                for c in t["channels"]
            )
            held = [held_partitions(t)] if "cluster" in doc else []
            rows.append(
                [
                    self.a(self.links.topic(topic), topic) + paused_badge(t["paused"]),
                    commafy(t["depth"]),
                    mem_disk(t),
                    commafy(t["message_count"]),
                    *held,
                    f'<div class="wrap">{channels or NONE}</div>',
                    tomb,
                ]
            )
        extra_headers, extra_cells = (
            node_summary_cells(doc["cluster"]) if "cluster" in doc else ([], [])
        )
        summary = table(
            ["Hostname", "Version", "Topics", "Messages", "Clients", *extra_headers],
            [
                [
                    esc(p["hostname"]),
                    esc(p["version"]),
                    commafy(len(doc["topics"])),
                    commafy(doc["total_messages"]),
                    commafy(doc["total_clients"]),
                    *extra_cells,
                ]
            ],
            table_id="node-summary",
        )
        held_header = ["Partitions"] if "cluster" in doc else []
        topics = (
            table(
                ["Topic", "Depth", "Memory + Disk", "Messages", *held_header, "Channels", ""],
                rows,
                table_id="node-topics",
            )
            if rows
            else '<p class="empty">No topics.</p>'
        )
        return f'<h1>Node <span class="name">{esc(name)}</span></h1>' + summary + topics

    # -- counter and lookup ----------------------------------------------------------------

    def counter(self, total: int) -> str:
        live = (
            graph(self.links, "message rate (msgs/s), all channels", refresh_ms=self.refresh_ms)
            if self.refresh_ms
            else ""
        )
        return (
            "<h1>Messages processed</h1>"
            f'<div id="counter"{attrs(data_url=self.links.to("api", "counter"))}>'
            f'<span class="count">{commafy(total)}</span><span class="rate"></span></div>' + live
        )

    def lookup(self, lookupd: list[str], inactive: dict[str, list[str]]) -> str:
        form = (
            f'<form id="create"{attrs(data_url=self.links.to("api", "topics"))}>'
            "<h2>Create a topic / channel</h2>"
            '<input name="topic" placeholder="topic" required aria-label="topic"> '
            '<input name="channel" placeholder="channel (optional)" aria-label="channel"> '
            '<button type="submit" class="btn">Create</button></form>'
        )
        if not lookupd:
            note = alert(
                "info",
                "nsqadmin is not configured with nsqlookupd hosts "
                "(--nsqd-http-address mode): topics and channels are created on "
                "every configured nsqd.",
            )
            return "<h1>Lookup</h1>" + note + form
        rows = []
        for topic, channels in inactive.items():
            api = self.links.to("api", "topics", topic)
            chans = " ".join(
                esc(c)
                + button(
                    "Delete",
                    method="DELETE",
                    url=self.links.to("api", "topics", topic, c),
                    confirm=f"Delete channel {c} of topic {topic}?",
                    danger=True,
                    name="delete",
                )
                for c in channels
            )
            rows.append(
                [
                    esc(topic)
                    + button(
                        "Delete",
                        method="DELETE",
                        url=api,
                        danger=True,
                        confirm=f"Delete topic {topic}?",
                        name="delete",
                    ),
                    chans or NONE,
                ]
            )
        hosts = "".join(f"<li>{esc(a)}</li>" for a in lookupd)
        listing = (
            table(["Inactive topic", "Channels"], rows, table_id="inactive")
            if rows
            else '<p class="empty">No inactive topics.</p>'
        )
        return f"<h1>Lookup</h1><h2>nsqlookupd hosts</h2><ul>{hosts}</ul>" + listing + form
