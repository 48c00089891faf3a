"""Synthetic history events for the checker and report tests, shaped as
``nsqpy.jepsen.history.HistoryWriter`` writes them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Event = dict[str, Any]


def pub(values: int | Sequence[int], t: float, r: str = "ok", e: str = "") -> Event:
    vs = [values] if isinstance(values, int) else list(values)
    event: Event = {"p": "w1", "op": "pub", "v": vs, "t0": max(t - 0.001, 0.0), "t": t, "r": r}
    if e:
        event["e"] = e
    return event


def recv(value: int, channel: str, t: float) -> Event:
    return {"p": f"r-{channel}", "op": "recv", "v": value, "ch": channel, "t": t}


def nemesis(phase: str, kind: str, step: int, t: float, detail: str = "") -> Event:
    return {
        "p": "nemesis",
        "op": "nemesis",
        "phase": phase,
        "kind": kind,
        "step": step,
        "detail": detail,
        "t": t,
    }


def fault(kind: str, step: int, start: float, stop: float | None) -> list[Event]:
    """A nemesis start, and its stop unless ``stop`` is None."""
    events = [nemesis("start", kind, step, start, detail=f"step {step}")]
    if stop is not None:
        events.append(nemesis("stop", kind, step, stop))
    return events


def acks(rates: Sequence[int]) -> list[Event]:
    """``rates[s]`` acknowledged single-value publishes in second ``s``, evenly spaced
    inside it (first at ``s + 0.5 / rate``), each value received once on channel a."""
    events: list[Event] = []
    value = 0
    for second, rate in enumerate(rates):
        for k in range(rate):
            t = second + (k + 0.5) / rate
            events += [pub(value, t), recv(value, "a", t)]
            value += 1
    return events


def history(*parts: Iterable[Event]) -> list[Event]:
    """The parts merged in time order, as ``read_history`` returns them."""
    return sorted((e for part in parts for e in part), key=lambda e: float(e["t"]))


def clean(values: int, channels: Sequence[str] = ("a", "b")) -> list[Event]:
    """``values`` values published (acknowledged) and each received once per channel."""
    events = []
    for v in range(values):
        events.append(pub(v, 0.1 + v * 0.1))
        events += [recv(v, ch, 0.15 + v * 0.1) for ch in channels]
    return events
