"""The Prometheus text exposition format (version 0.0.4), as prometheus-client writes it.

A ``Family`` is one metric: name, ``counter``, ``gauge`` or ``histogram``, help text and
samples (labels, value). Counters follow prometheus-client's convention: the family is
declared and sampled as ``<name>_total``. A histogram's samples (``add_histogram``) are its
``<name>_bucket{le=...}`` (cumulative), ``<name>_sum`` and ``<name>_count``. Label values and help texts are escaped as the format requires, so any
topic or channel name is safe. Pure: imports only the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Labels = dict[str, str]


@dataclass
class Family:
    """One metric family and its samples."""

    name: str
    kind: str  # "counter", "gauge" or "histogram"
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)
    suffixes: list[str] = field(default_factory=list)  # a histogram's, per sample

    def add(self, value: float, **labels: str) -> Family:
        self.samples.append((labels, value))
        self.suffixes.append("")
        return self

    def add_histogram(
        self,
        bounds: Sequence[float],
        cumulative: Sequence[int],
        total: float,
        count: int,
        **labels: str,
    ) -> Family:
        """One histogram: the count of observations at or below each bound (then +Inf, the
        count), their sum and their count."""
        for bound, seen in zip(bounds, cumulative, strict=True):
            self.samples.append(({**labels, "le": format_value(float(bound))}, seen))
            self.suffixes.append("_bucket")
        for suffix, value in (("_bucket", count), ("_sum", total), ("_count", count)):
            extra = {"le": "+Inf"} if suffix == "_bucket" else {}
            self.samples.append(({**labels, **extra}, value))
            self.suffixes.append(suffix)
        return self


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render(families: list[Family]) -> str:
    """The text of a scrape: HELP, TYPE and the samples of each family, in order."""
    out: list[str] = []
    for family in families:
        name = f"{family.name}_total" if family.kind == "counter" else family.name
        out.append(f"# HELP {name} {_escape_help(family.help)}\n")
        out.append(f"# TYPE {name} {family.kind}\n")
        for (labels, value), suffix in zip(family.samples, family.suffixes, strict=True):
            if labels:
                text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
                out.append(f"{name}{suffix}{{{text}}} {format_value(value)}\n")
            else:
                out.append(f"{name}{suffix} {format_value(value)}\n")
    return "".join(out)


def etcd_latency_family(
    daemon: str, kinds: Mapping[str, tuple[Sequence[int], float, int]]
) -> Family:
    """``<daemon>_etcd_call_duration_seconds{call=...}``: a histogram per kind of etcd call
    (cumulative counts over ``LATENCY_BUCKETS``, their sum and count)."""
    from nsqpy.cluster.etcd_types import LATENCY_BUCKETS  # (nothing of the etcd client)

    family = Family(f"{daemon}_etcd_call_duration_seconds", "histogram",
                    "time of each call to etcd, retries included, by kind of call")  # fmt: skip
    for kind, (counts, total, count) in sorted(kinds.items()):
        family.add_histogram(LATENCY_BUCKETS, counts, total, count, call=kind)
    return family
