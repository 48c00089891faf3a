"""The client side of TLS, snappy, deflate and AUTH (SPEC 1.6, 1.11, 7.1).

``tls_context`` builds the ``ssl.SSLContext`` from go-nsq's TLS settings (root CA file,
client certificate and key, insecure skip verify, minimum version). ``negotiate`` runs after
the IDENTIFY reply, in go-nsq's order: TLS (``loop.start_tls`` on the connection's
transport), then snappy or deflate, reading the ``OK`` that follows each; then AUTH when nsqd
requires it. A TLS upgrade that was asked for and that nsqd declines is an error, never a
silent fall back to plain text; compression nsqd declines is simply not used.

``negotiate`` works on any ``Upgradable``, the protocol this module owns for the few stream
operations it needs (``client.conn.Connection`` is the one in use), so it never imports
``conn``. Uses ``nsqpy.protocol`` for bytes and ``nsqpy.codecs``; never the servers.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any, Protocol, cast

from nsqpy.client.errors import UnexpectedResponseError
from nsqpy.codecs import stream_codec
from nsqpy.errors import ConfigError
from nsqpy.protocol.client_codec import encode_auth
from nsqpy.protocol.compress import StreamDecoder, StreamEncoder

TLS_VERSIONS = {
    "ssl3.0": ssl.TLSVersion.TLSv1,
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}


def tls_context(
    *,
    root_ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    insecure_skip_verify: bool = False,
    min_version: str | None = None,
) -> ssl.SSLContext:
    """A client context: the system CAs (or ``root_ca_file``), an optional client certificate."""
    if bool(cert_file) != bool(key_file):
        raise ConfigError("a TLS client certificate needs both tls_cert and tls_key")
    try:
        ctx = ssl.create_default_context(cafile=root_ca_file or None)
        if cert_file and key_file:
            ctx.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load TLS files: {exc}") from None
    if insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if min_version:
        version = TLS_VERSIONS.get(min_version.lower())
        if version is None:
            raise ConfigError(f"tls_min_version must be one of {', '.join(TLS_VERSIONS)}")
        ctx.minimum_version = version
    return ctx


class AuthRequiredError(ConfigError):
    """nsqd requires AUTH and no ``auth_secret`` was configured (go-nsq: "Auth Required")."""


class UpgradeOptions(Protocol):
    """The IDENTIFY options negotiation reads (``client.conn.IdentifyOptions`` is one)."""

    @property
    def tls_v1(self) -> bool: ...
    @property
    def tls_context(self) -> ssl.SSLContext | None: ...
    @property
    def tls_server_hostname(self) -> str | None: ...
    @property
    def snappy(self) -> bool: ...
    @property
    def deflate(self) -> bool: ...
    @property
    def deflate_level(self) -> int: ...
    @property
    def auth_secret(self) -> str | None: ...


class Upgradable(Protocol):
    """A connection that has read the IDENTIFY reply and holds its frames until
    ``release_frames`` (``client.conn.Connection`` is one)."""

    auth_reply: dict[str, Any]

    @property
    def key(self) -> str: ...
    @property
    def options(self) -> UpgradeOptions: ...
    @property
    def settings(self) -> dict[str, Any]: ...
    def command(self, data: bytes) -> asyncio.Future[bytes]: ...
    def take_unread(self) -> bytes: ...
    async def start_tls(self, context: ssl.SSLContext, server_hostname: str) -> None: ...
    def compress(self, encoder: StreamEncoder, decoder: StreamDecoder) -> None: ...
    def expect_reply(self, unread: bytes) -> asyncio.Future[bytes]: ...
    def release_frames(self) -> None: ...


async def negotiate(conn: Upgradable, host: str) -> None:
    """The upgrades and AUTH that follow the IDENTIFY reply; the connection is held meanwhile."""
    options = conn.options
    settings = conn.settings
    if options.tls_v1:
        if not settings.get("tls_v1"):
            raise UnexpectedResponseError(f"nsqd {conn.key} does not offer TLS (tls_v1 false)")
        await _start_tls(conn, options.tls_context or ssl.create_default_context(), host)
    for kind in ("snappy", "deflate"):
        if getattr(options, kind) and settings.get(kind):
            level = int(settings.get("deflate_level", options.deflate_level))
            encoder, decoder = stream_codec(kind, level)
            unread = conn.take_unread()
            conn.compress(encoder, decoder)
            await _expect_ok(conn, unread)
    conn.release_frames()
    if settings.get("auth_required"):
        if options.auth_secret is None:
            raise AuthRequiredError(f"nsqd {conn.key} requires AUTH: set auth_secret")
        reply = await conn.command(encode_auth(options.auth_secret))
        try:
            conn.auth_reply = cast(dict[str, Any], json.loads(reply))
        except ValueError:
            raise UnexpectedResponseError(f"bad AUTH reply {reply[:64]!r}") from None


async def _start_tls(conn: Upgradable, context: ssl.SSLContext, host: str) -> None:
    if conn.take_unread():
        raise UnexpectedResponseError(f"nsqd {conn.key} sent data before the TLS handshake")
    await conn.start_tls(context, conn.options.tls_server_hostname or host)
    await _expect_ok(conn, b"")


async def _expect_ok(conn: Upgradable, unread: bytes) -> None:
    """Wait for the OK that follows an upgrade (``unread``: bytes already read past it)."""
    reply = await conn.expect_reply(unread)
    if reply != b"OK":
        raise UnexpectedResponseError(f"nsqd {conn.key} answered an upgrade with {reply[:64]!r}")
