"""``nsqpy jepsen`` for real (root): a deliberately broken build must be caught, and the
command says clearly when it cannot run.

The broken build is nsqd with its test-only switch (``NSQPY_UNSAFE_ACK_BEFORE_REPLICATION``):
it answers a publish once it has it, before its replicas do. Two "isolate the leader"
faults (the leader cut from the other servers while clients still publish to it) must
then lose acknowledged values, and the checker must say so. The same schedule on the real
build is what ``.ci/run`` runs in its short profile with every other fault."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

NSQPY = str(Path(sys.executable).with_name("nsqpy"))  # the console script of this install
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def jepsen(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NSQPY, "jepsen", *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def netns_list() -> list[str]:
    """The network namespaces' names (``ip netns list``), the first word of each line."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


@root_only
@pytest.mark.timeout(320)
def test_a_build_that_acknowledges_before_replication_is_reported_losing_data(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    before = set(netns_list())  # (another harness may be running on the machine)
    run = jepsen("--profile=short", "--seed=2", "--kinds=isolate-leader", "--cycles=2",
                 "--unsafe-ack-before-replication", f"--out={out}")  # fmt: skip
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["valid"] is False
    for channel in result["channels"]:
        assert channel["lost_count"] > 0, channel
    summary = (out / "summary.txt").read_text()
    assert summary.startswith("INVALID") and "UNSAFE build" in summary
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    faults = [e for e in events if e["op"] == "nemesis" and e["phase"] == "start"]
    assert [f["kind"] for f in faults] == ["isolate-leader", "isolate-leader"]
    assert not [n for n in netns_list() if n.startswith("nsqpyj") and n not in before]
    prefix = json.loads((out / "run.json").read_text())["prefix"]
    assert prefix.startswith("nsqpyj") and not Path(f"/tmp/{prefix}disks").exists()


def test_without_root_the_command_says_why_it_cannot_run(tmp_path: Path) -> None:
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if os.geteuid() != 0:
        nobody = []
    run = subprocess.run(
        [*nobody, NSQPY, "jepsen", f"--out={tmp_path}/x"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(tmp_path)},
    )  # fmt: skip
    assert run.returncode == 2
    assert "needs root" in run.stderr
    assert "Traceback" not in run.stderr


def test_an_unknown_nemesis_is_refused_by_name() -> None:
    run = jepsen("--kinds=halves,meteor")
    assert run.returncode == 2
    assert "unknown nemesis meteor" in run.stderr
