"""The three-node cluster of docs/cluster.md, run as written: its commands (certificates by
``nsqpy cert``, etcd with client TLS, two nsqlookupd and three nsqd with mutual TLS), then
its ``curl`` lines and its nsqadmin, in a network namespace this test makes (the example's
fixed ports touch nothing else), torn down afterwards whatever happens."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nsqpy.cluster.tls import INSECURE

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

DOC = Path(__file__).resolve().parents[3] / "docs" / "cluster.md"
SECTION = "## A three-node cluster on one machine"

# Run in the namespace once the documented commands are started: wait for the three nodes,
# then print one line of JSON per check.
WAIT = """
import json, sys, time, urllib.request
def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)
deadline = time.monotonic() + float(sys.argv[2])
while True:
    try:
        doc = get(sys.argv[1])
        if eval(sys.argv[3]):
            print(json.dumps(doc)); break
    except (OSError, ValueError, KeyError):
        pass
    if time.monotonic() > deadline:
        print(json.dumps({"timed_out": sys.argv[1]})); break
    time.sleep(0.3)
"""


def run_in_namespace(script: str, timeout: float) -> str:
    """``script`` by bash in a network namespace of its own (its loopback only), which is
    deleted afterwards, and every process the script left killed; what it printed."""
    namespace = f"nsqpy-docs-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    proc = subprocess.Popen(
        ["ip", "netns", "exec", namespace, "bash", "-c", script],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        subprocess.run(["ip", "netns", "del", namespace], check=False)
    return output.decode(errors="replace")


def blocks() -> tuple[str, list[str], str]:
    """The section's set-up block, its curl lines and its nsqadmin line."""
    text = DOC.read_text()
    start = text.index(SECTION)
    setup, usage = re.findall(r"```sh\n(.*?)```", text[start:], re.S)[:2]
    lines = usage.splitlines()
    curls = [line.split("  #")[0].strip() for line in lines if line.startswith("curl ")]
    (admin,) = [line.split("  #")[0].strip() for line in lines if line.startswith("nsqadmin ")]
    return setup, curls, admin


def test_the_documented_three_node_cluster_runs_secure(tmp_path: Path) -> None:
    setup, curls, admin = blocks()
    assert "--cluster-tls-cert" in setup and "--client-cert-auth" in setup, "secure by default"
    work = tmp_path / "example"
    setup = setup.replace("/tmp/nsqpy-cluster", str(work))
    wait = tmp_path / "wait.py"
    wait.write_text(WAIT)
    stats = "http://127.0.0.1:4161/cluster/stats"
    script = "\n".join([
        "ip link set lo up",
        f"export PATH={Path(sys.executable).parent}:$PATH",
        setup,
        f"python3 {wait} {stats} 60 'len(doc[\"node_stat_list\"]) == 3' > {tmp_path}/ready",
        *(f"{line} > {tmp_path}/curl{i} 2> {tmp_path}/curl{i}.err" for i, line in enumerate(curls)),
        f"{admin} --http-address=127.0.0.1:4171 > {tmp_path}/admin.log 2>&1 &",
        f"python3 {wait} http://127.0.0.1:4171/api/nodes 30 'len(doc[\"nodes\"]) == 3'"
        f" > {tmp_path}/admin",
        "kill $(jobs -p) 2>/dev/null; wait",
    ])  # fmt: skip
    log = run_in_namespace(script, timeout=150)
    ready = json.loads((tmp_path / "ready").read_text())
    assert "timed_out" not in ready, log[-3000:]
    assert ready["secure"] is True and all(n["secure"] for n in ready["node_stat_list"])
    assert INSECURE[:40] not in log, "no daemon says it is insecure"
    answers = [(tmp_path / f"curl{i}").read_text() for i in range(len(curls))]
    paths = [re.findall(r"127\.0\.0\.1:\d+(/[\w/]+)", c)[0] for c in curls]
    by_path = dict(zip(paths, answers, strict=True))
    lookup = json.loads(by_path["/lookup"])
    assert lookup["meta"]["partition_num"] == 3 and len(lookup["partitions"]) == 3
    assert json.loads(by_path["/cluster/stats"])["secure"] is True
    assert by_path["/pub"] == "OK"
    nodes = json.loads((tmp_path / "admin").read_text())
    assert "timed_out" not in nodes, (tmp_path / "admin.log").read_text()[-2000:]
    assert nodes["cluster"]["secure"] is True
