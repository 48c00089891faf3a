"""etcd over TLS and with a user, against real etcd members (``EtcdCluster(tls=...)``):

- a client certificate signed by etcd's CA is served (keys, a kept-alive lease, a watch);
  none, one of another CA, or etcd's certificate of another CA: one ``ConfigError`` line
  within the deadline;
- the user (a role on ``/nsqpy/<cluster-id>/`` only) reads and writes there and is refused
  elsewhere; a wrong password is one ``ConfigError`` line without the password;
- etcd forgets a token unused for ``--auth-token-ttl`` (1 s here): a call, a lease and a
  watch idle for several of those get a new token and go on (without the renewal each
  fails: ``invalid auth token``);
- an nsqd and an nsqlookupd (real processes) run a topic on such an etcd as that user, the
  password nowhere in their logs or in nsqd's ``/config``;
- a bad combination of ``--etcd-*`` flags is one line and status 1 from ``nsqpy nsqd``; the
  password comes from the flag, else the file, else the environment, and is in no repr.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from nsqpy.cluster.coordinator import Coordinator, CoordinatorSettings
from nsqpy.cluster.etcd import Etcd, EtcdError
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import LookupdInfo
from nsqpy.cluster.view import ClusterView
from nsqpy.errors import ConfigError
from nsqpy.flags import config_options
from nsqpy.flags.cluster import ETCD_PASSWORD_ENV, ClusterSecurityOptions, EtcdSecurity
from nsqpy.nsqd.app import parse_args
from nsqpy.options import NsqdOptions
from nsqpy.testing import eventually
from nsqpy.testing.certs import CertFiles, make_certs
from nsqpy.testing.cluster import LocalCluster
from nsqpy.testing.etcd import EtcdCluster
from nsqpy.testing.http import http_request
from nsqpy.testing.wire import consume

TOKEN_TTL = 1  # seconds: etcd's --auth-token-ttl
IDLE = 4.0 * TOKEN_TTL  # long enough for etcd to forget an unused token (checked every 1 s)
USER, PASSWORD = "nsq-unit", "pw-unit-Zq8x"
DAEMON_USER, DAEMON_PASSWORD = "nsq-daemon", "pw-daemon-Kv3w"
UNIT = Keys("secure-unit")  # the unit tests' keys (USER's role)
DAEMONS = "secure-daemons"  # the daemons' cluster id (DAEMON_USER's role)
COMPACTING = Keys("secure-compact")  # a coordinator's keys (COMPACT_USER's role)
COMPACT_USER, COMPACT_PASSWORD = "nsq-compact", "pw-compact-Hb2r"
REFUSED = 2.0  # seconds: the deadline of the connections that are to be refused


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> CertFiles:
    """Certificates of another CA."""
    return make_certs(tmp_path_factory.mktemp("stranger-certs"))


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory, certs: CertFiles) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(1, tmp_path_factory.mktemp("etcd-tls"), tls=certs)
    try:
        yield cluster.start()
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def auth_etcd(tmp_path_factory: pytest.TempPathFactory, certs: CertFiles) -> Iterator[EtcdCluster]:
    """TLS, auth on, tokens of TOKEN_TTL; USER and DAEMON_USER, each on one cluster's keys."""
    cluster = EtcdCluster(
        1, tmp_path_factory.mktemp("etcd-auth"), tls=certs, auth_token_ttl=TOKEN_TTL
    )
    try:
        cluster.start()
        cluster.add_user(USER, PASSWORD, UNIT.root)
        cluster.add_user(DAEMON_USER, DAEMON_PASSWORD, Keys(DAEMONS).root)
        cluster.add_user(COMPACT_USER, COMPACT_PASSWORD, COMPACTING.root)
        cluster.enable_auth("root-pw")
        yield cluster
    finally:
        cluster.close()


def security(
    trust: CertFiles, client: CertFiles | None = None, user: str = "", password: str = ""
) -> EtcdSecurity:
    """etcd's CA from ``trust``, the client certificate of ``client`` (None: none)."""
    return EtcdSecurity(
        cacert=Path(trust.ca).read_bytes(),
        cert=Path(client.client_cert).read_bytes() if client else None,
        key=Path(client.client_key).read_bytes() if client else None,
        username=user,
        password=password,
    )


@contextlib.asynccontextmanager
async def connected(etcd: EtcdCluster, certs: CertFiles) -> AsyncIterator[Etcd]:
    """An ``Etcd`` of USER on ``etcd``, closed after (bounded)."""
    client = await Etcd.connect(etcd.endpoints, security=security(certs, certs, USER, PASSWORD))
    try:
        yield client
    finally:
        await asyncio.wait_for(asyncio.ensure_future(client.close()), 10)


@contextlib.asynccontextmanager
async def watching(
    etcd: Etcd, prefix: str, start_revision: int | None = None
) -> AsyncIterator[asyncio.Queue[list[str]]]:
    """The keys of each batch ``etcd.watch_prefix`` yields, in a queue, while in the block."""
    batches: asyncio.Queue[list[str]] = asyncio.Queue()

    async def follow() -> None:
        async for batch in etcd.watch_prefix(prefix, start_revision):
            batches.put_nowait([event.kv.key for event in batch])

    task = asyncio.create_task(follow())
    try:
        yield batches
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def next_keys(batches: asyncio.Queue[list[str]], timeout: float = 10.0) -> list[str]:
    async with asyncio.timeout(timeout):
        return await batches.get()


# -- TLS ---------------------------------------------------------------------------------


async def test_a_client_certificate_of_etcds_ca_gets_keys_a_kept_lease_and_a_watch(
    tls_etcd: EtcdCluster, certs: CertFiles
) -> None:
    prefix = "/nsqpy/tls/"
    # the same member twice: gRPC's multi-address target, checked against the first
    # endpoint's host (it has no name of its own)
    endpoints = [*tls_etcd.endpoints, f"localhost:{tls_etcd.client_ports[0]}"]
    etcd = await Etcd.connect(endpoints, security=security(certs, certs))
    try:
        revision = await etcd.put(prefix + "a", b"1")
        kv = await etcd.get(prefix + "a")
        assert kv is not None and kv.value == b"1"
        async with watching(etcd, prefix, revision) as batches:
            assert await next_keys(batches) == [prefix + "a"]
            lease = await etcd.lease(1)
            await etcd.put(prefix + "leased", b"2", lease)
            assert await next_keys(batches) == [prefix + "leased"]
            await asyncio.sleep(3 * lease.ttl)  # the time passing is what is tested
            assert not lease.lost.is_set()
            kv = await etcd.get(prefix + "leased")
            assert kv is not None and kv.lease == lease.id
    finally:
        await etcd.close()


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("no client certificate", "refused this client's certificate"),
        ("a client certificate of another CA", "refused this client's certificate"),
        ("etcd's certificate of another CA", "not signed by --etcd-cacert"),
    ],
)
async def test_a_tls_handshake_etcd_or_we_refuse_is_one_config_error_within_the_deadline(
    tls_etcd: EtcdCluster, certs: CertFiles, stranger: CertFiles, case: str, expected: str
) -> None:
    given = {
        "no client certificate": security(certs),
        "a client certificate of another CA": security(certs, stranger),
        "etcd's certificate of another CA": security(stranger, certs),
    }[case]
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ConfigError, match=expected) as refused:
        await Etcd.connect(tls_etcd.endpoints, timeout=REFUSED, security=given)
    assert loop.time() - started < REFUSED + 2.0
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith(f"--etcd-endpoints {tls_etcd.endpoints[0]}: ")


async def test_a_user_for_an_etcd_without_auth_is_unused_with_a_warning(
    tls_etcd: EtcdCluster, certs: CertFiles, caplog: pytest.LogCaptureFixture
) -> None:
    etcd = await Etcd.connect(tls_etcd.endpoints, security=security(certs, certs, USER, PASSWORD))
    try:
        await etcd.put("/nsqpy/tls/user", b"1")  # (as Go's clientv3: no token, no error)
    finally:
        await etcd.close()
    assert f"etcd: auth is not enabled; --etcd-username {USER} unused" in caplog.messages


# -- a user --------------------------------------------------------------------------------


async def test_the_user_reads_and_writes_its_clusters_keys_and_nothing_else(
    auth_etcd: EtcdCluster, certs: CertFiles
) -> None:
    async with connected(auth_etcd, certs) as etcd:
        await etcd.put(UNIT.root + "mine", b"1")
        kv = await etcd.get(UNIT.root + "mine")
        assert kv is not None and kv.value == b"1"
        assert [kv.key for kv in (await etcd.get_prefix(UNIT.root))[0]] == [UNIT.root + "mine"]
        for outside in ("/", "/nsqpy/other/x", "/nsqpy/secure-unitx", Keys(DAEMONS).root + "x"):
            with pytest.raises(EtcdError, match=f"get {outside}: .*permission denied"):
                await etcd.get(outside)
            with pytest.raises(EtcdError, match="permission denied"):
                await etcd.put(outside, b"no")


async def test_a_coordinator_running_as_a_user_compacts_etcd(
    auth_etcd: EtcdCluster, certs: CertFiles, caplog: pytest.LogCaptureFixture
) -> None:
    """A coordinator running as a user whose role covers only its cluster's keys compacts
    etcd's history all the same (etcd 3.4 asks no permission to compact), warning nothing."""
    etcd = await Etcd.connect(
        auth_etcd.endpoints, security=security(certs, certs, COMPACT_USER, COMPACT_PASSWORD)
    )
    view = ClusterView(etcd, COMPACTING)
    await view.start()
    settings = CoordinatorSettings(lease_ttl_s=2, tick_s=0.05, compact_interval_ns=200_000_000)
    me = LookupdInfo("l0", "127.0.0.1", 4160, 4161)
    coordinator = Coordinator(etcd, view, me, "127.0.0.1:4161", settings)
    caplog.set_level(logging.WARNING, "nsqpy.cluster")
    await coordinator.start()
    try:
        await eventually(lambda: coordinator.leading, timeout=5)
        for n in range(5):
            await etcd.put(COMPACTING.root + "churn", b"%d" % n)
        written = (await etcd.get_prefix(COMPACTING.root))[1]
        await eventually(lambda: coordinator.compacted >= written, timeout=5)
        assert "compacting etcd failed" not in caplog.text
    finally:
        await asyncio.wait_for(asyncio.ensure_future(coordinator.stop()), 10)
        await asyncio.wait_for(asyncio.ensure_future(view.stop()), 10)
        await asyncio.wait_for(asyncio.ensure_future(etcd.close()), 10)


@pytest.mark.parametrize(("user", "password"), [(USER, "not-the-password"), ("nobody", PASSWORD)])
async def test_credentials_etcd_refuses_are_one_config_error(
    auth_etcd: EtcdCluster, certs: CertFiles, user: str, password: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        await Etcd.connect(auth_etcd.endpoints, security=security(certs, certs, user, password))
    text = str(refused.value)
    assert text == (
        f"--etcd-username {user}: etcd refused the credentials: "
        "etcdserver: authentication failed, invalid user ID or password"
    )
    assert password not in text


async def test_a_call_after_the_token_expired_gets_a_new_token(
    auth_etcd: EtcdCluster, certs: CertFiles
) -> None:
    key = UNIT.root + "call"
    async with connected(auth_etcd, certs) as etcd:
        await etcd.put(key, b"before")
        await asyncio.sleep(IDLE)  # unused, the token expires: what is tested
        kv = await etcd.get(key)
        assert kv is not None and kv.value == b"before"
        await asyncio.sleep(IDLE)
        assert await etcd.replace(key, b"after", kv.mod_revision)  # (a txn: not retried)


async def test_a_lease_kept_alive_past_its_token_still_binds_keys_and_is_revoked(
    auth_etcd: EtcdCluster, certs: CertFiles
) -> None:
    key = UNIT.root + "leased"
    async with connected(auth_etcd, certs) as etcd:
        lease = await etcd.lease(1)
        await asyncio.sleep(IDLE)  # keep-alives only (etcd 3.4 takes them without a token)
        assert not lease.lost.is_set()
        await etcd.put(key, b"bound", lease)
        kv = await etcd.get(key)
        assert kv is not None and kv.lease == lease.id
        await lease.revoke()
        assert await etcd.get(key) is None


async def test_a_watch_outlives_its_token_and_a_restart_of_etcd(
    auth_etcd: EtcdCluster, certs: CertFiles
) -> None:
    prefix = UNIT.root + "watched/"
    async with connected(auth_etcd, certs) as etcd, connected(auth_etcd, certs) as writer:
        revision = await writer.put(prefix + "1", b"1")
        async with watching(etcd, prefix, revision) as batches:
            assert await next_keys(batches) == [prefix + "1"]
            await asyncio.sleep(IDLE)  # the watching client's token expires
            revision = await writer.put(prefix + "2", b"2")
            assert await next_keys(batches) == [prefix + "2"]  # (the same stream)
            # a watch opened with the expired token: refused, a new token, watched
            async with watching(etcd, prefix, revision + 1) as later:
                await writer.put(prefix + "3", b"3")
                assert await next_keys(later) == [prefix + "3"]
            assert await next_keys(batches) == [prefix + "3"]
            # the member restarts: the stream is lost, and etcd forgot every token
            await asyncio.to_thread(auth_etcd.restart, 0)
            await asyncio.to_thread(auth_etcd.wait_healthy)
            await writer.put(prefix + "4", b"4")
            assert await next_keys(batches, 15.0) == [prefix + "4"]


# -- the daemons -----------------------------------------------------------------------------


def test_nsqd_and_nsqlookupd_run_a_topic_on_a_tls_etcd_as_a_user_never_showing_its_password(
    tmp_path: Path, auth_etcd: EtcdCluster, certs: CertFiles
) -> None:
    password_file = tmp_path / "etcd-password"
    password_file.write_text(DAEMON_PASSWORD + "\n")
    flags = [
        f"--etcd-cacert={certs.ca}",
        f"--etcd-cert={certs.client_cert}",
        f"--etcd-key={certs.client_key}",
        f"--etcd-username={DAEMON_USER}",
        "--log-level=debug",
    ]
    cluster = LocalCluster(
        tmp_path / "cluster",
        nodes=1,
        lookupds=1,
        cluster_id=DAEMONS,
        etcd=auth_etcd,
        nsqd_flags=[*flags, f"--etcd-password-file={password_file}"],
        lookupd_flags=flags,
        lookupd_env={ETCD_PASSWORD_ENV: DAEMON_PASSWORD},
    )
    with cluster:
        nsqd = cluster.nsqd_http(0)
        for topic in ("sealed", "later"):
            if topic == "later":
                time.sleep(IDLE)  # several token lifetimes: the daemons go on
            status, body = cluster.post(f"/topic/create?topic={topic}&partition_num=1&replicator=1")
            assert status == 200, body
            cluster.wait_for(
                lambda: http_request("POST", f"http://{nsqd}/pub?topic={topic}", b"hi")[0] == 200,  # noqa: B023
                15,
                f"nsqd leads topic {topic}",
            )
            assert consume(cluster.nodes[0].ports["TCP"], topic, "c", 1) == [b"hi"]
        every = [*config_options(NsqdOptions), "etcd_password", "etcd-password"]
        shown = {key: http_request("GET", f"http://{nsqd}/config/{key}") for key in every}
        logs = cluster.nodes[0].log_lines + cluster.lookupds[0].log_lines
    assert any("etcd" in line for line in logs)  # (the daemons did log, at debug level)
    assert [key for key, (status, _, _) in shown.items() if status != 200] == [
        "etcd_password",
        "etcd-password",
    ]  # (not an option of /config: 400, INVALID_OPTION)
    assert DAEMON_PASSWORD.encode() not in b"".join(body for _, body, _ in shown.values())
    assert not [line for line in logs if DAEMON_PASSWORD in line]


# -- flags -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "env", "error"),
    [
        (["--etcd-cert=c.pem"], {}, "--etcd-cert given without --etcd-key"),
        (["--etcd-key=c.key"], {}, "--etcd-key given without --etcd-cert"),
        (["--etcd-username=u"], {}, "--etcd-username u given without a password"),
        ([f"--etcd-password={PASSWORD}"], {}, "--etcd-password given without --etcd-username"),
        ([], {ETCD_PASSWORD_ENV: PASSWORD}, f"${ETCD_PASSWORD_ENV} given without --etcd-username"),
        (["--etcd-cacert=missing.pem"], {}, "--etcd-cacert missing.pem: cannot read it"),
        (
            ["--etcd-username=u", "--etcd-password-file=missing"],
            {},
            "--etcd-password-file missing: cannot read it",
        ),
        (["--etcd-cacert=c.key"], {}, "--etcd-cacert c.key holds no PEM certificate"),
    ],
)
def test_a_bad_combination_of_etcd_flags_is_one_line_and_status_1(
    tmp_path: Path, flags: list[str], env: dict[str, str], error: str
) -> None:
    (tmp_path / "c.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "c.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("nsqpy")),
            "nsqd",
            "--etcd-endpoints=127.0.0.1:1",  # (never dialled: the flags are read first)
            "--cluster-id=flags",
            f"--data-path={tmp_path / 'data'}",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            "--rpc-address=127.0.0.1:0",
            *flags,
        ],
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, **env},
    )
    stderr = proc.stderr.decode()
    assert proc.returncode == 1, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("nsqd: error:")]
    assert len(errors) == 1 and error in errors[0], stderr
    assert "Traceback" not in stderr and PASSWORD not in stderr


def test_the_password_comes_from_the_flag_else_the_file_else_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ETCD_PASSWORD_ENV, "from-env")
    (tmp_path / "pw").write_bytes(b"from-file\r\n")
    (tmp_path / "spaced").write_bytes(b" from file \n\n")

    def password(**flags: str) -> str:
        return ClusterSecurityOptions(etcd_username="u", **flags).etcd_security().password

    assert password(etcd_password="from-flag", etcd_password_file=str(tmp_path / "pw")) == (
        "from-flag"
    )
    assert password(etcd_password_file=str(tmp_path / "pw")) == "from-file"
    assert password(etcd_password_file=str(tmp_path / "spaced")) == " from file \n"
    assert password() == "from-env"


def test_the_password_is_in_no_repr_of_the_options() -> None:
    opts = parse_args([f"--etcd-password={PASSWORD}", "--etcd-username=u"])
    assert opts.etcd_security().password == PASSWORD
    assert PASSWORD not in repr(opts)
    assert PASSWORD not in repr(opts.etcd_security())
