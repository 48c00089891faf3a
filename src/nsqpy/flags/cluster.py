"""The security flags nsqd and nsqlookupd share in cluster mode: ``ClusterSecurityOptions``,
a dataclass both daemons' options extend (nsqadmin's extend ``ClusterTlsOptions``, its
first three).

- ``--cluster-tls-root-ca-file``, ``--cluster-tls-cert``, ``--cluster-tls-key`` (NSQ's
  naming of its TLS flags): mutual TLS on every link between the cluster's daemons, each
  end showing a certificate chained to that CA (``nsqpy cert`` makes them). All three or
  none.
- ``--etcd-cacert``, ``--etcd-cert``, ``--etcd-key``, ``--etcd-username``,
  ``--etcd-password`` (etcdctl's names) and ``--etcd-password-file``: etcd over TLS, and
  with a user. The password may also come from the environment (``NSQPY_ETCD_PASSWORD``);
  it is never shown in ``/config`` or logged. ``etcd_security(opts)`` reads them into what
  ``nsqpy.cluster.etcd.Etcd.connect`` takes (``EtcdSecurity``: PEM bytes and a user), or
  raises a one-line ``ConfigError`` naming the flag.

``require_cluster_extra()`` refuses cluster mode, with one line naming the extra to
install, when the etcd client it needs (nsqpy's ``cluster`` extra) is not installed.

Imports only the standard library, ``nsqpy.errors`` and the flags package.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import Field, dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from nsqpy.errors import ConfigError
from nsqpy.flags.declare import option

T = TypeVar("T")

ETCD_PASSWORD_ENV = "NSQPY_ETCD_PASSWORD"


def _unshown(declared: T) -> T:
    """The option field ``declared``, left out of its dataclass's repr (a password)."""
    cast("Field[Any]", declared).repr = False
    return declared


@dataclass
class ClusterTlsOptions:
    """The ``--cluster-tls-*`` flags (nsqd, nsqlookupd, and nsqadmin, which calls them)."""

    cluster_tls_root_ca_file: str = option(
        "cluster-tls-root-ca-file",
        "",
        "nsqpy: CA of the cluster's daemons: every link between them is mutual TLS "
        "(with --cluster-tls-cert and --cluster-tls-key; nsqpy cert makes them)",
        api=False,
    )
    cluster_tls_cert: str = option(
        "cluster-tls-cert",
        "",
        "nsqpy: this daemon's certificate on the cluster's links (serves and dials)",
        api=False,
    )
    cluster_tls_key: str = option(
        "cluster-tls-key", "", "nsqpy: the key of --cluster-tls-cert", api=False
    )


@dataclass
class ClusterSecurityOptions(ClusterTlsOptions):
    etcd_cacert: str = option(
        "etcd-cacert", "", "nsqpy: CA that signed etcd's certificates (etcd over TLS)", api=False
    )
    etcd_cert: str = option(
        "etcd-cert", "", "nsqpy: client certificate shown to etcd (--client-cert-auth)", api=False
    )
    etcd_key: str = option("etcd-key", "", "nsqpy: the key of --etcd-cert", api=False)
    etcd_username: str = option(
        "etcd-username", "", "nsqpy: etcd user (etcd with auth enabled)", api=False
    )
    etcd_password: str = _unshown(
        option(
            "etcd-password",
            "",
            "nsqpy: that user's password (seen by anyone who lists processes: prefer "
            f"--etcd-password-file or ${ETCD_PASSWORD_ENV}); never shown in /config or logs",
            api=False,
        )
    )
    etcd_password_file: str = option(
        "etcd-password-file",
        "",
        "nsqpy: a file holding the etcd user's password (its trailing newline is dropped); "
        "read when --etcd-password is empty",
        api=False,
    )

    def etcd_security(self) -> EtcdSecurity:
        """What ``Etcd.connect`` needs of the ``--etcd-*`` flags (``etcd_security``)."""
        return etcd_security(self)


def cluster_tls_check(opts: Any) -> str | None:
    """What is wrong with the ``--cluster-tls-*`` flags of ``opts`` (all three or none), or
    None."""
    given = {
        "--cluster-tls-root-ca-file": opts.cluster_tls_root_ca_file,
        "--cluster-tls-cert": opts.cluster_tls_cert,
        "--cluster-tls-key": opts.cluster_tls_key,
    }
    missing = [name for name, value in given.items() if not value]
    if 0 < len(missing) < len(given):
        return f"{', '.join(missing)} missing: mutual TLS between the daemons needs all three"
    return None


def cluster_tls_on(opts: Any) -> bool:
    return bool(opts.cluster_tls_root_ca_file)


@dataclass(frozen=True)
class EtcdSecurity:
    """The ``--etcd-*`` flags read: PEM bytes for TLS, and a user. TLS is on when a CA or a
    client certificate is given (without a CA, the system's roots check etcd)."""

    cacert: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = field(default=None, repr=False)
    username: str = ""
    password: str = field(default="", repr=False)

    @property
    def tls(self) -> bool:
        return self.cacert is not None or self.cert is not None


def etcd_security(opts: Any) -> EtcdSecurity:
    """The ``--etcd-*`` flags of ``opts`` read (files loaded, the password found), or a
    one-line ConfigError naming the flag. The password comes from ``--etcd-password``, else
    ``--etcd-password-file`` (without its trailing newline), else ``$NSQPY_ETCD_PASSWORD``;
    no message ever holds it."""
    if bool(opts.etcd_cert) != bool(opts.etcd_key):
        given, missing = (
            ("--etcd-cert", "--etcd-key") if opts.etcd_cert else ("--etcd-key", "--etcd-cert")
        )
        raise ConfigError(f"{given} given without {missing}: a client certificate needs both")
    password, source = _password(opts)
    if opts.etcd_username and not password:
        raise ConfigError(
            f"--etcd-username {opts.etcd_username} given without a password (--etcd-password, "
            f"--etcd-password-file or ${ETCD_PASSWORD_ENV})"
        )
    if password and not opts.etcd_username:
        raise ConfigError(f"{source} given without --etcd-username")
    return EtcdSecurity(
        cacert=_pem("--etcd-cacert", opts.etcd_cacert, b"CERTIFICATE-----"),
        cert=_pem("--etcd-cert", opts.etcd_cert, b"CERTIFICATE-----"),
        key=_pem("--etcd-key", opts.etcd_key, b"PRIVATE KEY-----"),
        username=opts.etcd_username,
        password=password,
    )


def _password(opts: Any) -> tuple[str, str]:
    """The password and where it came from (a flag or the environment variable)."""
    if opts.etcd_password:
        return opts.etcd_password, "--etcd-password"
    if opts.etcd_password_file:
        text = _read("--etcd-password-file", opts.etcd_password_file).decode(errors="replace")
        text = text.removesuffix("\n").removesuffix("\r")
        if not text:
            raise ConfigError(f"--etcd-password-file {opts.etcd_password_file} is empty")
        return text, "--etcd-password-file"
    return os.environ.get(ETCD_PASSWORD_ENV, ""), f"${ETCD_PASSWORD_ENV}"


def _pem(flag: str, path: str, marker: bytes) -> bytes | None:
    """The PEM file ``path`` of ``flag`` (None when not given)."""
    if not path:
        return None
    data = _read(flag, path)
    if marker not in data:
        raise ConfigError(f"{flag} {path} holds no PEM {marker.decode().rstrip('-').lower()}")
    return data


def _read(flag: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from None


CLUSTER_EXTRA = ("aetcd", "grpc", "google.protobuf")  # what ``nsqpy[cluster]`` installs


def require_cluster_extra() -> None:
    """ConfigError (one line) when a package of nsqpy's ``cluster`` extra is missing."""
    for name in CLUSTER_EXTRA:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # (a parent package missing)
            found = False
        if not found:
            raise ConfigError(
                f"cluster mode (--etcd-endpoints) needs nsqpy's cluster extra, the etcd "
                f"client ({name} is not installed): pip install 'nsqpy[cluster]' (or the "
                f"wheel with it: pip install 'nsqpy-<version>-<python>-<platform>.whl[cluster]')"
            )
