"""Mutual TLS on the links between a cluster's daemons (``--cluster-tls-root-ca-file``,
``--cluster-tls-cert``, ``--cluster-tls-key``).

``ClusterTls.from_options`` reads the three flags once at start (all three or none; one
``ConfigError`` line when a file cannot be read) into two contexts: one to serve, which
demands a client certificate chained to the cluster's CA, and one to dial, which shows this
daemon's certificate and checks the peer's against the same CA and the address dialled
(the certificate names it: ``nsqpy cert create-node HOST...``). Only that CA is trusted,
never the system's. TLS 1.2 at least.

``serve(handler, host, port, tls, what, log)`` listens as ``asyncio.start_server`` does;
with TLS, each connection is handed to ``handler`` only after its handshake, and a refused
handshake (plain TCP, a certificate of another CA, none, a silent peer past the deadline)
is one log line naming the peer and the reason, then the socket is closed. Each accepted
connection gets its own TLS protocol, made here with a waiter that the handshake's outcome
ends (uvloop's TLS server, given ``ssl=``, reports no refused handshake at all): uvloop's
compiled ``SSLProtocol`` on uvloop, as the daemons run, else asyncio's (the same arguments,
the same waiter). ``serve_protocol`` is the same for any protocol (nsqlookupd's TCP
protocol, its HTTP API on ``--rpc-address``). ``dial(host, port, tls)`` opens a connection,
over TLS when ``tls`` says so; ``coordinator_url`` is where the coordinator is called.
Imports ssl, asyncio, uvloop and the cluster model.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from asyncio import sslproto
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import uvloop
import uvloop.loop

from nsqpy.cluster.model import CoordinatorInfo
from nsqpy.errors import ConfigError
from nsqpy.flags.cluster import cluster_tls_check

HANDSHAKE_TIMEOUT = 5  # seconds a peer has to complete its handshake
INSECURE = (
    "cluster: the links between daemons are not secured (no --cluster-tls-root-ca-file, "
    "--cluster-tls-cert, --cluster-tls-key): whoever can listen on the network reads every "
    "replicated message, whoever reaches nsqlookupd can register a fake nsqd "
    "(docs/security.md)"
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass(frozen=True)
class ClusterTls:
    server: ssl.SSLContext
    client: ssl.SSLContext
    handshake_timeout: int = HANDSHAKE_TIMEOUT

    @classmethod
    def from_options(cls, opts: Any) -> ClusterTls | None:
        """The contexts of ``opts``' ``--cluster-tls-*`` flags; None without them."""
        problem = cluster_tls_check(opts)
        if problem:
            raise ConfigError(problem)
        if not opts.cluster_tls_root_ca_file:
            return None
        ca, cert, key = opts.cluster_tls_root_ca_file, opts.cluster_tls_cert, opts.cluster_tls_key
        return cls(_context(ssl.PROTOCOL_TLS_SERVER, ca, cert, key),
                   _context(ssl.PROTOCOL_TLS_CLIENT, ca, cert, key))  # fmt: skip


def _context(protocol: ssl._SSLMethod, ca: str, cert: str, key: str) -> ssl.SSLContext:
    context = ssl.SSLContext(protocol)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"--cluster-tls-cert {cert} / --cluster-tls-key {key}: cannot load them ({exc})"
        ) from None
    try:
        context.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--cluster-tls-root-ca-file {ca}: cannot load it ({exc})") from None
    context.verify_mode = ssl.CERT_REQUIRED  # (a client context checks the host name too)
    return context


async def serve(
    handler: Handler,
    host: str,
    port: int,
    tls: ClusterTls | None,
    what: str,
    log: logging.Logger,
) -> asyncio.Server:
    """Listen on (host, port) and run ``handler`` for each connection (after its TLS
    handshake with ``tls``); a refused handshake is one line on ``log``, prefixed ``what``."""

    def streams() -> asyncio.BaseProtocol:
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(), handler)

    return await serve_protocol(streams, host, port, tls, what, log)


async def serve_protocol(
    factory: Callable[[], asyncio.BaseProtocol],
    host: str,
    port: int,
    tls: ClusterTls | None,
    what: str,
    log: logging.Logger,
    on_secured: Callable[[], None] | None = None,
    **server_args: Any,
) -> asyncio.Server:
    """``serve`` for a protocol made by ``factory`` (``loop.create_server``'s);
    ``on_secured`` is called after each handshake that succeeded."""
    loop = asyncio.get_running_loop()
    if tls is None:
        return await loop.create_server(factory, host, port, **server_args)

    secured_class = _secured_class(loop)

    def connection() -> asyncio.BaseProtocol:
        waiter = loop.create_future()
        secured = secured_class(
            loop, factory(), tls.server, waiter, server_side=True,
            ssl_handshake_timeout=tls.handshake_timeout,
        )  # fmt: skip
        waiter.add_done_callback(lambda done: _refused(done, secured, what, log, on_secured))
        return secured

    return await loop.create_server(connection, host, port, **server_args)


class _Secured(sslproto.SSLProtocol):
    """asyncio's TLS protocol, knowing its peer for the log line of a refusal."""

    peer = "a peer"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.peer = _peer_of(transport, self.peer)
        super().connection_made(transport)


def _peer_of(transport: asyncio.BaseTransport, default: str) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else default


_UvSSLProtocol: Any = getattr(uvloop.loop, "SSLProtocol")  # noqa: B009 (no stub names it)


class _UvSecured(_UvSSLProtocol):  # type: ignore[misc]
    """uvloop's TLS protocol (compiled: a link's records cost less than in asyncio's),
    knowing its peer for the log line of a refusal."""

    peer = "a peer"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.peer = _peer_of(transport, self.peer)
        super().connection_made(transport)


class _Peered(Protocol):
    peer: str


def _secured_class(loop: asyncio.AbstractEventLoop) -> type[_Secured]:
    """The TLS protocol class for ``loop``: uvloop's own when the loop is uvloop's (as
    the daemons' is), else asyncio's. Both take the same arguments and end the waiter
    with the handshake's failure."""
    if isinstance(loop, uvloop.Loop):
        return _UvSecured
    return _Secured


def _refused(
    done: asyncio.Future[None],
    secured: _Peered,
    what: str,
    log: logging.Logger,
    on_secured: Callable[[], None] | None,
) -> None:
    if done.cancelled():
        return
    if done.exception() is None:
        if on_secured is not None:
            on_secured()
        return
    exc = done.exception()
    reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    log.warning("%s: refused %s: TLS handshake failed (%s)", what, secured.peer, reason)


async def dial(
    host: str, port: int, tls: ClusterTls | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to (host, port), over TLS with ``tls`` (the peer's certificate must be
    of the cluster's CA and name ``host``). The caller bounds the time."""
    if tls is None:
        return await asyncio.open_connection(host, port)
    return await asyncio.open_connection(
        host, port, ssl=tls.client, server_hostname=host,
        ssl_handshake_timeout=tls.handshake_timeout,
    )  # fmt: skip


def coordinator_url(coordinator: CoordinatorInfo, tls: ClusterTls | None) -> str:
    """Where the other daemons call the coordinator: ``https://`` its ``rpc_address`` in a
    secure cluster (the request then goes with ``tls.client``), else ``http://`` its HTTP
    address (also when the coordinator runs a version without one)."""
    if tls is not None and coordinator.rpc_address:
        return f"https://{coordinator.rpc_address}"
    return f"http://{coordinator.http_address}"
