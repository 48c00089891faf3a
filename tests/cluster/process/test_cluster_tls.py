"""Mutual TLS between a cluster's daemons (``--cluster-tls-*``), real processes.

- A cluster whose daemons all have certificates of one CA (made by ``nsqpy cert``)
  replicates, registers with its lookupd, and says it is secure in ``/cluster/stats``.
- An outsider who reaches a leader's ``--rpc-address`` is refused at the handshake, with
  one log line on the leader, before anything of the replication protocol is read: in
  plain TCP (the magic and a HELLO naming a real follower: today's protocol, which an
  insecure cluster serves), with a certificate of another CA, with none. The same for a
  lookupd's TCP port (what nsqd registers on).
- A publish to a node that does not lead is forwarded to the leader over the same mutual
  TLS; under ``--auth-http-address`` the node the client publishes to checks the client's
  rights itself, and the leader trusts the forwarding connection as a node (no AUTH) only
  for its cluster certificate: a stranger who says it forwards is an ordinary client.
- Also without TLS, a HELLO posing as a real follower (whose id ``/cluster/stats`` lists)
  is refused: a leader takes a follower's link only from the node's incarnation in etcd,
  so the real follower keeps its link and its acknowledgements still count.
- Without the flags a cluster still runs, each daemon logs one warning at start, and
  ``/cluster/stats`` says it is not secure (``test_topics.py`` checks that on the shared
  cluster). Flags given in part stop the daemon with one line.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nsqpy.cluster.tls import INSECURE
from nsqpy.nsqadmin.app import NsqAdmin, NsqAdminOptions
from nsqpy.nsqd.gate import FORWARD_AGENT
from nsqpy.protocol.extend import encode_pub_ext, encode_pub_trace
from nsqpy.protocol.replication import (
    E_NOT_REPLICA,
    MAGIC,
    ErrorFrame,
    ReplicationReader,
    encode_hello,
)
from nsqpy.testing import WireClient, pub
from nsqpy.testing.auth import AuthStub, authed_client, grant
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.http import http_request
from nsqpy.testing.processes import free_ports
from nsqpy.tools.cert import cert_pem, create_ca, create_leaf, write_key

from .conftest import OwnCluster, create, leaders

TOPIC = "secret"


def certs(directory: Path, name: str) -> dict[str, Path]:
    """A CA of its own, a certificate for 127.0.0.1 and a client-only one (``nsqpy cert
    create-client``'s) signed by it, as files."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = create_ca(f"{name} CA")
    leaf = create_leaf(ca, ["127.0.0.1", "localhost"])
    client = create_leaf(ca, [], "nsqadmin", server=False)
    files = {
        "ca": directory / "ca.pem",
        "cert": directory / "node.pem",
        "key": directory / "node.key",
        "client": directory / "nsqadmin.pem",
        "client_key": directory / "nsqadmin.key",
    }
    files["ca"].write_bytes(cert_pem(ca.cert))
    files["cert"].write_bytes(cert_pem(leaf.cert))
    write_key(leaf.key, files["key"])
    files["client"].write_bytes(cert_pem(client.cert))
    write_key(client.key, files["client_key"])
    return files


def tls_flags(files: dict[str, Path]) -> list[str]:
    return [
        f"--cluster-tls-root-ca-file={files['ca']}",
        f"--cluster-tls-cert={files['cert']}",
        f"--cluster-tls-key={files['key']}",
    ]


@pytest.fixture
def secure(own_cluster: OwnCluster, tmp_path: Path) -> LocalCluster:
    return two_nodes(own_cluster, tmp_path)


def two_nodes(own_cluster: OwnCluster, tmp_path: Path, *nsqd_flags: str) -> LocalCluster:
    """Two nsqd and a lookupd with certificates of one CA; topic TOPIC on both."""
    flags = tls_flags(certs(tmp_path / "certs", "ours"))
    cluster = own_cluster(
        nodes=2, lookupds=1, nsqd_flags=[*flags, *nsqd_flags], lookupd_flags=flags
    )
    assert create(cluster, TOPIC, partition_num=1, replicator=2) == (200, None)
    cluster.wait_for(
        lambda: all(len(p["isr"]) == 2 for p in cluster.partitions(TOPIC).values()),
        30, "both replicas in the ISR",
    )  # fmt: skip
    return cluster


def refusals(cluster: LocalCluster, proc_logs: list[str], what: str) -> list[str]:
    """The TLS handshakes ``what`` refused (other refusals, of a HELLO say, are not)."""
    return [
        line
        for line in proc_logs
        if f"{what}: refused 127.0.0.1:" in line and "TLS handshake failed" in line
    ]


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


PARTIAL = [("cluster-tls-cert",), ("cluster-tls-root-ca-file", "cluster-tls-key")]


@pytest.mark.parametrize("program", ["nsqd", "nsqlookupd"])
@pytest.mark.parametrize("given", PARTIAL)
def test_flags_given_in_part_stop_the_daemon_with_one_line(
    tmp_path: Path, program: str, given: tuple[str, ...]
) -> None:
    argv = [str(Path(sys.executable).with_name(program)), "--etcd-endpoints=127.0.0.1:1",
            "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
            *(f"--{flag}={tmp_path / flag}" for flag in given)]  # fmt: skip
    if program == "nsqd":
        argv += [f"--data-path={tmp_path}", "--rpc-address=127.0.0.1:0"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "missing" in line]
    assert len(errors) == 1 and "mutual TLS between the daemons needs all three" in errors[0]
    assert "Traceback" not in done.stderr


def forwarders(cluster: LocalCluster, i: int) -> list[dict[str, object]]:
    """The clients of nsqd ``i`` that forward publishes (as its /stats lists them)."""
    doc = cluster.nsqd_json(i, "/stats?format=json&include_clients=true")
    return [c for c in doc.get("producers", []) if c.get("user_agent") == FORWARD_AGENT]


def test_a_publish_to_a_follower_goes_to_the_leader_over_mutual_tls_with_the_clients_rights(
    own_cluster: OwnCluster, tmp_path: Path
) -> None:
    with AuthStub() as auth:
        auth.replies["writer"] = grant(TOPIC, "publish")
        auth.replies["reader"] = grant(TOPIC, "subscribe")
        cluster = two_nodes(own_cluster, tmp_path, f"--auth-http-address={auth.address}")
        leader = leaders(cluster, TOPIC)[0]
        follower = 1 - leader
        port = cluster.nodes[follower].ports["TCP"]

        writer = authed_client(port, "writer", timeout=10.0)
        writer.send(pub(TOPIC, b"through the leader"))
        assert writer.read_frame() == (0, b"OK")  # (the leader answered it: forwarded)
        writer.close()
        peers = forwarders(cluster, leader)
        assert len(peers) == 1
        assert peers[0]["tls"] is True and peers[0]["cluster_peer"] is True

        reader = authed_client(port, "reader", timeout=10.0)  # may read, not publish
        reader.send(pub(TOPIC, b"refused where it came in"))
        ftype, data = reader.read_frame()
        assert ftype == 1 and data.startswith(b"E_UNAUTHORIZED"), data
        reader.close()

        # A stranger on the leader's own port who says it forwards, without a certificate:
        # an ordinary client there, asked to AUTH like any other.
        stranger = WireClient(cluster.nodes[leader].ports["TCP"], timeout=10.0)
        body = json.dumps({"user_agent": FORWARD_AGENT, "feature_negotiation": True}).encode()
        stranger.send(b"  V2IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        ftype, data = stranger.read_frame()
        assert ftype == 0 and json.loads(data)["tls_v1"] is False
        stranger.send(pub(TOPIC, b"forged"))
        ftype, data = stranger.read_frame()
        assert ftype == 1 and data.startswith(b"E_AUTH_FIRST"), data
        stranger.close()


def test_in_an_insecure_cluster_a_hello_posing_as_a_follower_takes_nothing_over(
    own_cluster: OwnCluster, topic_name: str
) -> None:
    shared = own_cluster(nodes=2, lookupds=1, secure=False)
    assert create(shared, topic_name, partition_num=1, replicator=2) == (200, None)
    info = shared.partitions(topic_name)[0]
    leader = shared.node_index(info["id"])
    (follower,) = [n for n in info["isr"] if n != info["id"]]

    def publish(n: int) -> int:
        status, _, _ = http_request(
            "POST", f"http://{shared.nsqd_http(leader)}/pub?topic={topic_name}", b"%d" % n, 10.0
        )
        return status

    assert publish(0) == 200  # (answered once the follower has it: its link is up)
    hello = encode_hello(follower, shared.cluster_id, topic_name, 0, info["leader_epoch"])
    reader = ReplicationReader(expect_magic=True)
    with socket.create_connection(("127.0.0.1", rpc_port(shared, leader)), timeout=10) as sock:
        sock.sendall(MAGIC + hello)
        while (piece := sock.recv(65536)) != b"":
            reader.feed(piece)
    (answer,) = list(reader.frames())
    assert isinstance(answer, ErrorFrame) and answer.code == E_NOT_REPLICA, answer
    assert "not from its incarnation" in answer.text
    for n in range(1, 6):  # still answered: the real follower's link and ACKs were kept
        assert publish(n) == 200
    assert shared.partitions(topic_name)[0]["isr"] == info["isr"]


def rpc_calls(cluster: LocalCluster, i: int) -> float:
    """nsqlookupd ``i``'s count of connections on its --rpc-address (its /metrics)."""
    status, body, _ = http_request("GET", f"http://{cluster.lookupd_http(i)}/metrics", b"", 10.0)
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith("nsqlookupd_rpc_connections_total"):
            return float(line.split()[-1])
    raise AssertionError("no nsqlookupd_rpc_connections_total in /metrics")


def test_the_lookupds_are_called_over_mutual_tls(own_cluster: OwnCluster, tmp_path: Path) -> None:
    """In a secure cluster the coordinating lookupd is called at its --rpc-address over the
    cluster's mutual TLS: an nsqd creating a topic on a first publish, a lookupd handing it an
    admin write it received; every lookupd is read there for a new topic's channels. Their
    public HTTP ports serve clients as before."""
    flags = tls_flags(certs(tmp_path / "certs", "ours"))
    cluster = own_cluster(nodes=2, lookupds=2, nsqd_flags=flags, lookupd_flags=flags)
    coordinator = cluster.coordinator_index()
    other = 1 - coordinator
    before = rpc_calls(cluster, coordinator)
    status, _, _ = http_request(
        "POST", f"http://{cluster.nsqd_http(0)}/pub?topic=implicit_tls", b"x", 10.0
    )
    assert status == 200  # (created through the coordinator on the way)
    assert "implicit_tls" in cluster.lookupd_json("/topics", coordinator)["topics"]
    after_create = rpc_calls(cluster, coordinator)
    assert after_create > before
    assert (
        cluster.post("/topic/create?topic=forwarded_tls&partition_num=1&replicator=1", other)[0]
        == 200
    )
    assert rpc_calls(cluster, coordinator) > after_create  # (the other lookupd handed it on)
    # Every lookupd is asked for a new topic's channels by the nsqd that take it up, over
    # the same mutual TLS (the one that does not coordinate too).
    cluster.wait_for(lambda: rpc_calls(cluster, other) > 0, 10, "the other lookupd asked")


def test_youzans_publish_forms_are_forwarded_and_answered_as_the_leader_answers(
    secure: LocalCluster,
) -> None:
    """PUB_TRACE and PUB_EXT to the node that does not lead go to the leader (over the
    cluster's mutual TLS); a traced publish gets the leader's traced reply: OK, the message
    id, its trace id, the offset the leader stored it at, its size."""
    leader = leaders(secure, TOPIC)[0]
    client = WireClient(secure.nodes[1 - leader].ports["TCP"], timeout=10.0)
    client.send(b"  V2" + encode_pub_trace(TOPIC, 99, b"traced"))
    ftype, data = client.read_frame()
    assert ftype == 0 and data[:2] == b"OK" and len(data) == 30, data
    _, trace_id, offset, _ = struct.unpack(">QQQI", data[2:])
    assert trace_id == 99
    client.send(encode_pub_ext(TOPIC, b'{"k":"v"}', b"with a header"))
    assert client.read_frame() == (0, b"OK")
    client.close()
    secure.wait_for(
        lambda: any(
            p["partition"] == 0 and p["high_watermark"] >= offset + 2
            for t in secure.nsqd_json(leader, f"/stats?format=json&topic={TOPIC}")["topics"]
            for p in t["partitions"]
        ),
        10, "both on the leader",
    )  # fmt: skip


async def test_nsqadmin_with_the_cluster_certificates_calls_lookupd_over_mutual_tls(
    own_cluster: OwnCluster, tmp_path: Path
) -> None:
    """nsqadmin given ``--cluster-tls-*`` reads and acts on nsqlookupd at its
    --rpc-address, over the cluster's mutual TLS (the address without a scheme is dialled
    in TLS); one with the CA but no certificate is refused at the handshake, and says so."""
    files = certs(tmp_path / "certs", "ours")
    (rpc,) = free_ports(1)
    flags = tls_flags(files)
    cluster = own_cluster(
        nodes=2, lookupds=1, nsqd_flags=flags,
        lookupd_flags=[*flags, f"--rpc-address=127.0.0.1:{rpc}"],
    )  # fmt: skip
    cluster_tls = {
        "cluster_tls_root_ca_file": str(files["ca"]),
        "cluster_tls_cert": str(files["client"]),  # (a client-only certificate will do)
        "cluster_tls_key": str(files["client_key"]),
    }
    before = rpc_calls(cluster, 0)
    async with admin_at(f"127.0.0.1:{rpc}", **cluster_tls) as call:
        status, doc = await call("POST", "/api/cluster/topics", {
            "topic": "made_by_admin", "partition_num": 1, "replicator": 2,
        })  # fmt: skip
        assert status == 200, doc
        status, doc = await call("GET", "/api/nodes")
        assert status == 200 and doc["cluster"]["secure"] is True, doc
        assert len(doc["nodes"]) == 2
    assert "made_by_admin" in cluster.lookupd_json("/topics")["topics"]
    assert rpc_calls(cluster, 0) > before

    refused_before = len(refusals(cluster, cluster.lookupds[0].log_lines, "RPC"))
    no_cert = {"http_client_tls_root_ca_file": str(files["ca"])}
    async with admin_at(f"https://127.0.0.1:{rpc}", **no_cert) as call:
        status, doc = await call("GET", "/api/nodes")
        assert status >= 500 and "127.0.0.1" in json.dumps(doc), doc
    cluster.wait_for(
        lambda: len(refusals(cluster, cluster.lookupds[0].log_lines, "RPC")) > refused_before,
        10, "the handshake refused in the lookupd's log",
    )  # fmt: skip


@asynccontextmanager
async def admin_at(
    lookupd: str, **options: Any
) -> AsyncIterator[Callable[..., Awaitable[tuple[int, Any]]]]:
    """An nsqadmin in this process reading ``lookupd``, and a call to its API."""
    opts = NsqAdminOptions(
        http_address="127.0.0.1:0", lookupd_http_addresses=[lookupd],
        stats_sample_interval_ms=0, **options,
    )  # fmt: skip
    admin = NsqAdmin(opts)
    await admin.start()
    try:
        async with aiohttp.ClientSession() as session:

            async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
                url = f"http://127.0.0.1:{admin.http_port}{path}"
                data = json.dumps(body).encode() if body is not None else None
                async with session.request(method, url, data=data) as resp:
                    return resp.status, json.loads(await resp.read())

            yield call
    finally:
        await admin.stop()
