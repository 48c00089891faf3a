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

import json

from nsqpy.nsqadmin.render import NONE, Links, alert, attrs, button, commafy, esc, table
from nsqpy.nsqadmin.stats import Json

NODE_HEADERS = ["Node ID", "Lease", "Leaders", "Replicas", "Load"]


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


def action_form(
    links: Links, url: str, body: dict[str, str], confirm: str, fields: str, label: str,
    form_id: str = "", name: str = "",
) -> str:  # fmt: skip
    """A confirmed cluster operation with fields: the JS sends ``body`` plus the fields'
    values as JSON to ``url`` (nsqadmin's API), then reloads."""
    at = attrs(id=form_id or None, class_="cluster-action", data_url=url,
               data_body=json.dumps(body), data_confirm=confirm, data_name=name or None)  # fmt: skip
    return f'<form{at}>{fields}<button type="submit" class="btn">{esc(label)}</button></form>'


def _select(name: str, options: list[str]) -> str:
    items = "".join(f"<option{attrs(value=o)}>{esc(o)}</option>" for o in options)
    return f"<select{attrs(name=name)}>{items}</select>"


def _move_actions(links: Links, topic: str, row: Json) -> str:
    p = str(row["partition"])
    url = links.to("api", "cluster", "topics", topic)
    if row.get("move"):
        m = row["move"]
        what = "lead" if m.get("leader") else "replica"
        return f'<span class="badge moving">moving {what} {esc(m.get("from"))} → {esc(m.get("to"))}</span>'
    lead = button(
        "Move lead",
        method="POST",
        url=url,
        body={"action": "move", "partition": p, "move_leader": "true"},
        confirm=f"Move the lead of partition {p} of {topic} to another ISR member?",
        name="move-lead",
    )
    holders = [row["leader"], *(n for n in [*row["isr"], *row["catchup"]] if n != row["leader"])]
    fields = (
        _select("move_from", [h for h in holders if h])
        + f"<input{attrs(name='move_to', placeholder='to: any node', size='14')}>"
    )
    replica = action_form(
        links, url, {"action": "move", "partition": p},
        f"Move a replica of partition {p} of {topic}?", fields, "Move replica", name="move",
    )  # fmt: skip
    return f'<div class="ops">{lead}{replica}</div>'


def expand_form(links: Links, topic: str, count: int) -> str:
    """The topic page's form to grow the partition count."""
    field = f"<input{attrs(name='partition_num', type='number', min=str(count + 1), max='255', value=str(count + 1))}>"
    return action_form(
        links, links.to("api", "cluster", "topics", topic), {"action": "expand"},
        f"Grow topic {topic} to the partition count given? (It never shrinks.)", field,
        "Expand partitions", form_id="expand",
    )  # fmt: skip


def partitions_section(links: Links, rows: list[Json], topic: str = "") -> str:
    """The topic page's partitions table (cluster mode), with the operations on each
    partition (move its lead or a replica) and on the topic (expand) when ``topic``."""
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
                *([_move_actions(links, topic, row)] if topic else []),
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
        *(["Operations"] if topic else []),
    ]
    expand = expand_form(links, topic, len(rows)) if topic else ""
    return (
        f"<h2>Partitions ({len(rows)})</h2>" + table(headers, body, table_id="partitions") + expand
    )


def lease_badge(alive: bool) -> str:
    if alive:
        return '<span class="badge alive">alive</span>'
    return '<span class="badge old">no lease</span>'


def node_cells(links: Links, n: Json, removing: dict[str, int] | None = None) -> list[str]:
    """A node row's cells under ``NODE_HEADERS`` (and, with the nodes being drained given,
    the drain action or state)."""
    node_id = n.get("node_id") or ""
    cells = [
        esc(node_id or NONE),
        lease_badge(bool(n.get("lease"))),
        commafy(n.get("leaders", 0)),
        commafy(n.get("replicas", 0)),
        load_cell(n),
    ]
    if removing is None:
        return cells
    if node_id in removing:
        state = "drained" if not removing[node_id] else f"draining ({removing[node_id]} left)"
        return [*cells, f'<span class="badge moving">{esc(state)}</span>']
    if not node_id or not n.get("lease"):
        return [*cells, NONE]
    drain = button(
        "Drain",
        method="POST",
        url=links.to("api", "cluster", "nodes", node_id),
        body={"action": "remove"},
        confirm=f"Drain node {node_id}? Every replica it holds moves to other nodes; "
        "once it is stopped, the cluster forgets it.",
        danger=True,
        name="drain",
    )
    return [*cells, drain]


def create_form(links: Links) -> str:
    """Create a topic in the cluster with its partitions and replicas."""
    fields = (
        f'<input{attrs(name="topic", placeholder="topic", required="required")}>'
        f'<label>partitions <input{attrs(name="partition_num", type="number", min="1", max="255", value="1")}></label>'
        f'<label>replicas <input{attrs(name="replicator", type="number", min="1", max="5", value="3")}></label>'
        f'<label><input{attrs(name="multipart", type="checkbox", checked="checked")}> several per node</label>'
    )  # fmt: skip
    return "<h2>Create a topic</h2>" + action_form(
        links, links.to("api", "cluster", "topics"), {},
        "Create this topic in the cluster?", fields, "Create", form_id="cluster-create",
    )  # fmt: skip


def load_cell(n: Json) -> str:
    """What a node reports of its load (messages per second published, bytes held), and
    the rebalancer's view of it: its replicas' and leads' load against a fair share."""
    rate = float(n.get("msgs_per_sec") or 0.0)
    size = int(n.get("bytes") or 0)
    shares = ""
    if n.get("replica_load") is not None and n.get("leader_load") is not None:
        title = "load of its replicas and of its leads, against a fair share (1.00)"
        shares = (f' · <span class="share" title="{title}">{float(n["replica_load"]):.2f}x '
                  f'replicas, {float(n["leader_load"]):.2f}x leads</span>')  # fmt: skip
    return f'<span class="load">{rate:,.1f} msgs/s · {size / 1048576:,.1f} MiB{shares}</span>'


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
    balance = "balanced" if summary.get("balanced", True) else "not balanced"
    offline = summary.get("offline_partitions") or []
    short = summary.get("under_replicated_partitions") or []
    note = ""
    if offline:
        note += alert("error", "offline partitions (no live leader: nothing is published or "
                      "delivered): " + ", ".join(offline) + ". If no ISR member will come "
                      "back, POST /topic/partition/recover on a lookupd elects another "
                      "replica, and what only the ISR had is lost.")  # fmt: skip
    if short:
        note += alert("error", "under-replicated partitions (one more failure may leave "
                      "them offline): " + ", ".join(short))  # fmt: skip
    shown = set(offline) | set(short)
    bad = [p for p in [*summary["unavailable_partitions"], *summary["degraded_partitions"]]
           if p not in shown]  # fmt: skip
    note += alert("warning", "degraded partitions: " + ", ".join(bad)) if bad else ""
    if not summary.get("secure", True):
        note += alert(
            "warning",
            "insecure cluster: the links between its daemons are not mutual TLS "
            "(--cluster-tls-root-ca-file, --cluster-tls-cert, --cluster-tls-key): whoever "
            "reaches them can read the partitions' messages",
        )
    moving = summary.get("moving_partitions") or {}
    if moving:
        note += alert("info", "moving: " + ", ".join(
            f"{p} ({'lead' if m.get('leader') else 'replica'} {m.get('from')} → {m.get('to')})"
            for p, m in sorted(moving.items())))  # fmt: skip
    return (
        '<h2>Cluster</h2><p class="summary" id="coordinator">'
        f'Coordinator: <span class="node-id">{esc(coordinator)}</span> · '
        f"{commafy(len(summary['live_nodes']))} live nodes · {esc(state)} · "
        f'<span id="balance">{esc(balance)}</span></p>' + note + lookupds + create_form(links)
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
            load_cell(c),
            esc(c["coordinator"] or NONE),
        ],
    )


def held_partitions(t: Json) -> str:
    """The partitions a node holds of one topic, with its role in each."""
    held = t.get("partitions") or []
    text = ", ".join(f"{p['partition']} ({p['role']})" for p in held)
    return esc(text or NONE)
