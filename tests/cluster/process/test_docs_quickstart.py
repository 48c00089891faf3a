"""The quickstart's three-node cluster (docs/quickstart.md), run as a reader would: its shell
blocks in order in one shell (certificates, etcd with client TLS, nsqlookupd, three nsqd,
the replicated topic), the publishing loop in the background while the leader of
partition 0 is killed with SIGKILL and started again, all in a network namespace this test
makes (the page's fixed ports touch nothing else), torn down whatever happens. The page's
claims are checked: every publish answered 200 through the failover, a new leader in leader
epoch 2 for partition 0, and the cluster stable again once the node is back."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from .test_docs_example import WAIT, run_in_namespace

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

DOC = Path(__file__).resolve().parents[3] / "docs" / "quickstart.md"
SECTION = "## A three-node cluster on one machine"
LOOKUP = "'http://127.0.0.1:4161/lookup?topic=events&metainfo=true'"
PLACED = '\'len(doc["partitions"]) == 3 and all(len(p["isr"]) == 3 for p in doc["partitions"].values())\''
FAILED_OVER = '\'doc["partitions"]["0"]["leader_epoch"] > 1 and all(n.split(":")[2] != "5150" for n in doc["partitions"]["0"]["isr"])\''


def section_blocks() -> list[str]:
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return re.findall(r"```sh\n(.*?)```", text[start:end], re.S)


def test_the_quickstart_cluster_survives_its_leaders_sigkill(tmp_path: Path) -> None:
    blocks = section_blocks()
    work = tmp_path / "quickstart"
    script = ["ip link set lo up", f"export PATH={Path(sys.executable).parent}:$PATH"]
    seen = set()
    for block in blocks:
        block = block.replace("/tmp/nsqpy-quickstart", str(work))
        if "apt-get" in block or block.startswith("nsq_tail"):
            continue  # (installing etcd; the consumer of a second terminal)
        if block.startswith("for n in"):  # the publisher of a third terminal, meanwhile
            script += [f"( {block} ) > {tmp_path}/published 2>&1 &", "PUBLISHER=$!", "sleep 3"]
            seen.add("publish")
            continue
        if block.startswith("kill -9"):  # (the page's few seconds: here, until /lookup shows it)
            wait = f"python3 {tmp_path}/wait.py {LOOKUP} 30 {FAILED_OVER} > {tmp_path}/failed_over;"
            block, waits = re.subn(r"\bsleep [\d.]+;", wait, block)
            assert waits == 1, block
            script.append(
                block.replace("partitions events", f"partitions events > {tmp_path}/after")
            )
            script.append("wait $PUBLISHER")
            seen.add("kill")
            continue
        if block.startswith("i=2; nsqd"):
            script.append(block.replace("partitions events", ""))
            stats = "http://127.0.0.1:4161/cluster/stats"
            script.append(
                f"python3 {tmp_path}/wait.py {stats} 60 'doc[\"stable\"]' > {tmp_path}/stable"
            )
            seen.add("restart")
            continue
        if block.startswith("kill $(jobs -p)"):
            script.append("kill $(jobs -p) 2>/dev/null; wait")
            seen.add("clean")
            continue
        if block.startswith("curl -X POST"):
            script.append(block.rstrip() + f" > {tmp_path}/created")
            script.append(f"python3 {tmp_path}/wait.py {LOOKUP} 30 {PLACED} > {tmp_path}/placed")
            continue
        if block.startswith("nsqadmin"):
            continue  # (checked by the cluster.md example test)
        if block.startswith("curl -s 'http://127.0.0.1:4161/cluster/stats'"):
            script.append(f"python3 {tmp_path}/wait.py {block.split(chr(39))[1]} 60"
                          f" 'len(doc[\"node_stat_list\"]) == 3' > {tmp_path}/ready")  # fmt: skip
            continue
        script.append(block)
    assert seen == {"publish", "kill", "restart", "clean"}, seen
    (tmp_path / "wait.py").write_text(WAIT)
    log = run_in_namespace("\n".join(script), timeout=200)[-3000:]
    ready = json.loads((tmp_path / "ready").read_text())
    assert "timed_out" not in ready and ready["secure"] is True, log
    assert (tmp_path / "created").read_text() == "", log
    codes = (tmp_path / "published").read_text().split()
    assert codes == ["200"] * 100, codes
    after = (tmp_path / "after").read_text().splitlines()
    assert after[0].startswith("partition 0 ") and "leader_epoch 2" in after[0], after
    assert "5150" not in after[0].split("catchup")[0], "node 2 is out of partition 0's ISR"
    stable = json.loads((tmp_path / "stable").read_text())
    assert stable.get("stable") is True, stable
