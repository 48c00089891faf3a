"""The etcd v3 client of cluster mode: ``Etcd``, a thin layer over the PyPI client ``aetcd``
(docs/replication.md, "etcd client", says why that one and what was measured).

What it adds to aetcd: one gRPC channel over every endpoint (gRPC's multi-address
``ipv4:`` target with round-robin picking, so a dead member is skipped by the next call);
a deadline on every call (``EtcdUnavailable`` when it passes); bounded retries with backoff
for reads and unconditional writes, never for conditional ones (``create``, ``replace``,
``txn``: their outcome is unknown after a failure, so the caller re-reads); leases kept
alive by a task every TTL/3 that sets ``Lease.lost`` once the TTL passed without a
successful refresh; and ``watch_prefix``, which resumes after a lost stream from the last
revision it delivered + 1, so no event is lost or repeated, and raises ``Compacted`` when
etcd no longer has that revision. Keys are ``str`` (UTF-8), values ``bytes``.

Security (``EtcdSecurity``, from the ``--etcd-*`` flags): the channel is gRPC's own TLS
(``ssl_channel_credentials``, a client certificate when given), handed to aetcd by
``_Client``, since aetcd 1.0.0 only opens insecure channels. With a user, ``Etcd``
authenticates itself (aetcd would, once, with no deadline) and sends the token on every call
and stream; a call that etcd refuses for its token (expired: ``--auth-token-ttl``, lost by a
restarted member, or older than a change of users and roles) gets a new token and is sent
again, once, within its deadline; a keep-alive and a watch do the same. ``connect`` turns
etcd refusing the certificate or the credentials into one ``ConfigError`` line.

The values and errors (``KV``, ``Event``, ``Compare``, ``PutOp``, ``DeleteOp``,
``EtcdError`` > ``EtcdUnavailable`` | ``Compacted``) live in ``etcd_types`` and are
re-exported here, beside ``EtcdAuthFailed``. Imports aetcd (and the grpc it runs on) and the
standard library; of nsqpy ``etcd_types``, ``errors`` and ``flags.cluster``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import aetcd  # type: ignore[import-untyped]
import grpc  # type: ignore[import-untyped]
from aetcd import exceptions as aetcd_errors
from aetcd import rpc, transactions, utils

from nsqpy.cluster.etcd_types import (
    KV,
    CallLatency,
    Compacted,
    Compare,
    DeleteOp,
    EtcdError,
    EtcdUnavailable,
    Event,
    PutOp,
    TxnOp,
    grpc_target,
    parse_endpoint,
    resolve,
)
from nsqpy.errors import ConfigError
from nsqpy.flags.cluster import EtcdSecurity

__all__ = [
    "KV",
    "Compacted",
    "Compare",
    "DeleteOp",
    "Etcd",
    "EtcdAuthFailed",
    "EtcdError",
    "EtcdUnavailable",
    "Event",
    "Lease",
    "PutOp",
    "TxnOp",
    "grpc_target",
    "parse_endpoint",
    "resolve",
]

log = logging.getLogger("nsqpy.cluster.etcd")

T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0  # seconds: every call's deadline
BACKOFF_MIN = 0.05  # seconds between retries, doubling …
BACKOFF_MAX = 1.0  # … up to this
RETRY_REFRESH = 0.25  # seconds between a lease's keep-alives while they fail
TXN_CHUNK = 100  # puts per txn we write (etcd's --max-txn-ops is 128 by default)
REQUIRE_LEADER = (("hasleader", "true"),)  # a member cut off from the quorum ends the stream

# gRPC keep-alive finds a member that stopped answering (SIGSTOP, cut link) while its TCP
# connection stays up; etcd refuses pings more often than every 5 s (--grpc-keepalive-min-time).
CHANNEL_OPTIONS: dict[str, Any] = {
    "grpc.lb_policy_name": "round_robin",
    "grpc.keepalive_time_ms": 5000,
    "grpc.keepalive_timeout_ms": 2000,
    "grpc.keepalive_permit_without_calls": 0,
    "grpc.http2.max_pings_without_data": 0,
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
    # gRPC takes 4 MiB in a message by default; a read of every key of a large cluster can
    # be more. etcd's own Go client takes up to 2 GiB.
    "grpc.max_receive_message_length": 2**31 - 1,
}


_COMPARE_CLASS = {
    "create": transactions.Create,
    "mod": transactions.Mod,
    "version": transactions.Version,
    "value": transactions.Value,
}
_COMPARE_OP = {
    "==": rpc.Compare.EQUAL,
    "!=": rpc.Compare.NOT_EQUAL,
    "<": rpc.Compare.LESS,
    ">": rpc.Compare.GREATER,
}
_TRANSIENT = (
    aetcd_errors.ConnectionFailedError,
    aetcd_errors.ConnectionTimeoutError,
    aetcd_errors.InternalError,
)
_TRANSIENT_CODES = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.INTERNAL,
}
# etcd's answers to a token it no longer takes (Go's clientv3 gets a new token on these).
_STALE_TOKEN = ("invalid auth token", "revision of auth store is old", "user name is empty")
# What gRPC says when the TLS handshake fails, and what that means here.
_TLS_FAILURES = (
    ("CERTIFICATE_VERIFY_FAILED", "etcd's certificate is not signed by --etcd-cacert"),
    ("Hostname Verification", "etcd's certificate does not name {host}"),
    (
        "TSI_DATA_CORRUPTED",
        "etcd refused this client's certificate (none given, or not signed by a CA etcd "
        "trusts: --etcd-cert, --etcd-key)",
    ),
    ("Handshake read failed", "etcd ended the TLS handshake (does it serve TLS there?)"),
)


class EtcdAuthFailed(EtcdError):
    """etcd refused the user's name or password (``connect`` raises ConfigError instead)."""


def _stale_token(text: str) -> bool:
    return any(mark in text for mark in _STALE_TOKEN)


def _tls_failure(text: str, host: str) -> str | None:
    """What a TLS handshake failure reported by gRPC in ``text`` means, or None."""
    for mark, meaning in _TLS_FAILURES:
        if mark in text:
            return meaning.format(host=host)
    return None


def _channel(target: str, host: str, security: EtcdSecurity | None) -> Any:
    """The gRPC channel to ``target``: TLS when ``security`` says so, with etcd's certificate
    checked against ``host`` (one name for every member: gRPC's multi-address target has
    no name of its own)."""
    if security is None or not security.tls:
        return grpc.aio.insecure_channel(target, options=list(CHANNEL_OPTIONS.items()))
    credentials = grpc.ssl_channel_credentials(security.cacert, security.key, security.cert)
    options = {**CHANNEL_OPTIONS, "grpc.ssl_target_name_override": host}
    return grpc.aio.secure_channel(target, credentials, options=list(options.items()))


class _Client(aetcd.Client):  # type: ignore[misc]
    """aetcd's client on a channel opened by ``_channel``: aetcd 1.0.0's ``connect`` opens
    an insecure channel (and authenticates with no deadline, once); this one only makes
    aetcd's stubs on the given channel. Every aetcd call runs ``connect`` first, and sends
    ``metadata`` (``Etcd`` keeps the token there)."""

    def __init__(self, channel: Any) -> None:
        super().__init__()
        self._given = channel

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        self.channel = self._given
        self.auth_stub = rpc.AuthStub(self._given)
        self.kvstub = rpc.KVStub(self._given)
        self.clusterstub = rpc.ClusterStub(self._given)
        self.leasestub = rpc.LeaseStub(self._given)
        self.maintenancestub = rpc.MaintenanceStub(self._given)
        self._connected.set()

    async def refresh_lease(self, lease_id: int) -> Any:
        """One keep-alive on a stream of its own, ended before it returns: the reply, or
        None when the stream ended without one. aetcd 1.0.0's leaves each stream's
        response generator unfinished (it returns from inside ``async for``), and every
        such call stayed reachable for good: a lease refreshed every few seconds leaked
        one a refresh, for the life of the process."""
        await self.connect()
        call = self.leasestub.LeaseKeepAlive(timeout=self._timeout, metadata=self.metadata)
        try:
            await call.write(rpc.LeaseKeepAliveRequest(ID=lease_id))
            await call.done_writing()
            reply = await call.read()
        except rpc.AioRpcError as exc:
            aetcd_errors._handle_exception(exc)  # (aetcd's error for it, as its calls raise)
            raise
        finally:
            call.cancel()  # (no-op once it ended)
        return None if reply is grpc.aio.EOF else reply


def _b(key: str) -> bytes:
    return key.encode()


def _kv(raw: Any) -> KV:
    return KV(
        key=bytes(raw.key).decode(errors="surrogateescape"),
        value=bytes(raw.value),
        mod_revision=int(raw.mod_revision),
        create_revision=int(raw.create_revision),
        lease=int(raw.lease),
        version=int(raw.version),
    )


def _lease_id(lease: Lease | int | None) -> int | None:
    return lease.id if isinstance(lease, Lease) else lease


class Etcd:
    """A connection to one etcd cluster (every endpoint over one gRPC channel)."""

    def __init__(
        self,
        client: Any,
        endpoints: Sequence[str],
        timeout: float,
        security: EtcdSecurity | None = None,
    ) -> None:
        self._client = client
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.latency = CallLatency()  # (``_call``: each call's time, by kind; /metrics)
        self._user = security.username if security is not None else ""
        self._password = security.password if security is not None else ""
        self._token_generation = 0  # +1 at each Authenticate answered
        self._token_lock = asyncio.Lock()
        self._closed = False
        self._closing = asyncio.Event()
        self._leases: set[Lease] = set()
        self._calls: set[Any] = set()

    @classmethod
    async def connect(
        cls,
        endpoints: Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        check: bool = True,
        security: EtcdSecurity | None = None,
    ) -> Etcd:
        """A client of the etcd members at ``endpoints`` (``host:port``), over TLS and as a
        user when ``security`` says so. With a user it authenticates at once; else, with
        ``check``, one read must be answered. ``EtcdUnavailable`` when etcd does not answer
        within ``timeout``; ``ConfigError`` (one line) when it refuses the TLS handshake or
        the credentials."""
        host = parse_endpoint(endpoints[0])[0] if endpoints else ""
        target = grpc_target(await resolve(endpoints))
        client = _Client(_channel(target, host, security))
        await client.connect()
        etcd = cls(client, endpoints, timeout, security)
        try:
            await etcd._check(check, host)
        except BaseException:
            await etcd.close()
            raise
        return etcd

    async def _check(self, check: bool, host: str) -> None:
        """Authenticate (a user given), or read once (``check``); a refusal as ConfigError."""
        try:
            if self._user:
                await self._call(f"authenticate as {self._user}", self._authenticate, retry=True)
            if check and self._client.metadata is None:
                await self.get("/")
        except EtcdAuthFailed as exc:
            raise ConfigError(f"--etcd-username {self._user}: {exc}") from None
        except EtcdUnavailable as exc:
            tls = _tls_failure(str(exc), host)
            if tls is not None:
                raise ConfigError(
                    f"--etcd-endpoints {','.join(self.endpoints)}: {tls}: {exc}"
                ) from None
            raise
        except EtcdError as exc:
            if "permission denied" not in str(exc):  # (etcd answered, to a certificate's CN)
                raise ConfigError(f"--etcd-endpoints {','.join(self.endpoints)}: {exc}") from None

    async def close(self) -> None:
        """Stop every lease's keep-alive (leases are not revoked: they expire), end every
        watch, close the channel."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        for lease in list(self._leases):
            lease.stop()
        for call in list(self._calls):
            call.cancel()
        await self._client.close()

    async def __aenter__(self) -> Etcd:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- calls with a deadline -----------------------------------------------------------

    async def _call(self, what: str, op: Callable[[], Awaitable[T]], *, retry: bool) -> T:
        """``op()`` within ``self.timeout``; with ``retry``, transient failures are tried
        again with backoff, each attempt getting at most a fifth of the deadline (a put to
        a follower whose leader just died hangs until it times out: retried sooner, it
        reaches the new leader)."""
        if self._closed:
            raise EtcdUnavailable(f"{what}: the etcd client is closed")
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            return await self._attempts(what, op, retry, started + self.timeout)
        finally:
            self.latency.record(what, loop.time() - started)

    async def _attempts(
        self, what: str, op: Callable[[], Awaitable[T]], retry: bool, deadline: float
    ) -> T:
        loop = asyncio.get_running_loop()
        delay = BACKOFF_MIN
        renewed = False  # a new token is asked for once per call
        while True:
            remaining = deadline - loop.time()
            attempt = min(remaining, max(self.timeout / 5, 0.5)) if retry else remaining
            seen = self._token_generation
            try:
                async with asyncio.timeout(attempt):
                    return await op()
            except TimeoutError:
                last = f"no answer within {attempt:.2f}s"
            except _TRANSIENT as exc:
                last = str(exc) or type(exc).__name__
            except aetcd_errors.ClientError as exc:
                if renewed or not self._stale(exc):
                    raise EtcdError(f"{what}: {exc}") from exc
                renewed = True  # (refused before being applied: sent again, even unless retry)
                failed = await self._renew(seen, deadline - loop.time())
                if failed is None:
                    continue
                last = failed
            if not retry or loop.time() + delay >= deadline:
                raise EtcdUnavailable(f"{what}: {last} (deadline {self.timeout}s)")
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)

    # -- the token ---------------------------------------------------------------------------

    def _stale(self, exc: BaseException) -> bool:
        """Whether etcd refused a call for its token (a user given)."""
        return bool(self._user) and _stale_token(str(exc))

    async def _authenticate(self, seen: int = 0) -> None:
        """A new token, sent by every call from now on, unless one came since the token
        ``seen`` (``_token_generation`` then). Transient failures raise aetcd's errors,
        a refusal ``EtcdAuthFailed``. etcd without auth: no token (as Go's clientv3)."""
        async with self._token_lock:
            if self._token_generation != seen:
                return
            request = rpc.AuthenticateRequest(name=self._user, password=self._password)
            try:
                reply = await self._client.auth_stub.Authenticate(request)
            except grpc.aio.AioRpcError as exc:
                detail = exc.details() or exc.code().name
                if exc.code() in _TRANSIENT_CODES:
                    raise aetcd_errors.ConnectionFailedError(detail) from None
                if "authentication is not enabled" not in detail:
                    raise EtcdAuthFailed(f"etcd refused the credentials: {detail}") from None
                log.warning("etcd: auth is not enabled; --etcd-username %s unused", self._user)
                self._client.metadata = None
            else:
                self._client.metadata = (("token", reply.token),)
                log.debug("etcd: authenticated as %s", self._user)
            self._token_generation += 1

    async def _renew(self, seen: int, within: float) -> str | None:
        """``_authenticate(seen)`` within ``within`` seconds: None once done, else why not
        (a refusal raises ``EtcdAuthFailed``)."""
        try:
            async with asyncio.timeout(max(0.0, within)):
                await self._authenticate(seen)
        except TimeoutError:
            return f"no new token within {within:.2f}s"
        except _TRANSIENT as exc:
            return f"no new token: {exc}"
        return None

    # -- keys ------------------------------------------------------------------------------

    async def get(self, key: str) -> KV | None:
        raw = await self._call(f"get {key}", lambda: self._client.get(_b(key)), retry=True)
        return None if raw is None else _kv(raw)

    async def get_prefix(self, prefix: str) -> tuple[list[KV], int]:
        """Every key under ``prefix`` in key order, and the revision of the read."""
        res = await self._call(
            f"get prefix {prefix}",
            lambda: self._client.get_prefix(_b(prefix), sort_order="ascend"),
            retry=True,
        )
        return [_kv(raw) for raw in res.kvs], int(res.header.revision)

    async def put(self, key: str, value: bytes, lease: Lease | int | None = None) -> int:
        """Write ``key``; returns the revision of the write (retried: a put repeated after
        an unknown outcome writes the same value again)."""
        lease_id = _lease_id(lease)
        res = await self._call(
            f"put {key}", lambda: self._client.put(_b(key), value, lease=lease_id), retry=True
        )
        return int(res.header.revision)

    async def delete(self, key: str) -> bool:
        """Delete ``key``; whether it existed."""
        res = await self._call(f"delete {key}", lambda: self._client.delete(_b(key)), retry=True)
        return res is not None and int(res.deleted) > 0

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every key under ``prefix``; how many there were."""
        res = await self._call(
            f"delete prefix {prefix}",
            lambda: self._client.delete_prefix(_b(prefix)),
            retry=True,
        )
        return int(res.deleted)

    async def create(self, key: str, value: bytes, lease: Lease | int | None = None) -> bool:
        """Write ``key`` only if it does not exist; whether it was written."""
        return await self.txn([Compare.absent(key)], [PutOp(key, value, _lease_id(lease))])

    async def replace(
        self, key: str, value: bytes, mod_revision: int, lease: Lease | int | None = None
    ) -> bool:
        """Write ``key`` only if it was last written at ``mod_revision`` (0 matches an
        absent key, as in etcd)."""
        return await self.txn(
            [Compare.mod_is(key, mod_revision)], [PutOp(key, value, _lease_id(lease))]
        )

    async def txn(
        self,
        compares: Sequence[Compare],
        successes: Sequence[TxnOp],
        failures: Sequence[TxnOp] = (),
        *,
        retry: bool = False,
    ) -> bool:
        """Apply ``successes`` if every compare holds, else ``failures``; whether the
        compares held. Not retried unless ``retry``: ``EtcdUnavailable`` means the outcome
        is unknown. ``retry`` is for a txn whose compares fail once it has been applied
        (a guarded write whose caller re-reads on False): an attempt lost with a dead etcd
        leader is then sent again, each attempt bounded as reads are."""
        what = f"txn on {', '.join(sorted({c.key for c in compares})) or '-'}"
        ok, _ = await self._call(
            what,
            lambda: self._client.transaction(
                compare=[_compare(c) for c in compares],
                success=[_op(o) for o in successes],
                failure=[_op(o) for o in failures],
            ),
            retry=retry,
        )
        return bool(ok)

    async def compact(self, revision: int) -> None:
        """Drop the history before ``revision`` (watches from older revisions then get
        ``Compacted``)."""
        await self._call(
            f"compact {revision}",
            lambda: self._client.compact(revision, physical=True),
            retry=True,
        )

    # -- leases -----------------------------------------------------------------------------

    async def lease(self, ttl_s: float) -> Lease:
        """A lease of ``ttl_s`` seconds (rounded up; etcd may grant more), kept alive by a
        task until ``revoke()``, ``close()`` or its loss."""
        ttl = max(1, int(-(-ttl_s // 1)))
        raw = await self._call(f"lease {ttl}s", lambda: self._client.lease(ttl), retry=True)
        lease = Lease(self, int(raw.id), int(raw.ttl))
        self._leases.add(lease)
        lease.start()
        return lease

    async def _refresh(self, lease_id: int) -> int:
        """One keep-alive; the TTL left (0 or less: the lease is gone). Refused for its
        token (etcd 3.4 does not check it there, others may): a new token, and again."""
        seen = self._token_generation
        try:
            reply = await self._client.refresh_lease(lease_id)
        except aetcd_errors.ClientError as exc:
            if not self._stale(exc):
                raise
            await self._authenticate(seen)
            reply = await self._client.refresh_lease(lease_id)
        if reply is None:
            raise aetcd_errors.ConnectionFailedError("keep-alive stream ended without a reply")
        return int(reply.TTL)

    async def _revoke(self, lease_id: int) -> None:
        try:
            await self._call(
                f"revoke lease {lease_id:x}",
                lambda: self._client.revoke_lease(lease_id),
                retry=True,
            )
        except EtcdError as exc:
            if "not found" not in str(exc):
                raise

    # -- watches ----------------------------------------------------------------------------

    def watch_prefix(
        self, prefix: str, start_revision: int | None = None
    ) -> AsyncIterator[list[Event]]:
        """The changes under ``prefix`` from ``start_revision`` (None: from now on), one list
        per etcd revision batch. After a lost stream it watches again from the last
        delivered revision + 1 (backoff up to 1 s, for as long as it takes); ``Compacted``
        when that revision is gone. Ends when the client is closed."""
        return _Watch(self, prefix, start_revision).events()


def _compare(c: Compare) -> Any:
    made = _COMPARE_CLASS[c.target](_b(c.key))
    made.value = c.value
    made.op = _COMPARE_OP[c.op]
    return made


def _op(o: TxnOp) -> Any:
    if isinstance(o, PutOp):
        return transactions.Put(_b(o.key), o.value, lease=o.lease)
    end = utils.prefix_range_end(_b(o.key)) if o.prefix else None
    return transactions.Delete(_b(o.key), range_end=end)


class _Closed(Exception):
    """The client was closed while a watch waited on its stream."""


class _Restart(Exception):
    """The watch stream ended or etcd cancelled the watch: watch again."""


class _Watch:
    """One ``watch_prefix`` iteration: the stream, its next revision, its state for logs."""

    def __init__(self, etcd: Etcd, prefix: str, start_revision: int | None) -> None:
        self.etcd = etcd
        self.prefix = prefix
        self.next_revision = start_revision
        self.failing = False

    async def events(self) -> AsyncIterator[list[Event]]:
        delay = BACKOFF_MIN
        while not self.etcd._closed:
            stub = rpc.WatchStub(self.etcd._client.channel)
            seen = self.etcd._token_generation
            call = stub.Watch(metadata=REQUIRE_LEADER + (self.etcd._client.metadata or ()))
            self.etcd._calls.add(call)
            try:
                async for batch in self._stream(call):
                    delay = BACKOFF_MIN
                    yield batch
            except (grpc.aio.AioRpcError, _Restart) as exc:
                self._failed(exc)
                if self.etcd._stale(exc) and not await self._renewed(seen):
                    return
            except _Closed:
                return
            finally:
                self.etcd._calls.discard(call)
                call.cancel()
            if not self.etcd._closed:
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)

    async def _stream(self, call: Any) -> AsyncIterator[list[Event]]:
        prefix = _b(self.prefix)
        # fragment: etcd splits a response bigger than its request limit (1.5 MiB by
        # default) into fragments; unsplit, the history sent to a watcher far behind (up to
        # a thousand revisions at once) can pass gRPC's message limit, and be refused again
        # at every retry, the watch stuck for good.
        create = rpc.WatchCreateRequest(
            key=prefix, range_end=utils.prefix_range_end(prefix), fragment=True
        )
        if self.next_revision is not None:
            create.start_revision = self.next_revision
        await self._io(call.write(rpc.WatchRequest(create_request=create)))
        pieces: list[Event] = []  # the fragments so far of a response split by etcd
        while True:
            resp = await self._io(call.read())
            if resp is grpc.aio.EOF:
                raise _Restart("the watch stream ended")
            if resp.compact_revision:
                raise Compacted(int(resp.compact_revision))
            if resp.canceled:
                raise _Restart(f"etcd cancelled the watch: {resp.cancel_reason or '?'}")
            if resp.created:
                if self.next_revision is None:
                    self.next_revision = int(resp.header.revision) + 1
                self._recovered()
            pieces.extend(_event(e) for e in resp.events)
            if pieces and not resp.fragment:
                batch, pieces = pieces, []
                self.next_revision = batch[-1].kv.mod_revision + 1
                yield batch

    async def _renewed(self, seen: int) -> bool:
        """A new token for the next watch (etcd refused this one's); False once closed."""
        try:
            why = await self._io(self.etcd._renew(seen, self.etcd.timeout))
        except EtcdAuthFailed as exc:
            why = str(exc)
        except _Closed:
            return False
        if why is not None:
            log.warning("etcd watch %s: %s", self.prefix, why)
        return True

    async def _io(self, step: Awaitable[T]) -> T:
        """``step`` (a read or write of the stream), or ``_Closed`` as soon as the client
        closes: a cancelled gRPC call does not always wake a pending write."""
        if self.etcd._closing.is_set():
            raise _Closed
        op = asyncio.ensure_future(step)
        op.add_done_callback(_retrieve)
        closed = asyncio.ensure_future(self.etcd._closing.wait())
        try:
            await asyncio.wait((op, closed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not op.done():
                op.cancel()
        if self.etcd._closing.is_set() or not op.done() or op.cancelled():
            raise _Closed
        return op.result()

    def _failed(self, exc: BaseException) -> None:
        if not self.failing:
            detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            log.warning(
                "etcd watch %s lost (%s); watching again from revision %s",
                self.prefix,
                detail,
                self.next_revision,
            )
        self.failing = True

    def _recovered(self) -> None:
        if self.failing:
            log.info("etcd watch %s resumed at revision %s", self.prefix, self.next_revision)
        self.failing = False


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a stream step's failure as seen (it is raised to the watch, or moot after a close)."""
    if not future.cancelled():
        future.exception()


def _event(raw: Any) -> Event:
    kind: Literal["put", "delete"] = "delete" if raw.type == rpc.Event.DELETE else "put"
    return Event(kind, _kv(raw.kv))


class Lease:
    """A granted lease and its keep-alive task. ``lost`` is set when the TTL passed
    without a successful refresh (or etcd said the lease is gone): whatever was bound to
    it must be assumed deleted, and a new lease taken."""

    def __init__(self, etcd: Etcd, lease_id: int, ttl: int) -> None:
        self.etcd = etcd
        self.id = lease_id
        self.ttl = ttl
        self.lost = asyncio.Event()
        self.expires = asyncio.get_running_loop().time() + ttl  # at the latest, as we know
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"Lease({self.id:x}, ttl={self.ttl}, lost={self.lost.is_set()})"

    def start(self) -> None:
        self._task = asyncio.create_task(self._keep_alive(), name=f"etcd lease {self.id:x}")

    def stop(self) -> None:
        """Stop refreshing (the lease then expires on its own)."""
        if self._task is not None:
            self._task.cancel()
        self.etcd._leases.discard(self)

    async def revoke(self) -> None:
        """Stop refreshing and delete the lease (and the keys bound to it) now."""
        self.stop()
        if not self.lost.is_set():
            await self.etcd._revoke(self.id)

    async def _keep_alive(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.ttl / 3
        failing = False
        delay = interval
        while True:
            await asyncio.sleep(max(0.0, min(delay, self.expires - loop.time())))
            sent = loop.time()
            try:
                async with asyncio.timeout(max(0.05, min(interval, self.expires - sent))):
                    left = await self.etcd._refresh(self.id)
            except (TimeoutError, aetcd_errors.ClientError, EtcdAuthFailed) as exc:
                why = str(exc) or type(exc).__name__
                if loop.time() >= self.expires:
                    return self._lose(f"no refresh within its {self.ttl}s TTL ({why})")
                if not failing:
                    log.warning("etcd lease %x: refresh failing (%s)", self.id, why)
                failing = True
                delay = min(RETRY_REFRESH, interval)
                continue
            if left <= 0:
                return self._lose("etcd says it expired")
            self.expires = sent + left
            if failing:
                log.info("etcd lease %x: refreshed again", self.id)
            failing = False
            delay = interval

    def _lose(self, why: str) -> None:
        log.error("etcd lease %x lost: %s", self.id, why)
        self.lost.set()
        self.etcd._leases.discard(self)
