"""A Jepsen run's history: what every client and the nemesis did, one JSON object a line.

Every process of a run (each client worker, and the harness for the nemesis) appends to a
file of its own; ``read_history`` merges them in time order. Times are seconds since the
run's start on ``CLOCK_MONOTONIC`` (system-wide on Linux, so the processes agree).

Events (``op``):

- ``pub``: a publish finished. ``v`` the values it carried (one for PUB, several for
  MPUB), ``t0`` when it was sent, ``t`` when it ended, ``r`` its result: ``ok`` (the
  broker acknowledged it), ``fail`` (the broker refused it: ``e`` is the error code, such
  as ``E_FAILED_ON_NOT_WRITABLE``) or ``info`` (no answer: timeout, connection lost; ``e``
  says which). Only ``ok`` is an acknowledgement; ``fail`` and ``info`` may still have
  been written.
- ``recv``: a consumer was handed value ``v`` on channel ``ch`` (then finished it).
- ``nemesis``: a fault began (``phase`` ``start``), took a step in between (``move``: the
  second replica of ``leader-and-follower-down`` down, one back) or was healed
  (``phase`` ``stop``): ``kind`` (``halves``, ``isolate-leader``, ...), ``step`` (its
  index in the schedule), ``detail`` (what it did, for the report: which nodes, which
  halves, who led).
- ``log``: a note of the harness (``msg``), such as the start of the final drain.

Values are non-negative integers, unique per run: a producer ``k`` publishes
``k * 1_000_000_000 + n``.

A history file may be compressed (``.gz`` or ``.xz``, by its name): ``read_history``
reads it the same, so a published run's history is checked again as it is stored.
"""

from __future__ import annotations

import gzip
import heapq
import json
import lzma
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

VALUE_SPACE = 1_000_000_000  # values of producer k: k * VALUE_SPACE + n


def value_of(producer: int, n: int) -> int:
    return producer * VALUE_SPACE + n


class HistoryWriter:
    """Appends the events of one process to ``path``; ``origin`` is the run's start on
    the monotonic clock. Lines are flushed at most every ``flush_every`` seconds (and at
    ``close``), so a killed worker loses only its last moments, never a torn line in the
    middle of the file (a torn last line is skipped by the reader)."""

    def __init__(self, path: str | Path, process: str, origin: float, flush_every: float = 0.5):
        self.path = Path(path)
        self.process = process
        self.origin = origin
        self.flush_every = flush_every
        self._file: IO[str] = open(self.path, "a", buffering=1 << 16)  # noqa: SIM115
        self._flushed = time.monotonic()

    def now(self) -> float:
        return round(time.monotonic() - self.origin, 6)

    def write(self, op: str, **fields: Any) -> None:
        fields.setdefault("t", self.now())
        event = {"p": self.process, "op": op, **fields}
        self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
        if time.monotonic() - self._flushed >= self.flush_every:
            self.flush()

    def pub(self, values: list[int], t0: float, result: str, error: str = "") -> None:
        if error:
            self.write("pub", v=values, t0=t0, r=result, e=error)
        else:
            self.write("pub", v=values, t0=t0, r=result)

    def recv(self, value: int, channel: str) -> None:
        self.write("recv", v=value, ch=channel)

    def nemesis(self, phase: str, kind: str, step: int, detail: str = "") -> None:
        self.write("nemesis", phase=phase, kind=kind, step=step, detail=detail)

    def log(self, msg: str) -> None:
        self.write("log", msg=msg)

    def flush(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._flushed = time.monotonic()

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()


def open_text(path: str | Path) -> IO[str]:
    """``path`` opened for reading text, decompressed when its name ends ``.gz`` or ``.xz``."""
    name = str(path)
    if name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    if name.endswith(".xz"):
        return lzma.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _events(path: Path) -> Iterator[dict[str, Any]]:
    with open_text(path) as f:
        for line in f:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a torn last line of a killed process
            if isinstance(event, dict) and "op" in event and "t" in event:
                yield event


def read_history(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every event of ``paths`` (each file in time order already), merged by time."""
    streams = [_events(Path(p)) for p in paths]
    return list(heapq.merge(*streams, key=lambda e: float(e["t"])))


def write_history(events: Iterable[dict[str, Any]], path: str | Path) -> None:
    """The merged history as one file (the run's record, kept beside its report)."""
    with open(path, "w", encoding="utf-8") as f:
        for event in events:
            f.write(json.dumps(event, separators=(",", ":")) + "\n")
