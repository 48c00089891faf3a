"""nsqd's TLS settings (SPEC 5.1): the server context from the ``--tls-*`` flags, the policy.

``TlsSettings.from_options`` reads the flags once at start-up and fails with one clear
``ConfigError`` line when they cannot work (a missing or unreadable certificate or key, one
given without the other, a bad CA file, a policy or version nsqd does not know, TLS required
without a certificate). As nsqd does, ``--tls-client-auth-policy`` forces
``--tls-required=true`` when it was left false. ``describe`` gives the per-client /stats
fields with Go's names (``TLS1.2``, ``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``).

Python's ssl module always verifies a certificate the client presents, so ``require``
(Go: any certificate, unverified) verifies it against ``--tls-root-ca-file`` (or the system
CAs) just as ``require-verify`` does. Owns no sockets; imports ssl, never the servers.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from nsqpy.errors import ConfigError
from nsqpy.options import NsqdOptions

TLS_VERSIONS = {
    "ssl3.0": ssl.TLSVersion.TLSv1,  # SSLv3 is gone from OpenSSL: the lowest left is TLS 1.0
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH_POLICIES = ("", "require", "require-verify")
_GO_VERSIONS = {
    "TLSv1": "TLS1.0",
    "TLSv1.1": "TLS1.1",
    "TLSv1.2": "TLS1.2",
    "TLSv1.3": "TLS1.3",
}
# OpenSSL cipher names -> Go's tls.CipherSuiteName (TLS 1.3 suites share their names).
_GO_CIPHERS = {
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-RSA-AES256-GCM-SHA384": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-RSA-CHACHA20-POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-ECDSA-CHACHA20-POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-RSA-AES128-SHA": "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "ECDHE-RSA-AES256-SHA": "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "ECDHE-ECDSA-AES128-SHA": "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "ECDHE-ECDSA-AES256-SHA": "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "AES128-GCM-SHA256": "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "AES256-GCM-SHA384": "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "AES128-SHA": "TLS_RSA_WITH_AES_128_CBC_SHA",
    "AES256-SHA": "TLS_RSA_WITH_AES_256_CBC_SHA",
}


@dataclass
class TlsSettings:
    """The TLS side of one nsqd: its server context (None without cert and key) and policy."""

    context: ssl.SSLContext | None
    tcp_required: bool  # every TCP command but IDENTIFY needs TLS
    http_required: bool  # the plain HTTP listener answers 403 TLS_REQUIRED
    client_context: ssl.SSLContext | None = None  # for HTTPS auth servers
    handshake_timeout: float = 5.0  # nsqd's deadline for the TLS handshake after IDENTIFY
    cluster_peer: bool = False  # the cluster's mutual TLS: the client is one of its nodes

    @classmethod
    def from_options(cls, opts: NsqdOptions) -> TlsSettings:
        policy = opts.tls_client_auth_policy
        if policy not in CLIENT_AUTH_POLICIES:
            raise ConfigError(
                f"--tls-client-auth-policy must be require or require-verify, got {policy!r}"
            )
        required = opts.tls_required.lower()
        if required in ("1", "true"):
            required = "true"
        elif required in ("0", "false", ""):
            required = "false"
        elif required != "tcp-https":
            raise ConfigError(
                f"--tls-required must be true, false or tcp-https, got {opts.tls_required!r}"
            )
        if policy and required == "false":
            required = "true"
        context = server_context(opts)
        if context is None and required != "false":
            raise ConfigError("cannot require TLS client connections without TLS key and cert")
        return cls(
            context=context,
            tcp_required=required != "false",
            http_required=required == "true",
            client_context=_client_context(opts.tls_root_ca_file),
        )


def _read(flag: str, path: str) -> None:
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise ConfigError(f"--{flag} {path}: {exc.strerror or exc}") from None


def server_context(opts: NsqdOptions) -> ssl.SSLContext | None:
    """The server-side context for --tls-cert/--tls-key, or None when neither is set."""
    if not opts.tls_cert and not opts.tls_key:
        return None
    if not opts.tls_cert or not opts.tls_key:
        missing = "--tls-cert" if not opts.tls_cert else "--tls-key"
        raise ConfigError(f"--tls-cert and --tls-key must be given together ({missing} is empty)")
    version = TLS_VERSIONS.get(opts.tls_min_version.lower())
    if version is None:
        raise ConfigError(
            f"--tls-min-version must be one of {', '.join(TLS_VERSIONS)}, "
            f"got {opts.tls_min_version!r}"
        )
    _read("tls-cert", opts.tls_cert)
    _read("tls-key", opts.tls_key)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = version
    try:
        ctx.load_cert_chain(opts.tls_cert, opts.tls_key)
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(
            f"--tls-cert {opts.tls_cert} / --tls-key {opts.tls_key}: cannot load ({exc})"
        ) from None
    if opts.tls_client_auth_policy:
        ctx.verify_mode = ssl.CERT_REQUIRED
    if opts.tls_root_ca_file:
        _read("tls-root-ca-file", opts.tls_root_ca_file)
        try:
            ctx.load_verify_locations(cafile=opts.tls_root_ca_file)
        except ssl.SSLError as exc:
            raise ConfigError(f"--tls-root-ca-file {opts.tls_root_ca_file}: {exc}") from None
    elif opts.tls_client_auth_policy:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return ctx


def _client_context(root_ca_file: str) -> ssl.SSLContext | None:
    """The context for HTTPS auth servers: the system CAs, or --tls-root-ca-file."""
    if not root_ca_file:
        return None
    ctx = ssl.create_default_context()
    try:
        ctx.load_verify_locations(cafile=root_ca_file)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"--tls-root-ca-file {root_ca_file}: {exc}") from None
    return ctx


def describe(ssl_object: Any) -> dict[str, object]:
    """The /stats TLS fields of a finished handshake (an ``ssl.SSLObject``)."""
    cipher = ssl_object.cipher()
    name = cipher[0] if cipher else ""
    return {
        "tls_version": _GO_VERSIONS.get(ssl_object.version() or "", ssl_object.version() or ""),
        "tls_cipher_suite": _GO_CIPHERS.get(name, name),
        "tls_negotiated_protocol": ssl_object.selected_alpn_protocol() or "",
        # Go's NegotiatedProtocolIsMutual is always true (deprecated since Go 1.16).
        "tls_negotiated_protocol_is_mutual": True,
    }


def peer_common_name(ssl_object: Any) -> str:
    """The CN of the client's certificate ("" without one), sent to the auth server."""
    cert = ssl_object.getpeercert()
    if not cert:
        return ""
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""
