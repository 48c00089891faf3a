"""Crash test: SIGKILL a writer under ``always`` at random moments; nothing acked is lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsqpy.storage import PartitionLog

from .crash_writer import body_for

WRITER = Path(__file__).with_name("crash_writer.py")
ROUNDS = 24


def run_and_kill(directory: Path, seed: int, rng: random.Random) -> int:
    """Start the writer, kill it at a random moment; returns the last acknowledged offset."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(directory), str(seed)],
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    acked = -1
    want = rng.randint(1, 60)
    deadline = time.monotonic() + 20
    try:
        for _ in range(want):
            line = proc.stdout.readline()
            assert line.startswith(b"ACK "), (line, proc.poll())
            acked = int(line.split()[1])
            assert time.monotonic() < deadline
        if rng.random() < 0.5:  # sometimes kill between acks rather than right after one
            spin_until = time.monotonic() + rng.random() * 0.003
            while time.monotonic() < spin_until:
                pass
    finally:
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=10)
    for line in rest.splitlines():  # acknowledged before it died
        if line.startswith(b"ACK "):
            acked = int(line.split()[1])
    assert proc.returncode == -signal.SIGKILL
    return acked


@pytest.mark.slow
def test_sigkill_loses_nothing_acknowledged_and_leaves_only_whole_records(tmp_path: Path) -> None:
    rng = random.Random(20240601)
    started = time.monotonic()
    best = 0
    for round_ in range(ROUNDS):
        acked = run_and_kill(tmp_path, round_, rng)
        best = max(best, acked)
        with PartitionLog(tmp_path, segment_bytes=32 * 1024) as log:
            assert log.quarantined == 0
            high = log.high_watermark
            assert high >= best, f"round {round_}: acknowledged {best}, recovered {high}"
            got = log.read(0, 10**9, 1 << 40)
            assert [r.offset for r in got] == list(range(high))
            assert all(r.body == body_for(r.offset) for r in got)
            assert all(r.trace_id in (0, r.offset) for r in got)
        best = high  # the next writer continues after what recovery kept
    assert best > 0
    assert time.monotonic() - started < 60
