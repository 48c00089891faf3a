"""The pieces of nsqadmin's pages that only an nsqpy cluster has. Pure: no I/O.

A topic's partitions table (one row per partition: leader, ISR, catch-up, epochs, depth,
committed offset, each follower's lag), the cluster summary above the node list (the
coordinating lookupd, every lookupd, degraded partitions), the extra cells of a node's
row (node id, lease, leader and replica counts) and of a node page (its summary, the
partitions it holds per topic). Each takes the API's JSON for the same resource. Node
ids link to nsqadmin's node pages (``broadcast_address:http_port``) where known. Imports
render and stats only.
"""

from __future__ import annotations

from nsqpy.nsqadmin.render import NONE, Links, alert, attrs, commafy, esc, table
from nsqpy.nsqadmin.stats import Json

NODE_HEADERS = ["Node ID", "Lease", "Leaders", "Replicas"]


def node_ref(links: Links, node_id: str, address: str) -> str:
    """A node id, linked to its node page when its address is known."""
    if not node_id:
        return NONE
    if not address:
        return f'<span class="node-id">{esc(node_id)}</span>'
    return (
        f"<a{attrs(href=links.node(address), class_='node-id', title=address)}>{esc(node_id)}</a>"
    )


def _ids(links: Links, ids: list[str], where: dict[str, str]) -> str:
    refs = [node_ref(links, i, where.get(i, "")) for i in ids]
    return '<div class="ids">' + (", ".join(refs) or NONE) + "</div>"


def _offset(value: object) -> str:
    return NONE if value is None else commafy(value)


def _lags(links: Links, row: Json) -> str:
    parts = []
    for r in row["replicas"]:
        if r["role"] == "leader":
            continue
        if r["lag"] is None:
            what = "not reporting" if r["end"] is None else f"end {r['end']:,}"
        else:
            what = f"lag {r['lag']:,}"
        cls = "lag" if r["lag"] else "lag zero"
        parts.append(
            node_ref(links, r["id"], r["node"]) + f' <span class="{cls}">{esc(what)}</span>'
        )
    return '<div class="ids">' + ("<br>".join(parts) or NONE) + "</div>"


def partitions_section(links: Links, rows: list[Json]) -> str:
    """The topic page's partitions table (cluster mode)."""
    body = []
    for row in rows:
        where = {r["id"]: r["node"] for r in row["replicas"]}
        leader = node_ref(links, row["leader"], row["leader_node"])
        if row["leader"] and row["leader_node"]:
            leader += f' <span class="address">{esc(row["leader_node"])}</span>'
        if not row["leader_reported"]:
            leader += ' <span class="badge old">leader not reporting</span>'
        body.append(
            [
                commafy(row["partition"]),
                leader,
                _ids(links, row["isr"], where),
                _ids(links, row["catchup"], where),
                commafy(row["epoch"]),
                commafy(row["leader_epoch"]),
                _offset(row["depth"]),
                _offset(row["message_count"]),
                _offset(row["committed_offset"]),
                _lags(links, row),
            ]
        )
    headers = [
        "Partition",
        "Leader",
        "ISR",
        "Catch-up",
        "Epoch",
        "Leader Epoch",
        "Depth",
        "Messages",
        "Committed Offset",
        "Follower Lag",
    ]
    return f"<h2>Partitions ({len(rows)})</h2>" + table(headers, body, table_id="partitions")


def lease_badge(alive: bool) -> str:
    if alive:
        return '<span class="badge alive">alive</span>'
    return '<span class="badge old">no lease</span>'


def node_cells(links: Links, n: Json) -> list[str]:
    """A node row's cells under ``NODE_HEADERS``."""
    return [
        esc(n.get("node_id") or NONE),
        lease_badge(bool(n.get("lease"))),
        commafy(n.get("leaders", 0)),
        commafy(n.get("replicas", 0)),
    ]


def cluster_summary(links: Links, summary: Json) -> str:
    """Above the node list: which lookupd coordinates, every lookupd, degraded partitions."""
    rows = [
        [
            esc(lk["id"]),
            esc(lk["http_address"]),
            esc(lk["tcp_address"]),
            '<span class="badge alive">coordinator</span>' if lk["coordinator"] else NONE,
        ]
        for lk in summary["lookupds"]
    ]
    lookupds = table(
        ["nsqlookupd", "HTTP Address", "TCP Address", "Role"], rows, table_id="lookupds"
    )
    coordinator = summary["coordinator"] or "none (no lookupd holds the lock)"
    state = "stable" if summary["stable"] else "not stable"
    bad = [*summary["unavailable_partitions"], *summary["degraded_partitions"]]
    note = alert("warning", "degraded partitions: " + ", ".join(bad)) if bad else ""
    return (
        '<h2>Cluster</h2><p class="summary" id="coordinator">'
        f'Coordinator: <span class="node-id">{esc(coordinator)}</span> · '
        f"{commafy(len(summary['live_nodes']))} live nodes · {esc(state)}</p>" + note + lookupds
    )


def node_summary_cells(c: Json) -> tuple[list[str], list[str]]:
    """A node page's extra summary headers and cells (cluster mode)."""
    return (
        [*NODE_HEADERS, "Coordinator"],
        [
            esc(c["node_id"] or NONE),
            lease_badge(bool(c["lease"])),
            commafy(c["leaders"]),
            commafy(c["replicas"]),
            esc(c["coordinator"] or NONE),
        ],
    )


def held_partitions(t: Json) -> str:
    """The partitions a node holds of one topic, with its role in each."""
    held = t.get("partitions") or []
    text = ", ".join(f"{p['partition']} ({p['role']})" for p in held)
    return esc(text or NONE)
