"""Run Youzan's Go client's own test suite against nsqpy.

    python scripts/youzan_suite.py SUITE [--cluster] [--out DIR] [-- GO_TEST_ARGS...]

SUITE is a checkout of youzan/go-nsq at tag v1.7.12.1-HA (its ``*_test.go`` files and its
``test/`` TLS fixtures), either with a test binary built from it beside them
(``go-nsq.test``, ``go test -c -o go-nsq.test``) or with what ``go test`` needs to build it
there. The daemons are started as the suite's own ``test.sh`` starts them: one nsqlookupd
on 127.0.0.1:4160/4161 and one nsqd on 127.0.0.1:4150/4151/4152 with the suite's TLS files,
``--broadcast-address=127.0.0.1`` and ``--sync-timeout=100ms``. With ``--cluster`` the nsqd
is a node of a cluster (an etcd member of its own on loopback, the nsqlookupd its
coordinator), which creates the suite's topics through the coordinator.

Prints one ``PASS|FAIL TestName (secs)`` line per top-level test into DIR/results.txt
(default ``test-artifacts/youzan-suite``), the daemons' logs beside it, and a summary line;
exits with go test's status. Every process it starts is stopped when it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from nsqpy.testing.etcd import EtcdCluster

PORTS = (4150, 4151, 4152, 4160, 4161, 4162, 4165)  # the daemons', and the suite's fakes
BIN = Path(sys.executable).parent
RESULT = re.compile(r"^--- (PASS|FAIL|SKIP): (\S+) \(([^)]*)\)")


def in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def wait(check: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.1)
    raise SystemExit(f"{what} did not come up within {timeout:.0f} s")


@contextlib.contextmanager
def daemon(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_command(suite: Path, extra: list[str]) -> list[str]:
    binary = suite / "go-nsq.test"
    if binary.exists():
        return [str(binary), "-test.v", "-test.count=1", "-test.timeout=600s", *extra]
    return ["go", "test", "-v", "-count=1", "-timeout=600s", *extra, "."]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", type=Path)
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("test-artifacts/youzan-suite"))
    parser.add_argument("go_args", nargs="*")
    args = parser.parse_args()
    suite: Path = args.suite.resolve()
    out: Path = args.out.resolve()
    if not (suite / "test" / "server.pem").exists():
        raise SystemExit(f"{suite} is not a checkout of youzan/go-nsq (no test/server.pem)")
    busy = [p for p in PORTS if in_use(p)]
    if busy:
        raise SystemExit(f"ports {busy} are in use; stop whatever listens there first")
    out.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        cluster: list[str] = []
        if args.cluster:
            etcd = stack.enter_context(EtcdCluster(1, out / "etcd"))
            cluster = [f"--etcd-endpoints={etcd.endpoints[0]}", "--cluster-id=youzan-suite"]
        stack.enter_context(daemon([
            str(BIN / "nsqlookupd"), "--tcp-address=127.0.0.1:4160",
            "--http-address=127.0.0.1:4161", "--broadcast-address=127.0.0.1", *cluster,
        ], out / "nsqlookupd.log"))  # fmt: skip
        if args.cluster:
            cluster += ["--rpc-address=127.0.0.1:0", "--node-id=1"]
        stack.enter_context(daemon([
            str(BIN / "nsqd"), "--tcp-address=127.0.0.1:4150", "--http-address=127.0.0.1:4151",
            "--https-address=127.0.0.1:4152", "--broadcast-address=127.0.0.1",
            "--sync-timeout=100ms", f"--data-path={out / 'data'}",
            "--lookupd-tcp-address=127.0.0.1:4160", f"--tls-cert={suite / 'test/server.pem'}",
            f"--tls-key={suite / 'test/server.key'}",
            f"--tls-root-ca-file={suite / 'test/ca.pem'}", *cluster,
        ], out / "nsqd.log"))  # fmt: skip
        wait(lambda: up(4161), "nsqlookupd")
        wait(lambda: up(4151), "nsqd")
        time.sleep(3)  # registration with nsqlookupd (and in a cluster, the coordinator)
        with (out / "test.log").open("wb") as log:
            rc = subprocess.call(test_command(suite, args.go_args), cwd=suite, stdout=log,
                                 stderr=subprocess.STDOUT)  # fmt: skip
    lines = (out / "test.log").read_text(errors="replace").splitlines()
    results = [m.expand(r"\1 \2 (\3)") for line in lines if (m := RESULT.match(line))]
    ran = {line.split()[2] for line in lines if line.startswith("=== RUN") and "/" not in line}
    done = {r.split()[1] for r in results}
    results += [f"FAIL {name} (did not finish)" for name in sorted(ran - done)]
    (out / "results.txt").write_text("".join(r + "\n" for r in results))
    passed = sum(r.startswith("PASS") for r in results)
    failed = sum(r.startswith("FAIL") for r in results)
    print(f"{passed} passed, {failed} failed (go test rc={rc}); per test: {out / 'results.txt'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
