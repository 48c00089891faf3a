"""The ``nsq`` source and sink over HTTPS, against nsqd with ``--tls-required=true`` (its
plain HTTP port answers every request 403 ``TLS_REQUIRED``) and, in another, a client
certificate required (``--tls-client-auth-policy=require-verify``): the ``nsq.ssl.*``
options (after the Kafka source's ``kafka.ssl.*``) read and write through nsqd's HTTPS
port, found from its HTTP address, also through nsqlookupd; without them the error says
what is missing."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsqpy.errors import ConfigError
from nsqpy.spark.options import source_options
from nsqpy.testing import DaemonProcess, http_get, http_request, lookupd_process, wait_for
from nsqpy.testing.certs import CertFiles, make_certs

from .conftest import start_nsqd


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, certs: CertFiles
) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    """nsqlookupd, and an nsqd registered with it that serves HTTP only over TLS."""
    lookupd = lookupd_process().start()
    try:
        daemon = start_nsqd(
            tmp_path_factory.mktemp("tls-nsqd"),
            f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}",
            f"--tls-cert={certs.server_cert}",
            f"--tls-key={certs.server_key}",
            "--tls-required=true",
        )
        yield lookupd, daemon
        daemon.kill()
    finally:
        lookupd.kill()


def https_publish(daemon: DaemonProcess, certs: CertFiles, topic: str, bodies: list[bytes]) -> None:
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=certs.ca)
    payload = struct.pack(">i", len(bodies)) + b"".join(
        struct.pack(">i", len(b)) + b for b in bodies
    )
    url = f"https://127.0.0.1:{daemon.ports['HTTPS']}/mpub?topic={topic}&binary=true"
    with urllib.request.urlopen(urllib.request.Request(url, payload), context=context) as answer:
        assert answer.read() == b"OK"


def test_the_source_and_sink_read_and_write_over_https(
    spark: Any, stack: tuple[DaemonProcess, DaemonProcess], certs: CertFiles
) -> None:
    lookupd, daemon = stack
    status, body, _ = http_request("POST", f"{daemon.http}/pub?topic=secret", b"x")
    assert (status, b"TLS_REQUIRED" in body) == (403, True), "plain HTTP is refused"
    https_publish(daemon, certs, "secret", [b"one", b"two", b"three"])
    ssl_options = {"nsq.ssl.cafile": certs.ca}
    plain = f"127.0.0.1:{daemon.http_port}"  # (its HTTP address, as nsqlookupd names it)
    rows = (
        spark.read.format("nsq").option("nsqd", plain).option("topic", "secret")
        .options(**ssl_options).load().orderBy("offset").collect()
    )  # fmt: skip
    assert [bytes(r.body) for r in rows] == [b"one", b"two", b"three"]
    wait_for(lambda: http_get(f"{lookupd.http}/lookup?topic=secret")[0] == 200)
    found = (
        spark.read.format("nsq").option("lookupd", lookupd.http).option("topic", "secret")
        .options(**ssl_options).load()
    )  # fmt: skip
    found.select("body").write.format("nsq").option("lookupd", lookupd.http).option(
        "topic", "copied"
    ).options(**ssl_options).mode("append").save()
    copied = (
        spark.read.format("nsq").option("nsqd", f"https://127.0.0.1:{daemon.ports['HTTPS']}")
        .option("topic", "copied").options(**ssl_options).load().collect()
    )  # fmt: skip
    assert sorted(bytes(r.body) for r in copied) == [b"one", b"three", b"two"]


def test_the_replay_pipeline_publishes_over_https_with_its_ssl_flags(
    spark: Any,
    stack: tuple[DaemonProcess, DaemonProcess],
    certs: CertFiles,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``nsqpy pipeline replay --ssl-cafile``: an archive's rows published to an nsqd that
    takes HTTPS only; without the flag, one line saying what is missing, nothing sent."""
    from nsqpy.spark.cli import main

    _lookupd, daemon = stack
    archive = tmp_path / "archive"
    spark.createDataFrame([(b"r1", 0), (b"r2", 1)], "body binary, offset long").write.parquet(
        str(archive)
    )
    plain = f"127.0.0.1:{daemon.http_port}"
    argv = ["replay", "--input", str(archive), "--topic", "replayed_tls", "--nsqd", plain]
    assert main(argv) == 1
    error = capsys.readouterr().err
    last = error.strip().splitlines()[-1]  # (after the line announcing Spark)
    assert "403 TLS_REQUIRED (nsqd requires HTTPS: give the" in last, error
    assert "Traceback" not in error
    assert main([*argv, "--ssl-cafile", certs.ca]) == 0
    rows = (
        spark.read.format("nsq").option("nsqd", plain).option("topic", "replayed_tls")
        .option("nsq.ssl.cafile", certs.ca).load().orderBy("offset").collect()
    )  # fmt: skip
    assert [bytes(r.body) for r in rows] == [b"r1", b"r2"]


def test_without_the_ssl_options_the_error_says_nsqd_requires_https(
    spark: Any, stack: tuple[DaemonProcess, DaemonProcess]
) -> None:
    _lookupd, daemon = stack
    reader = spark.read.format("nsq").option("nsqd", f"127.0.0.1:{daemon.http_port}")
    with pytest.raises(Exception, match=r"403 TLS_REQUIRED \(nsqd requires HTTPS: give the"):
        reader.option("topic", "secret").load().collect()


def test_a_certificate_of_another_ca_is_refused(
    spark: Any, stack: tuple[DaemonProcess, DaemonProcess], tmp_path: Path
) -> None:
    _lookupd, daemon = stack
    stranger = make_certs(tmp_path / "stranger")
    reader = spark.read.format("nsq").option("nsqd", f"127.0.0.1:{daemon.http_port}")
    with pytest.raises(Exception, match="SSLCertVerificationError"):
        reader.option("topic", "secret").option("nsq.ssl.cafile", stranger.ca).load().collect()


def test_a_client_certificate_reaches_nsqd_that_requires_one(
    spark: Any, certs: CertFiles, tmp_path: Path
) -> None:
    flags = (f"--tls-cert={certs.server_cert}", f"--tls-key={certs.server_key}",
             f"--tls-root-ca-file={certs.ca}", "--tls-client-auth-policy=require-verify",
             "--tls-required=true")  # fmt: skip
    daemon = start_nsqd(tmp_path / "data", *flags)
    try:
        reader = spark.read.format("nsq").option("nsqd", f"127.0.0.1:{daemon.http_port}")
        options = {"topic": "mine", "nsq.ssl.cafile": certs.ca}
        with pytest.raises(
            Exception, match=r"0 TLS_CLOSED \(nsqd closed the TLS connection unanswered"
        ):
            reader.options(**options).load().collect()
        spark.createDataFrame([("hello",)], ["body"]).write.format("nsq").option(
            "nsqd", f"127.0.0.1:{daemon.http_port}"
        ).options(**options, **{"nsq.ssl.certfile": certs.client_cert,
                                "nsq.ssl.keyfile": certs.client_key}).mode("append").save()  # fmt: skip
        rows = reader.options(**options, **{"nsq.ssl.certfile": certs.client_cert,
                                            "nsq.ssl.keyfile": certs.client_key}).load().collect()  # fmt: skip
        assert [bytes(r.body) for r in rows] == [b"hello"]
    finally:
        daemon.kill()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"nsq.ssl.cafile": "/nonexistent/ca.pem"},
            "nsq.ssl.cafile='/nonexistent/ca.pem' is not a",
        ),
        ({"nsq.ssl.enabled": "maybe"}, "nsq.ssl.enabled='maybe' is not a boolean"),
        ({"nsq.ssl.keyfile": __file__}, "nsq.ssl.keyfile needs nsq.ssl.certfile"),
    ],
)
def test_bad_ssl_options_are_refused_before_any_connection(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        source_options({"topic": "t", "nsqd": "127.0.0.1:1", **options}, streaming=False)
