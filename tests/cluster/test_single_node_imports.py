"""A single node pays nothing for cluster mode: without --etcd-endpoints neither nsqd nor
nsqlookupd loads the etcd client or gRPC (about 15 MB of memory), and with it they do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import sys
from nsqpy.{module} import {cls} as Daemon
from nsqpy.{options_module} import {options} as Options
daemon = Daemon(Options({args}))
print(sorted(m for m in ("aetcd", "grpc", "nsqpy.cluster.etcd") if m in sys.modules))
"""


def loaded(module: str, cls: str, options_module: str, options: str, args: str) -> str:
    code = PROBE.format(module=module, cls=cls, options_module=options_module, options=options,
                        args=args)  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    return done.stdout.strip()


def test_nsqd_loads_the_etcd_client_only_in_a_cluster(tmp_path: Path) -> None:
    base = f"data_path={str(tmp_path)!r}, tcp_address='127.0.0.1:0', http_address='127.0.0.1:0'"
    assert loaded("nsqd.server", "NsqdServer", "options", "NsqdOptions", base) == "[]"
    clustered = base + ", etcd_endpoints='127.0.0.1:1'"
    assert "aetcd" in loaded("nsqd.server", "NsqdServer", "options", "NsqdOptions", clustered)


def test_nsqlookupd_loads_the_etcd_client_only_in_a_cluster() -> None:
    assert (
        loaded("lookupd.daemon", "NsqLookupd", "lookupd.options", "NsqLookupdOptions", "") == "[]"
    )
    clustered = "etcd_endpoints='127.0.0.1:1'"
    found = loaded(
        "lookupd.daemon", "NsqLookupd", "lookupd.options", "NsqLookupdOptions", clustered
    )
    assert "aetcd" in found
