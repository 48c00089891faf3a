"""A run's record, kept and checked again: ``publish`` stores a run's history and result
compressed (xz) beside its picture (``docs/jepsen/<name>.*``); ``find_history`` and
``stored_result`` find them again for ``nsqpy jepsen check``, and ``differences`` says
where a new check of a history disagrees with the result stored with it.

A published run is four files with one prefix: ``<prefix>.png`` (the timeline),
``<prefix>.history.jsonl.xz``, ``<prefix>.result.json.xz`` and ``<prefix>.run.json``
(profile, seed, the commit it ran on, its wall time). xz, because a long run's history is
some 150 MB of JSON lines: about 6 % of that in xz, 10 % in gzip; ``history.open_text``
reads either. A run's own directory holds the same
as ``timeline.png``, ``history.jsonl``, ``result.json`` and ``run.json``. Standard
library only.
"""

from __future__ import annotations

import json
import lzma
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nsqpy.jepsen.history import open_text

HISTORY_NAMES = ("history.jsonl", "history.jsonl.gz", "history.jsonl.xz")
RESULT_SUFFIXES = ("", ".gz", ".xz")
# what must be the same when a history is checked again (the rest is derived from these)
COMPARED = ("valid", "attempted", "acknowledged", "failed", "indeterminate")
COMPARED_CHANNEL = ("valid", "received", "lost_count", "unexpected_count", "duplicates",
                    "recovered_count")  # fmt: skip


def find_history(path: str | Path) -> Path | None:
    """The history of ``path``: a run's (or a copy's) directory, or a history file itself
    (``.jsonl``, ``.jsonl.gz``, ``.jsonl.xz``); None when there is none."""
    path = Path(path)
    if path.is_dir():
        return next((path / n for n in HISTORY_NAMES if (path / n).is_file()), None)
    return path if path.is_file() else None


def stored_result(history: Path) -> Path | None:
    """The result stored with ``history``: ``result.json`` beside ``history.jsonl`` in a
    run's directory, ``<prefix>.result.json.xz`` beside ``<prefix>.history.jsonl.xz``
    (either compressed or not); None when there is none."""
    stem = _stem(history)
    if stem is None:
        return None
    for suffix in RESULT_SUFFIXES:
        candidate = history.with_name(f"{stem}result.json{suffix}")
        if candidate.is_file():
            return candidate
    return None


def _stem(history: Path) -> str | None:
    """``<prefix>.`` of ``<prefix>.history.jsonl.xz`` (empty for ``history.jsonl``)."""
    for ending in HISTORY_NAMES[::-1]:
        if history.name.endswith(ending):
            return history.name[: -len(ending)]
    return None


def run_title(history: Path) -> str | None:
    """ "nsqpy jepsen, profile P, seed S" from the ``run.json`` stored with ``history``
    (``<prefix>.run.json`` beside ``<prefix>.history.jsonl.xz``), or None without one."""
    stem = _stem(history)
    path = history.with_name(f"{stem}run.json") if stem is not None else None
    if path is None or not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        return f"nsqpy jepsen, profile {doc['profile']}, seed {doc['seed']}"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_result(path: str | Path) -> dict[str, Any]:
    with open_text(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a checker result")
    return doc


def differences(stored: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Where ``new`` (a ``CheckResult.to_json()``) disagrees with ``stored``, one line each
    (empty: the same verdict and counts)."""
    found = [
        f"{key}: stored {stored.get(key)!r}, now {new.get(key)!r}"
        for key in COMPARED
        if stored.get(key) != new.get(key)
    ]
    old_channels = {c.get("channel"): c for c in stored.get("channels") or []}
    for channel in new.get("channels") or []:
        name = channel["channel"]
        old = old_channels.get(name)
        if old is None:
            found.append(f"channel {name}: not in the stored result")
            continue
        found.extend(
            f"channel {name} {key}: stored {old.get(key)!r}, now {channel.get(key)!r}"
            for key in COMPARED_CHANNEL
            if old.get(key) != channel.get(key)
        )
    return found


def _xz(source: Path, target: Path) -> None:
    """``source`` compressed into ``target`` (xz, the same bytes for the same input)."""
    with open(source, "rb") as f, lzma.open(target, "wb", preset=6) as xz:
        shutil.copyfileobj(f, xz, 1 << 20)


def publish(run: str | Path, prefix: str | Path) -> list[Path]:
    """Store the run in directory ``run`` under ``prefix`` (see the module docstring);
    returns the files written. Raises ``FileNotFoundError`` naming a missing file."""
    run, prefix = Path(run), Path(prefix)
    pairs = [
        (run / "history.jsonl", Path(f"{prefix}.history.jsonl.xz")),
        (run / "result.json", Path(f"{prefix}.result.json.xz")),
        (run / "timeline.png", Path(f"{prefix}.png")),
        (run / "run.json", Path(f"{prefix}.run.json")),
    ]
    missing = [str(source) for source, _ in pairs if not source.is_file()]
    if missing:
        raise FileNotFoundError(f"not a finished run: no {', '.join(missing)}")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for source, target in pairs:
        if target.name.endswith(".xz"):
            _xz(source, target)
        else:
            shutil.copyfile(source, target)
    return [target for _, target in pairs]
