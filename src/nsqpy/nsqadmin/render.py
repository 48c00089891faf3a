"""HTML building blocks of nsqadmin's pages: layout, tables, links, buttons, graphs.

Everything that reaches the page goes through ``esc`` (names come from the cluster and the
URL, never trusted). Links are built under ``--base-path`` with each path segment quoted
(``#ephemeral`` names become ``%23ephemeral``). Buttons and graphs are plain elements with
``data-`` attributes that ``static/nsqadmin.js`` brings to life: a button asks for
confirmation then calls the JSON API; a graph polls ``/api/history`` and draws it with uPlot
(an npm package, installed by ``make`` into the static folder; a plain SVG line without it).
Pure string building; imports only the standard library.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from urllib.parse import quote, urlencode

from nsqpy import NSQ_VERSION, __version__

NONE = "\u2013"  # an en dash: "nothing here"


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def commafy(n: object) -> str:
    return f"{n:,}" if isinstance(n, int) else esc(n)


def rate_text(rate: float | None) -> str:
    return NONE if rate is None else f"{rate:,.1f}/s"


def duration_ns(ns: int) -> str:
    """Nanoseconds as NSQ's UI shows them: ``1h2m``, ``3m4s``, ``5.25s``, ``12ms``."""
    if ns >= 3_600_000_000_000:
        return f"{ns // 3_600_000_000_000}h{ns % 3_600_000_000_000 // 60_000_000_000}m"
    if ns >= 60_000_000_000:
        return f"{ns // 60_000_000_000}m{ns % 60_000_000_000 // 1_000_000_000}s"
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.2f}s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.2f}ms"
    if ns >= 1_000:
        return f"{ns / 1e3:.2f}us"
    return f"{ns}ns"


class Links:
    """URLs under the base path."""

    def __init__(self, base_path: str) -> None:
        self.base = "" if base_path == "/" else base_path

    def to(self, *segments: str, query: dict[str, str] | None = None) -> str:
        path = "".join("/" + quote(s, safe=":") for s in segments)
        url = self.base + (path or "/")
        return f"{url}?{urlencode(query)}" if query else url

    def topic(self, topic: str) -> str:
        return self.to("topics", topic)

    def channel(self, topic: str, channel: str) -> str:
        return self.to("topics", topic, channel)

    def node(self, node: str) -> str:
        return self.to("nodes", node)


def attrs(**values: object) -> str:
    """``data_x="..."`` keyword arguments as HTML attributes (``_`` -> ``-``)."""
    return "".join(
        f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in values.items() if v is not None
    )


def button(
    label: str,
    *,
    method: str,
    url: str,
    body: dict[str, str] | None = None,
    confirm: str,
    after: str = "",
    danger: bool = False,
    name: str = "",
) -> str:
    """A confirmed action: JS confirms, calls ``method url`` with the JSON body, then reloads
    (or goes to ``after``)."""
    at = attrs(
        type="button",
        class_="btn danger" if danger else "btn",
        data_method=method,
        data_url=url,
        data_body=json.dumps(body) if body is not None else None,
        data_confirm=confirm,
        data_after=after or None,
        data_name=name or None,
    )
    return f"<button{at}>{esc(label)}</button>"


def graph(
    links: Links,
    title: str,
    *,
    topic: str = "",
    channel: str = "",
    node: str = "*",
    metric: str = "rate",
    refresh_ms: int = 0,
) -> str:
    """A live graph of one sampled series (drawn and refreshed by the page script)."""
    url = links.to("api", "history", query={"topic": topic, "channel": channel, "node": node})
    at = attrs(
        class_="graph", data_history=url, data_metric=metric, data_refresh=refresh_ms or None
    )
    return (
        f'<figure{at}><figcaption>{esc(title)} <span class="last"></span></figcaption>'
        '<svg viewBox="0 0 300 80" preserveAspectRatio="none" role="img"></svg></figure>'
    )


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    cls: str = "",
    table_id: str = "",
    foot: Sequence[str] | None = None,
) -> str:
    """A table; cells are already-escaped HTML."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    tfoot = ""
    if foot is not None:
        tfoot = "<tfoot><tr>" + "".join(f"<td>{c}</td>" for c in foot) + "</tr></tfoot>"
    return (
        f"<table{attrs(class_=('table ' + cls).strip(), id=table_id or None)}>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody>{tfoot}</table>"
    )


def filter_box(table_id: str, placeholder: str) -> str:
    at = attrs(
        type="search",
        class_="filter",
        data_filter=table_id,
        placeholder=placeholder,
        aria_label=placeholder,
    )
    return f"<input{at}>"


def alert(kind: str, text: str) -> str:
    return f'<div class="alert {esc(kind)}" role="alert">{esc(text)}</div>' if text else ""


def warnings_html(items: Sequence[str]) -> str:
    if not items:
        return ""
    lis = "".join(f"<li>{esc(i)}</li>" for i in items)
    return (
        f'<div class="alert warning" role="alert"><b>WARNING:</b> some nodes did not '
        f"answer<ul>{lis}</ul></div>"
    )


NAV = (
    ("topics", "Topics"),
    ("nodes", "Nodes"),
    ("counter", "Counter"),
    ("lookup", "Lookup"),
    ("trace", "Trace"),  # nsqpy: message trace (nsqadmin.trace)
)


def layout(
    links: Links,
    *,
    title: str,
    active: str,
    body: str,
    warnings: Sequence[str] = (),
    error: str = "",
    query: str = "",
    graph_refresh_ms: int = 0,
) -> str:
    """The whole page: header with navigation and search, alerts, content, the script."""
    nav = "".join(
        f"<a{attrs(href=links.to(key), class_='active' if key == active else None)}>{esc(name)}</a>"
        for key, name in NAV
    )
    search = (
        f'<form class="search" method="get" action="{esc(links.to("topics"))}">'
        f'<input type="search" name="q" value="{esc(query)}" placeholder="search topics" '
        'aria-label="search topics"></form>'
    )
    alerts = alert("error", error) + warnings_html(warnings)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>nsqadmin: {esc(title)}</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="stylesheet" href="{esc(links.to("static", "uPlot.min.css"))}">'
        f'<link rel="stylesheet" href="{esc(links.to("static", "nsqadmin.css"))}">'
        f"</head><body{attrs(data_base=links.base, data_refresh=graph_refresh_ms or None)}>"
        f'<header><a class="brand" href="{esc(links.to())}">nsqadmin</a><nav>{nav}</nav>'
        f'{search}</header><main><div id="messages">{alerts}</div>{body}</main>'
        f"<footer>nsqpy {esc(__version__)} · speaks NSQ {esc(NSQ_VERSION)}</footer>"
        f'<script src="{esc(links.to("static", "uPlot.iife.min.js"))}"></script>'
        f'<script src="{esc(links.to("static", "nsqadmin.js"))}"></script></body></html>'
    )
