"""``nsqpy cert``: a CA and node certificates that real TLS handshakes (Python's ``ssl``,
both ways verified, as the daemons of a secure cluster do) accept, and refuse from another
CA; a rotation's second CA trusted beside the first; nothing overwritten unasked; bad
input one line on stderr."""

from __future__ import annotations

import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest

from nsqpy.cli import main as nsqpy
from nsqpy.tools.cert import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def make(capsys: pytest.CaptureFixture[str], certs: Path, ca_key: Path, *hosts: str) -> None:
    assert run(capsys, "create-ca", "--certs-dir", str(certs), "--ca-key", str(ca_key))[0] == 0
    code, out, err = run(
        capsys, "create-node", *hosts, "--certs-dir", str(certs), "--ca-key", str(ca_key)
    )
    assert code == 0, err
    assert "node.pem" in out


def contexts(trust: Path, server: Path, client: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server demanding a client certificate and a client checking the server's name,
    both trusting ``trust`` only: ``server`` and ``client`` are certs directories."""
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(server / "node.pem", server / "node.key")
    serving.load_verify_locations(trust)
    serving.verify_mode = ssl.CERT_REQUIRED
    dialing = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    dialing.load_cert_chain(client / "node.pem", client / "node.key")
    dialing.load_verify_locations(trust)
    return serving, dialing


def handshake(serving: ssl.SSLContext, dialing: ssl.SSLContext, host: str) -> str:
    """Both ends of one handshake over loopback: "ok", or each end's error."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    errors: list[str] = []

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with serving.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError) as exc:
            errors.append(f"server: {exc}")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            dialing.wrap_socket(raw, server_hostname=host) as tls,
        ):
            tls.sendall(b"x")
            tls.recv(1)  # (the server closes: a refused client certificate shows here)
    except (ssl.SSLError, OSError) as exc:
        errors.append(f"client: {exc}")
    finally:
        thread.join(5)
        listener.close()
    return "; ".join(sorted(errors)) or "ok"


def test_node_certificates_of_one_ca_handshake_both_ways(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make(capsys, a, tmp_path / "safe" / "ca.key", "127.0.0.1", "localhost")
    code, _, err = run(
        capsys, "create-node", "127.0.0.1", "--certs-dir", str(b), "--ca-key",
        str(tmp_path / "safe" / "ca.key"),
    )  # fmt: skip
    assert code == 1 and "ca.pem" in err  # (b has no CA certificate yet)
    b.mkdir(exist_ok=True)
    (b / "ca.pem").write_bytes((a / "ca.pem").read_bytes())
    assert run(capsys, "create-node", "127.0.0.1", "--certs-dir", str(b), "--ca-key",
               str(tmp_path / "safe" / "ca.key"))[0] == 0  # fmt: skip
    serving, dialing = contexts(a / "ca.pem", a, b)
    assert handshake(serving, dialing, "127.0.0.1") == "ok"
    assert handshake(serving, dialing, "localhost") == "ok"
    for key in (a / "node.key", tmp_path / "safe" / "ca.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_a_certificate_of_another_ca_or_for_another_host_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    make(capsys, ours, tmp_path / "ours.key", "127.0.0.1")
    make(capsys, theirs, tmp_path / "theirs.key", "127.0.0.1")
    serving, dialing = contexts(ours / "ca.pem", ours, theirs)  # a stranger dials us
    refused = handshake(serving, dialing, "127.0.0.1")
    assert "server: [SSL: CERTIFICATE_VERIFY_FAILED]" in refused  # (the server refuses it)
    serving, dialing = contexts(ours / "ca.pem", theirs, ours)  # a stranger serves us
    assert "client: [SSL: CERTIFICATE_VERIFY_FAILED]" in handshake(serving, dialing, "127.0.0.1")
    serving, dialing = contexts(ours / "ca.pem", ours, ours)
    mismatch = handshake(serving, dialing, "localhost")  # (made for 127.0.0.1 only)
    assert "client: [SSL: CERTIFICATE_VERIFY_FAILED]" in mismatch and "mismatch" in mismatch


def test_a_second_ca_is_added_beside_the_first_for_a_rotation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certs, old, new = tmp_path / "certs", tmp_path / "old" / "ca.key", tmp_path / "new" / "ca.key"
    make(capsys, certs, old, "127.0.0.1")
    (certs / "node.pem").rename(tmp_path / "old-node.pem")
    (certs / "node.key").rename(tmp_path / "old-node.key")
    code, out, _ = run(capsys, "create-ca", "--certs-dir", str(certs), "--ca-key", str(new))
    assert code == 0 and "both are trusted" in out
    assert (certs / "ca.pem").read_text().count("BEGIN CERTIFICATE") == 2
    assert run(capsys, "create-node", "127.0.0.1", "--certs-dir", str(certs), "--ca-key",
               str(new))[0] == 0  # fmt: skip
    old_node = tmp_path / "old-node"
    old_node.mkdir()
    (tmp_path / "old-node.pem").rename(old_node / "node.pem")
    (tmp_path / "old-node.key").rename(old_node / "node.key")
    serving, dialing = contexts(certs / "ca.pem", certs, old_node)  # new serves, old dials
    assert handshake(serving, dialing, "127.0.0.1") == "ok"
    serving, dialing = contexts(certs / "ca.pem", old_node, certs)
    assert handshake(serving, dialing, "127.0.0.1") == "ok"
    code, out, _ = run(capsys, "list", "--certs-dir", str(certs))
    assert code == 0
    assert out.count("ca.pem: CA") == 2 and "node.pem: certificate" in out
    assert "for 127.0.0.1" in out and "expires" in out


def test_nothing_is_overwritten_unasked_and_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certs, key = tmp_path / "certs", tmp_path / "ca.key"
    make(capsys, certs, key, "127.0.0.1")
    before = key.read_bytes(), (certs / "node.pem").read_bytes()
    argv: tuple[str, ...]
    for argv in (
        ("create-ca", "--certs-dir", str(certs), "--ca-key", str(key)),
        ("create-node", "127.0.0.1", "--certs-dir", str(certs), "--ca-key", str(key)),
    ):
        code, _, err = run(capsys, *argv)
        assert code == 1 and "exists already" in err and err.count("\n") == 1
    assert (key.read_bytes(), (certs / "node.pem").read_bytes()) == before
    assert run(capsys, "create-node", "127.0.0.1", "--certs-dir", str(certs), "--ca-key",
               str(key), "--overwrite")[0] == 0  # fmt: skip
    assert (certs / "node.pem").read_bytes() != before[1]
    bad: list[tuple[tuple[str, ...], str]] = [
        (("create-node", "a b", "--certs-dir", str(certs), "--ca-key", str(key), "--overwrite"),
         "neither an IP address nor a host name"),
        (("create-node", "h", "--certs-dir", str(certs), "--ca-key", str(certs / "node.key"),
          "--overwrite"), "belongs to the key"),
        (("create-client", "../x", "--certs-dir", str(certs), "--ca-key", str(key)),
         "letters, digits"),
        (("create-ca", "--certs-dir", str(certs), "--ca-key", str(key), "--days", "0"),
         "must be at least 1"),
    ]  # fmt: skip
    for argv, says in bad:
        code, _, err = run(capsys, *argv)
        assert code in (1, 2) and says in err and err.count("\n") == 1, err


def test_the_nsqpy_command_runs_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = nsqpy(["cert", "create-ca", "--certs-dir", str(tmp_path), "--ca-key",
                  str(tmp_path / "ca.key")])  # fmt: skip
    assert code == 0
    assert (tmp_path / "ca.pem").exists()
    assert "wrote" in capsys.readouterr().out
