"""The report of a checked run: a plain-text summary for CI logs, the result as JSON, and a
timeline plot of throughput and errors with every fault shaded.

Turns a ``CheckResult`` (``nsqpy.jepsen.checker``) and its history into files; decides
nothing itself. matplotlib (the ``jepsen`` extra) is imported only inside the functions
that plot, on its Agg canvas (no display), so the checker and the summary work without it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsqpy.jepsen.checker import LATE_AFTER, ChannelResult, CheckResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes

SHOWN_VALUES = 10  # lost or unexpected values listed in the summary, per channel


def summary_text(result: CheckResult, title: str = "") -> str:
    """The verdict first (``VALID`` or ``INVALID``), then the writes, each channel, the
    errors and the faults, one fact a line."""
    lines = [_heading(result, title)]
    lines.append(
        f"writes: attempted {result.attempted}, acknowledged {result.acknowledged}, "
        f"failed {result.failed}, indeterminate {result.indeterminate}"
    )
    for channel in result.channels:
        lines.extend(_channel_lines(channel))
    lines.append(f"errors (fail): {_counts(result.fail_errors)}")
    lines.append(f"errors (info): {_counts(result.info_errors)}")
    lines.extend(_nemesis_lines(result))
    return "\n".join(lines) + "\n"


def _heading(result: CheckResult, title: str) -> str:
    verdict = "VALID" if result.valid else "INVALID"
    return f"{verdict}: {title}" if title else verdict


def _channel_lines(channel: ChannelResult) -> list[str]:
    lines = [
        f"channel {channel.channel}: lost {len(channel.lost)}, "
        f"unexpected {len(channel.unexpected)}, duplicates {channel.duplicates} "
        f"(of {channel.duplicated_values} values), recovered {len(channel.recovered)}, "
        f"received {channel.received}"
    ]
    if channel.max_delay_value is not None:
        lines.append(
            f"  delivery: longest wait {channel.max_delay:.2f}s (value "
            f"{channel.max_delay_value}), {channel.late} values later than {LATE_AFTER:g}s"
        )
    for name, values in (("lost", channel.lost), ("unexpected", channel.unexpected)):
        if values:
            shown = ", ".join(str(v) for v in values[:SHOWN_VALUES])
            more = f" (first {SHOWN_VALUES} of {len(values)})" if len(values) > SHOWN_VALUES else ""
            lines.append(f"  {name}{more}: {shown}")
    return lines


def _counts(counts: Mapping[str, int]) -> str:
    if not counts:
        return "none"
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{kind} {n}" for kind, n in ranked)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _nemesis_lines(result: CheckResult) -> list[str]:
    availability = result.availability
    lines = [
        f"availability: baseline {availability.baseline:g} acknowledged/s "
        f"over {availability.duration:.1f}s, {len(availability.intervals)} faults"
    ]
    if not availability.kinds:
        return lines
    header = ("nemesis", "count", "unrecovered", "median recovery", "max recovery", "max gap")
    rows = [header] + [
        (
            k.kind,
            str(k.count),
            str(k.unrecovered),
            _seconds(k.median_recovery),
            _seconds(k.max_recovery),
            _seconds(k.max_longest_gap),
        )
        for k in availability.kinds
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _per_second(
    events: Sequence[Mapping[str, Any]], channels: Sequence[str], seconds: int
) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Failed and indeterminate publishes per second (by result), and values received
    per second on each of ``channels``."""
    errors: dict[str, list[int]] = {"fail": [0] * seconds, "info": [0] * seconds}
    received: dict[str, list[int]] = {ch: [0] * seconds for ch in channels}
    for event in events:
        second = min(int(float(event["t"])), seconds - 1)
        op = event.get("op")
        if op == "recv" and event.get("ch") in received:
            received[event["ch"]][second] += 1
        elif op == "pub" and event.get("r") != "ok":
            errors["fail" if event.get("r") == "fail" else "info"][second] += 1
    return errors, received


def plot_timeline(
    events: Sequence[Mapping[str, Any]], result: CheckResult, path: str | Path, title: str = ""
) -> None:
    """A PNG at ``path``: acknowledged values (and receives per channel) per second on
    top, failed and indeterminate publishes per second below, faults shaded by kind."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    acked = result.availability.acked_per_second
    errors, received = _per_second(events, [c.channel for c in result.channels], len(acked))
    figure = Figure(figsize=(12, 6), layout="constrained")
    FigureCanvasAgg(figure)
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=(2, 1))
    _plot_values(top, acked, received)
    _plot_errors(bottom, errors)
    handles = _shade_faults(result, (top, bottom))
    if handles:
        figure.legend(handles=handles, loc="outside right upper", title="nemesis")
    figure.suptitle(_heading(result, title))
    figure.savefig(path, dpi=100)


def _edges(counts: Sequence[int]) -> range:
    return range(len(counts) + 1)  # each count spans its whole second


def _plot_values(ax: Axes, acked: Sequence[int], received: Mapping[str, list[int]]) -> None:
    from matplotlib import colormaps

    ax.stairs(acked, _edges(acked), color="black", linewidth=1.5, label="acknowledged")
    dark = colormaps["Dark2"]
    for i, (channel, counts) in enumerate(received.items()):
        ax.stairs(
            counts,
            _edges(counts),
            color=dark(i % dark.N),
            linestyle=("--", ":", "-.")[i % 3],
            linewidth=0.8,
            label=f"received on {channel}",
        )
    ax.set_ylabel("values / s")
    ax.legend(loc="upper left", fontsize="small")


def _plot_errors(ax: Axes, errors: Mapping[str, list[int]]) -> None:
    for result, colour in (("fail", "tab:red"), ("info", "tab:blue")):
        ax.stairs(errors[result], _edges(errors[result]), color=colour, linewidth=1, label=result)
    ax.set_ylabel("publishes / s")
    ax.set_xlabel("seconds since start")
    ax.legend(loc="upper left", fontsize="small")


def _shade_faults(result: CheckResult, axes: Sequence[Axes]) -> list[Any]:
    """Shades every fault on ``axes`` in a colour of its kind; returns the legend handles."""
    from matplotlib import colormaps
    from matplotlib.patches import Patch

    palette = colormaps["Pastel1"]  # light, apart from the lines drawn over them
    kinds = [k.kind for k in result.availability.kinds]
    colours = {kind: palette(i % palette.N) for i, kind in enumerate(kinds)}
    for interval in result.availability.intervals:
        for ax in axes:
            ax.axvspan(
                interval.start, interval.stop, color=colours[interval.kind], alpha=0.7, zorder=0
            )
    return [Patch(color=colours[kind], alpha=0.7, label=kind) for kind in kinds]


def write_report(
    directory: str | Path,
    events: Sequence[Mapping[str, Any]],
    result: CheckResult,
    title: str = "",
) -> dict[str, Path]:
    """Writes ``summary.txt``, ``result.json`` and ``timeline.png`` into ``directory``
    (made if missing); returns their paths under the keys summary, result, timeline."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {
        "summary": directory / "summary.txt",
        "result": directory / "result.json",
        "timeline": directory / "timeline.png",
    }
    paths["summary"].write_text(summary_text(result, title), encoding="utf-8")
    paths["result"].write_text(json.dumps(result.to_json(), indent=1) + "\n", encoding="utf-8")
    plot_timeline(events, result, paths["timeline"], title)
    return paths
