"""AUTH (SPEC 1.11): querying the auth servers and checking each SUB and publish against them.

``AuthClient`` (one per nsqd, when ``--auth-http-address`` is set) sends
``GET <endpoint>?common_name=..&remote_ip=..&secret=..&tls=..`` to the auth servers,
starting at a random one and falling through the others on error, over aiohttp with
``--http-client-connect-timeout``/``--http-client-request-timeout`` so the event loop never
waits on it. A 403 carrying ``https_port`` is retried over HTTPS, as nsqd does.

``ConnectionAuth`` (one per client connection) implements nsqd's AUTH command and its
``CheckAuth`` on every command that names a topic (SUB, PUB, MPUB, DPUB and any later verb
with a ``topic``): no authorizations yet -> ``E_AUTH_FIRST``; state expired -> the
connection holds its commands while the auth servers are asked again; not permitted ->
``E_UNAUTHORIZED``; auth servers failing or answering junk -> ``E_AUTH_FAILED`` (details only
logged). All of them are fatal. Until the client has authenticated, an IDENTIFY or AUTH body
may be at most ``PRE_AUTH_BODY_SIZE`` bytes (fatal ``E_BAD_BODY ... body too big`` as soon as
the size arrives). It drives its connection through ``AuthedConnection`` (what it calls;
``nsqd.tcp``'s ``V2Connection`` is one, never named here). Imports aiohttp; of the broker
only the ``Client`` record it fills in.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp

from nsqpy.errors import AuthFailed, AuthFirst, InvalidError, ProtocolError, Unauthorized
from nsqpy.nsqd.tls import peer_common_name
from nsqpy.options import NsqdOptions
from nsqpy.protocol.auth import (
    AuthReplyError,
    AuthState,
    auth_endpoint,
    parse_auth_reply,
    unauthorized_text,
)
from nsqpy.protocol.commands import CommandParser
from nsqpy.protocol.frames import encode_response
from nsqpy.protocol.identify import auth_response
from nsqpy.protocol.limits import PRE_AUTH_BODY_SIZE
from nsqpy.protocol.state import verb_of
from nsqpy.protocol.verbs import Auth

if TYPE_CHECKING:
    from nsqpy.broker.client import Client

log = logging.getLogger("nsqpy.nsqd")

MAX_REPLY = 1 << 20  # an auth reply larger than this is junk


class AuthQueryError(Exception):
    """No auth server gave a usable answer (the reason is logged, never sent to the client)."""


class AuthClient:
    """The auth servers of one nsqd."""

    def __init__(
        self,
        opts: NsqdOptions,
        ssl_context: ssl.SSLContext | None = None,
        *,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.endpoints = [auth_endpoint(a) for a in opts.auth_http_addresses]
        self.timeout = aiohttp.ClientTimeout(
            total=opts.http_client_request_timeout_ms / 1000,
            sock_connect=opts.http_client_connect_timeout_ms / 1000,
        )
        self.ssl_context = ssl_context
        self.clock = clock
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def query(self, secret: str, remote_ip: str, tls: bool, common_name: str) -> AuthState:
        """The first usable answer of the auth servers, tried from a random one in turn."""
        query = urlencode(
            sorted(
                {
                    "common_name": common_name,
                    "remote_ip": remote_ip,
                    "secret": secret,
                    "tls": "true" if tls else "false",
                }.items()
            )
        )
        start = random.randrange(len(self.endpoints))
        errors: list[str] = []
        for i in range(len(self.endpoints)):
            endpoint = self.endpoints[(start + i) % len(self.endpoints)]
            try:
                return await self._query_one(f"{endpoint}?{query}")
            except (AuthQueryError, AuthReplyError, aiohttp.ClientError, TimeoutError) as exc:
                reason = str(exc) or type(exc).__name__
                log.warning("failed auth against %s %s", endpoint, reason)
                errors.append(f"{endpoint}: {reason}")
        raise AuthQueryError("; ".join(errors))

    async def _query_one(self, url: str) -> AuthState:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        for _ in range(2):  # a 403 with https_port is retried once over HTTPS
            async with self._session.get(
                url,
                headers={"Accept": "application/vnd.nsq; version=1.0"},
                ssl=self.ssl_context if self.ssl_context is not None else True,
            ) as resp:
                body = await resp.content.read(MAX_REPLY + 1)
                if len(body) > MAX_REPLY:
                    raise AuthQueryError(f"reply larger than {MAX_REPLY} bytes")
                if resp.status == 200:
                    return parse_auth_reply(body, self.clock())
                if resp.status == 403 and not url.startswith("https"):
                    url = _https_url(url, body)
                    continue
                raise AuthQueryError(f"got response {resp.status} {body[:200]!r}")
        raise AuthQueryError("HTTPS retry was refused too")


def _https_url(url: str, body: bytes) -> str:
    """nsqd's retry target for a 403 ``{"https_port": N}`` reply."""
    try:
        port = json.loads(body)["https_port"]
    except (ValueError, KeyError, TypeError):
        raise AuthQueryError(f"got response 403 {body[:200]!r}") from None
    if type(port) is not int:
        raise AuthQueryError(f"got response 403 with https_port {port!r}")
    parts = urlsplit(url)
    return urlunsplit(("https", f"{parts.hostname}:{port}", parts.path, parts.query, ""))


class AuthedConnection(Protocol):
    """What ``ConnectionAuth`` uses of its client connection."""

    @property
    def client(self) -> Client: ...

    @property
    def parser(self) -> CommandParser: ...

    @property
    def transport(self) -> asyncio.Transport | None: ...

    def hold(self, *, pause_reading: bool = True) -> None:
        """Run no more commands until ``resume``."""
        ...

    def resume(self) -> None: ...

    def dispatch(self, command: object) -> None:
        """Run a command (one held back while the auth servers were asked)."""
        ...

    def send_error(self, err: ProtocolError) -> None:
        """Answer an error frame (a fatal one closes the connection)."""
        ...

    def respond(self, frame: bytes) -> None:
        """Answer a frame, in order with the other replies."""
        ...


class ConnectionAuth:
    """AUTH and the permission checks of one client connection."""

    def __init__(self, conn: AuthedConnection, client: AuthClient) -> None:
        self.conn = conn
        self.auth_client = client
        self.secret = ""
        self.state: AuthState | None = None
        self._checked: object = None  # a command re-run after its re-authorisation
        self._task: asyncio.Task[None] | None = None
        self._max_body = conn.parser.max_command_body_size
        conn.parser.max_command_body_size = min(PRE_AUTH_BODY_SIZE, self._max_body)

    def intercept(self, command: object) -> bool:
        """True when this took the command over (AUTH, or a check waiting for the auth server).

        Raises the fatal error when nsqd refuses the command outright.
        """
        if isinstance(command, Auth):
            self._auth(command)
            return True
        topic = getattr(command, "topic", None)
        if not isinstance(topic, str):
            return False
        if self._checked is command:
            self._checked = None
            return False
        channel = getattr(command, "channel", "")
        verb = verb_of(command)
        state = self.state
        if state is None or not state.authorizations:
            raise AuthFirst(f"AUTH required before {verb}")
        if state.is_expired(self.auth_client.clock()):
            self._run(self._recheck(command, verb, topic, channel))
            return True
        if not state.is_allowed(topic, channel):
            raise Unauthorized(unauthorized_text(verb, topic, channel))
        return False

    def _auth(self, cmd: Auth) -> None:
        if self.state is not None and self.state.authorizations:
            raise InvalidError("AUTH already set")
        self.secret = cmd.secret.decode("utf-8", "replace")
        self._run(self._first_auth())

    async def _first_auth(self) -> None:
        if not await self._query():
            return
        state = self.state
        assert state is not None
        if not state.authorizations:
            self.conn.send_error(Unauthorized("AUTH no authorizations found"))
            return
        reply = auth_response(state.identity, state.identity_url, len(state.authorizations))
        self.conn.respond(encode_response(reply))

    async def _recheck(self, command: object, verb: str, topic: str, channel: str) -> None:
        if not await self._query():
            return
        assert self.state is not None
        if not self.state.is_allowed(topic, channel):
            self.conn.send_error(Unauthorized(unauthorized_text(verb, topic, channel)))
            return
        self._checked = command
        self.conn.dispatch(command)

    async def _query(self) -> bool:
        """Ask the auth servers; on failure the client gets E_AUTH_FAILED and False is returned."""
        conn = self.conn
        transport = conn.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        remote_ip = peer[0] if isinstance(peer, tuple) else ""
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        common_name = peer_common_name(ssl_object) if ssl_object is not None else ""
        try:
            state = await self.auth_client.query(
                self.secret, remote_ip, conn.client.tls, common_name
            )
        except AuthQueryError as exc:
            log.warning("[%s] AUTH failed %s", conn.client.remote_address, exc)
            conn.send_error(AuthFailed("AUTH failed"))
            return False
        self.state = state
        client = conn.client
        client.authed = bool(state.authorizations)
        if client.authed:
            conn.parser.max_command_body_size = self._max_body
        client.auth_identity = state.identity
        client.auth_identity_url = state.identity_url
        return True

    def _run(self, work: Coroutine[Any, Any, None]) -> None:
        """Hold the connection's commands while ``work`` talks to the auth servers."""
        self.conn.hold()
        self._task = asyncio.get_running_loop().create_task(work)
        self._task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("AUTH check failed", exc_info=task.exception())
            self.conn.send_error(AuthFailed("AUTH failed"))
        self.conn.resume()
