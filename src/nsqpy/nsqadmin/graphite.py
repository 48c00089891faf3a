"""Graphite support (``--graphite-url``), the way NSQ's nsqadmin does it (SPEC 4).

Owns the metric names nsqd pushes through statsd as graphite knows them (prefix with
``%s`` -> the node with ``.``/``:`` -> ``_``, then ``topic.<t>.`` / ``channel.<c>.``, the
metric, wrapped in ``--statsd-counter-format`` or ``--statsd-gauge-format``), the
``/render`` URLs of the sparkline and large graphs, and the ``/api/graphite?metric=rate``
computation (first datapoint of ``from=-2*interval until=-interval`` divided by the
interval). Pure except ``fetch_rate``, which uses the upstream client.
"""

from __future__ import annotations

import json
import math
from urllib.parse import urlencode

from nsqpy.nsqadmin.upstream import Upstream, UpstreamError

COUNTERS = frozenset({"message_count", "requeue_count", "timeout_count", "gc_runs"})


def statsd_prefix(prefix: str, node: str) -> str:
    """``nsq.%s`` for node ``10.0.0.1:4151`` -> ``nsq.10_0_0_1_4151.`` (``*`` for all)."""
    host_key = node.replace(".", "_").replace(":", "_")
    out = prefix.replace("%s", host_key)
    return out if out.endswith(".") else out + "."


def metric_key(
    *,
    prefix: str,
    counter_format: str,
    gauge_format: str,
    node: str,
    topic: str,
    channel: str,
    metric: str,
) -> str:
    """The graphite series of one statsd metric of a topic or channel on a node (or ``*``)."""
    key = statsd_prefix(prefix, node or "*") + f"topic.{topic}."
    if channel:
        key += f"channel.{channel}."
    key += metric
    fmt = counter_format if metric in COUNTERS else gauge_format
    return fmt.replace("%s", key)


def rate_target(**kwargs: str) -> str:
    """The target whose rate the topic list shows: ``sumSeries(<message_count key>)``."""
    return f"sumSeries({metric_key(metric='message_count', **kwargs)})"


def render_url(base: str, target: str, interval_s: int, *, large: bool, counter: bool) -> str:
    """A graphite ``/render`` image URL: a 120x20 sparkline or an 800x450 graph."""
    if large and counter:
        target = f"scale({target},{1 / interval_s})"
    q: dict[str, str] = {
        "colorList": "blue",
        "height": "450" if large else "20",
        "width": "800" if large else "120",
        "bgcolor": "ff000000",
        "fgcolor": "999999" if large else "black",
        "yMin": "0",
        "lineMode": "connected",
        "drawNullAsZero": "false",
        "from": "-2h",
        "until": "-1min",
        "target": f'summarize({target},"{interval_s}sec","avg")',
    }
    if not large:
        q.update(hideGrid="true", hideLegend="true", hideAxes="true", margin="0")
    return base.rstrip("/") + "/render?" + urlencode(q)


def rate_from_render(body: bytes, interval_s: int) -> str:
    """``"12.34"`` from a graphite JSON render reply, ``"N/A"`` when there is no datum."""
    try:
        doc = json.loads(body)
        value = doc[0]["datapoints"][0][0]
    except (ValueError, LookupError, TypeError, RecursionError):
        return "N/A"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "N/A"
    if value < 0 or not math.isfinite(value):
        return "N/A"
    return f"{value / interval_s:.2f}"


async def fetch_rate(upstream: Upstream, graphite_url: str, target: str, interval_s: int) -> str:
    """Ask graphite for the last full interval of ``target``; UpstreamError when it fails."""
    params = {
        "from": f"-{2 * interval_s}sec",
        "until": f"-{interval_s}sec",
        "format": "json",
        "target": target,
    }
    url = graphite_url.rstrip("/") + "/render?" + urlencode(params)
    body = await upstream.request("GET", url)
    return rate_from_render(body, interval_s)


__all__ = ["UpstreamError", "fetch_rate", "metric_key", "rate_from_render", "render_url"]
