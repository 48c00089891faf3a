"""Mutual TLS between a cluster's daemons (``--cluster-tls-*``), real processes.

- A cluster whose daemons all have certificates of one CA (made by ``nsqpy cert``)
  replicates, registers with its lookupd, and says it is secure in ``/cluster/stats``.
- An outsider who reaches a leader's ``--rpc-address`` is refused at the handshake, with
  one log line on the leader, before anything of the replication protocol is read: in
  plain TCP (the magic and a HELLO naming a real follower: today's protocol, which an
  insecure cluster serves), with a certificate of another CA, with none. The same for a
  lookupd's TCP port (what nsqd registers on).
- Without the flags a cluster still runs, each daemon logs one warning at start, and
  ``/cluster/stats`` says it is not secure (``test_topics.py`` checks that on the shared
  cluster). Flags given in part stop the daemon with one line.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from nsqpy.cluster.tls import INSECURE
from nsqpy.protocol.replication import MAGIC, encode_hello
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.http import http_request
from nsqpy.tools.cert import cert_pem, create_ca, create_leaf, write_key

from .conftest import OwnCluster, create, leaders

TOPIC = "secret"


def certs(directory: Path, name: str) -> dict[str, Path]:
    """A CA of its own and a certificate for 127.0.0.1 signed by it, as files."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = create_ca(f"{name} CA")
    leaf = create_leaf(ca, ["127.0.0.1", "localhost"])
    files = {
        "ca": directory / "ca.pem",
        "cert": directory / "node.pem",
        "key": directory / "node.key",
    }
    files["ca"].write_bytes(cert_pem(ca.cert))
    files["cert"].write_bytes(cert_pem(leaf.cert))
    write_key(leaf.key, files["key"])
    return files


def tls_flags(files: dict[str, Path]) -> list[str]:
    return [
        f"--cluster-tls-root-ca-file={files['ca']}",
        f"--cluster-tls-cert={files['cert']}",
        f"--cluster-tls-key={files['key']}",
    ]


@pytest.fixture
def secure(own_cluster: OwnCluster, tmp_path: Path) -> LocalCluster:
    flags = tls_flags(certs(tmp_path / "certs", "ours"))
    cluster = own_cluster(nodes=2, lookupds=1, nsqd_flags=flags, lookupd_flags=flags)
    assert create(cluster, TOPIC, partition_num=1, replicator=2) == (200, None)
    cluster.wait_for(
        lambda: all(len(p["isr"]) == 2 for p in cluster.partitions(TOPIC).values()),
        30, "both replicas in the ISR",
    )  # fmt: skip
    return cluster


def refusals(cluster: LocalCluster, proc_logs: list[str], what: str) -> list[str]:
    return [line for line in proc_logs if f"{what}: refused 127.0.0.1:" in line]


def test_a_secure_cluster_replicates_registers_and_says_so(secure: LocalCluster) -> None:
    leader = leaders(secure, TOPIC)[0]
    for n in range(20):
        status, _, _ = http_request(
            "POST", f"http://{secure.nsqd_http(leader)}/pub?topic={TOPIC}", b"m%d" % n, 10.0
        )
        assert status == 200  # (answered once the follower has it: over the TLS link)
    follower = 1 - leader
    secure.wait_for(
        lambda: any(
            p["partition"] == 0 and p["high_watermark"] >= 20
            for t in secure.nsqd_json(follower, f"/stats?format=json&topic={TOPIC}")["topics"]
            for p in t["partitions"]
        ),
        10, "the follower holds the 20 messages",
    )  # fmt: skip
    stats = secure.lookupd_json("/cluster/stats")
    assert stats["secure"] is True
    assert [n["secure"] for n in stats["node_stat_list"]] == [True, True]
    # nsqd registered with the lookupd over TLS: its channels are known there
    assert secure.lookupd_json(f"/lookup?topic={TOPIC}")["producers"]
    for proc in [*secure.nodes, *secure.lookupds]:
        assert not any(INSECURE in line for line in proc.log_lines)


def rpc_port(cluster: LocalCluster, i: int) -> int:
    return int(cluster.node_id(i).split(":")[1])


def hello_in_plain(port: int, cluster: LocalCluster, follower: int) -> bytes:
    """Today's protocol in plain TCP: the magic and a HELLO posing as the real follower;
    whatever comes back before the leader closes."""
    hello = encode_hello(cluster.node_id(follower), cluster.cluster_id, TOPIC, 0, 1)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(MAGIC + hello)
        got = b""
        while True:
            try:
                piece = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not piece:
                break
            got += piece
    return got


def tls_dial(port: int, files: dict[str, Path] | None, trust: Path) -> str:
    """A TLS handshake to (127.0.0.1, port) showing ``files``' certificate (None: none),
    then a read: what happened."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(trust)
    if files is not None:
        context.load_cert_chain(files["cert"], files["key"])
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(MAGIC)
            return "read " + repr(tls.recv(100))
    except (ssl.SSLError, OSError) as exc:
        return f"refused: {exc}"


def test_outsiders_are_refused_at_the_handshake_with_one_log_line(
    secure: LocalCluster, tmp_path: Path
) -> None:
    leader = leaders(secure, TOPIC)[0]
    port = rpc_port(secure, leader)
    theirs = certs(tmp_path / "theirs", "theirs")
    ours_ca = Path(secure.nsqd_flags[0].split("=", 1)[1])
    before = len(refusals(secure, secure.nodes[leader].log_lines, "replication"))

    assert hello_in_plain(port, secure, 1 - leader) == b""  # nothing of the partition
    other_ca = tls_dial(port, theirs, ours_ca)
    assert other_ca.startswith("refused") or other_ca == "read b''", other_ca
    no_cert = tls_dial(port, None, ours_ca)
    assert no_cert.startswith("refused") or no_cert == "read b''", no_cert

    secure.wait_for(
        lambda: len(refusals(secure, secure.nodes[leader].log_lines, "replication"))
        >= before + 3,
        10, "three refusals logged",
    )  # fmt: skip
    lines = refusals(secure, secure.nodes[leader].log_lines, "replication")[before:]
    assert len(lines) == 3, lines  # one line each, nothing more
    assert "WRONG_VERSION_NUMBER" in lines[0] or "wrong version" in lines[0]
    assert "CERTIFICATE_VERIFY_FAILED" in lines[1]
    assert "CERTIFICATE" in lines[2].upper()
    # the follower still replicates (its link was not taken over)
    assert all(len(p["isr"]) == 2 for p in secure.partitions(TOPIC).values())

    lookupd_tcp = secure.lookupds[0].ports["TCP"]
    with socket.create_connection(("127.0.0.1", lookupd_tcp), timeout=10) as sock:
        sock.sendall(b"  V1PING\n")
        assert sock.recv(100) == b""  # no OK: refused at the handshake
    secure.wait_for(
        lambda: refusals(secure, secure.lookupds[0].log_lines, "TCP"), 10, "lookupd logs it"
    )


@pytest.mark.parametrize(
    "given", [("cluster-tls-cert",), ("cluster-tls-root-ca-file", "cluster-tls-key")]
)
def test_flags_given_in_part_stop_nsqd_with_one_line(
    tmp_path: Path, given: tuple[str, ...]
) -> None:
    argv = [str(Path(sys.executable).with_name("nsqd")), f"--data-path={tmp_path}",
            "--etcd-endpoints=127.0.0.1:1", "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0", "--rpc-address=127.0.0.1:0",
            *(f"--{flag}={tmp_path / flag}" for flag in given)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "missing" in line]
    assert len(errors) == 1 and "mutual TLS between the daemons needs all three" in errors[0]
    assert "Traceback" not in done.stderr
