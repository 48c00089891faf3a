"""The utilities' TLS, compression and AUTH options (go-nsq's --producer-opt/--consumer-opt
keys) against a real nsqd that accepts TCP clients only over TLS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.testing import DaemonProcess, nsqd_process
from nsqpy.testing.certs import CertFiles

from .helpers import assert_clean_error, run_tool, stats, unique


@pytest.fixture(scope="module")
def tls_nsqd(tmp_path_factory: pytest.TempPathFactory, certs: CertFiles) -> Iterator[DaemonProcess]:
    flags = (
        f"--tls-cert={certs.server_cert}",
        f"--tls-key={certs.server_key}",
        "--tls-required=tcp-https",  # plain TCP clients are refused; plain HTTP still served
    )
    with nsqd_process(tmp_path_factory.mktemp("tls_nsqd") / "data", *flags) as daemon:
        yield daemon


def test_to_nsq_and_nsq_tail_over_tls_with_compression(
    tls_nsqd: DaemonProcess, certs: CertFiles, tmp_path: Path
) -> None:
    topic = unique("tlstools")
    address = f"--nsqd-tcp-address=127.0.0.1:{tls_nsqd.tcp_port}"
    ca = f"tls_root_ca_file,{certs.ca}"
    result = run_tool(
        "to_nsq",
        [f"--topic={topic}", address, "--producer-opt=tls_v1", f"--producer-opt={ca}",
         "--producer-opt=snappy"],
        stdin=b"one\ntwo\nthree\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    entry = stats(tls_nsqd, topic)
    assert entry is not None and entry["message_count"] == 3
    result = run_tool(
        "nsq_tail",
        [f"--topic={topic}", address, "--consumer-opt=tls_v1", f"--consumer-opt={ca}",
         "--consumer-opt=deflate", "--consumer-opt=deflate_level,9", "-n", "3"],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [b"one", b"three", b"two"]


def test_without_tls_the_tool_reports_nsqd_s_refusal(tls_nsqd: DaemonProcess) -> None:
    result = run_tool(
        "to_nsq", ["--topic=t", f"--nsqd-tcp-address=127.0.0.1:{tls_nsqd.tcp_port}"], stdin=b"x\n"
    )
    line = assert_clean_error(result, 1)
    assert "TLS required" in line


def test_untrusted_server_certificate_is_a_clear_error(tls_nsqd: DaemonProcess) -> None:
    result = run_tool(
        "to_nsq",
        ["--topic=t", f"--nsqd-tcp-address=127.0.0.1:{tls_nsqd.tcp_port}",
         "--producer-opt=tls_v1"],
        stdin=b"x\n",
    )  # fmt: skip
    line = assert_clean_error(result, 1)
    assert "CERTIFICATE_VERIFY_FAILED" in line or "certificate verify failed" in line
