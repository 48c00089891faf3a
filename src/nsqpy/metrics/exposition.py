"""The Prometheus text exposition format (version 0.0.4), as prometheus-client writes it.

A ``Family`` is one metric: name, ``counter`` or ``gauge``, help text and samples (labels,
value). Counters follow prometheus-client's convention: the family is declared and sampled
as ``<name>_total``. Label values and help texts are escaped as the format requires, so any
topic or channel name is safe. Pure: imports only the standard library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Labels = dict[str, str]


@dataclass
class Family:
    """One metric family and its samples."""

    name: str
    kind: str  # "counter" or "gauge"
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> Family:
        self.samples.append((labels, value))
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
        for labels, value in family.samples:
            if labels:
                text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
                out.append(f"{name}{{{text}}} {format_value(value)}\n")
            else:
                out.append(f"{name} {format_value(value)}\n")
    return "".join(out)
