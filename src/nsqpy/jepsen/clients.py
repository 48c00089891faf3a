"""The clients of a Jepsen run: each a process of its own (``jepsen.worker``) with its
history file under ``histories/``, and the final drain that gives the consumers time to
read every acknowledged value.

Channels: ``nsqpy`` (nsqpy's Consumer) and ``plain`` (the plain protocol), each consumer
on both topics (``layout.TOPICS``). Producers on topic ``jepsen``: nsqpy's Producer with
PUB and with MPUB of 5, and two plain-protocol producers; on ``jepsen-r2``, nsqpy's
Producer with PUB (producer ``layout.R2_PRODUCER``); each at ``Profile.producer_rate``
values a second.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from nsqpy.jepsen.history import read_history
from nsqpy.jepsen.layout import R2_PRODUCER, R2_TOPIC, TOPIC, TOPICS
from nsqpy.jepsen.schedule import Profile
from nsqpy.jepsen.servers import Cluster
from nsqpy.testing.processes import die_with_parent

CHANNELS = ("nsqpy", "plain")


class Workers:
    """The client processes of a run (``jepsen.worker``), each with its history file."""

    def __init__(self, cluster: Cluster, out: Path, origin: float, profile: Profile) -> None:
        self.cluster = cluster
        self.out = out
        self.origin = origin
        self.profile = profile
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.kinds: dict[str, str] = {}

    def history_path(self, name: str) -> Path:
        return self.out / "histories" / f"{name}.jsonl"

    def start(self, name: str, kind: str, ident: int, *extra: str,
              topics: Sequence[str] = (TOPIC,)) -> None:  # fmt: skip
        (self.out / "histories").mkdir(parents=True, exist_ok=True)
        lookupds = [f"--lookupd={a}" for a in self.cluster.lookupd_http()]
        argv = [sys.executable, "-m", "nsqpy.jepsen.worker", kind, f"--id={ident}",
                f"--name={name}", *lookupds, *(f"--topic={t}" for t in topics),
                f"--history={self.history_path(name)}", f"--origin={self.origin}", *extra]  # fmt: skip
        log = open(self.out / "logs" / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.procs[name] = subprocess.Popen(die_with_parent(argv), stdout=log, stderr=log)
        log.close()
        self.kinds[name] = kind

    def start_consumers(self) -> None:
        self.start("nsqpy-consumer", "nsqpy-consumer", 0, "--channel=nsqpy", topics=TOPICS)
        self.start("plain-consumer", "plain-consumer", 0, "--channel=plain", topics=TOPICS)

    def start_producers(self) -> None:
        rate = f"--rate={self.profile.producer_rate}"
        self.start("nsqpy-pub", "nsqpy-producer", 1, rate)
        self.start("nsqpy-mpub", "nsqpy-producer", 2, rate, "--batch=5")
        self.start("plain-pub-1", "plain-producer", 3, rate)
        self.start("plain-pub-2", "plain-producer", 4, rate)
        self.start("r2-pub", "nsqpy-producer", R2_PRODUCER, rate, topics=(R2_TOPIC,))

    def stop(self, names: Sequence[str]) -> None:
        for name in names:
            with contextlib.suppress(ProcessLookupError):
                self.procs[name].send_signal(signal.SIGTERM)
        for name in names:
            try:
                self.procs[name].wait(30)
            except subprocess.TimeoutExpired:
                self.procs[name].kill()
                self.procs[name].wait()

    def kill(self) -> None:
        """Whatever still runs, killed (the end of a run, also a failed one)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def producers(self) -> list[str]:
        return [n for n, k in self.kinds.items() if k.endswith("producer")]

    def consumers(self) -> list[str]:
        return [n for n, k in self.kinds.items() if k.endswith("consumer")]

    def histories(self) -> list[Path]:
        return [self.history_path(n) for n in self.procs if self.history_path(n).exists()]


def _acknowledged(paths: Sequence[Path]) -> set[int]:
    return {
        v for e in read_history(paths) if e["op"] == "pub" and e.get("r") == "ok" for v in e["v"]
    }


def _received(paths: Sequence[Path]) -> dict[str, set[int]]:
    seen: dict[str, set[int]] = {ch: set() for ch in CHANNELS}
    for e in read_history(paths):
        if e["op"] == "recv":
            seen.setdefault(str(e["ch"]), set()).add(int(e["v"]))
    return seen


def drain(workers: Workers, profile: Profile, say: Callable[[str], None]) -> None:
    """Wait until every channel has every acknowledged value, or ``profile.drain`` seconds
    (or 20 s without a new value on any channel)."""
    acked = _acknowledged([workers.history_path(n) for n in workers.producers()])
    deadline = time.monotonic() + profile.drain
    last_count, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        seen = _received([workers.history_path(n) for n in workers.consumers()])
        missing = {ch: len(acked - seen[ch]) for ch in CHANNELS}
        if not any(missing.values()):
            say(f"drain: every channel has all {len(acked)} acknowledged values")
            return
        count = sum(len(s) for s in seen.values())
        if count != last_count:
            last_count, last_change = count, time.monotonic()
        elif time.monotonic() - last_change > 20:
            break
    say(f"drain ended with values missing: {missing}")
