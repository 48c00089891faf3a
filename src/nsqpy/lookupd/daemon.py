"""The nsqlookupd daemon in-process: the registry with its TCP V1 and HTTP listeners.

``NsqLookupd(opts)`` then ``await start()`` binds both listeners (port 0 picks a free
port; ``tcp_port``/``http_port`` tell which) and logs ``TCP: listening on host:port`` and
``HTTP: listening on host:port``; ``await stop()`` closes the listeners and every
connection. nsqlookupd keeps no state on disk. Imports asyncio, aiohttp and the lookupd
modules; never nsqd or the broker.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from nsqpy import NSQ_VERSION
from nsqpy.cluster.tls import INSECURE, ClusterTls, serve_protocol
from nsqpy.flags import listen_host_port
from nsqpy.flags.cluster import require_cluster_extra
from nsqpy.lookupd.http import make_app
from nsqpy.lookupd.options import NsqLookupdOptions
from nsqpy.lookupd.registry import Registry
from nsqpy.lookupd.tcp import V1Connection
from nsqpy.metrics.lookupd_metrics import ClusterFigures

if TYPE_CHECKING:
    from nsqpy.lookupd.cluster import LookupdCluster

log = logging.getLogger("nsqpy.lookupd")


class NsqLookupd:
    """One nsqlookupd: ``registry`` plus the servers around it."""

    def __init__(self, opts: NsqLookupdOptions, clock: Callable[[], int] | None = None) -> None:
        self.opts = opts
        self.clock: Callable[[], int] = clock or time.time_ns
        self._registry = Registry(
            clock=self.clock,
            inactive_producer_timeout_ms=opts.inactive_producer_timeout_ms,
            tombstone_lifetime_ms=opts.tombstone_lifetime_ms,
        )
        self._connections: set[V1Connection] = set()
        self.command_counts: Counter[str] = Counter()  # V1 commands received (for /metrics)
        self.hostname = socket.gethostname()
        self._tcp_server: asyncio.Server | None = None
        self._http_runner: web.AppRunner | None = None
        self._tcp_port = 0
        self._http_port = 0
        self.tls: ClusterTls | None = None  # (``start``: from the --cluster-tls-* flags)
        self._rpc_server: asyncio.Server | None = None  # (a secure cluster's --rpc-address)
        self._rpc_port = 0
        self.rpc_connections = 0  # from the cluster's daemons, over mutual TLS (/metrics)
        # With --etcd-endpoints: the cluster side (view, coordinator; lookupd.cluster).
        # (imported only then: the etcd client and gRPC cost memory a single lookupd does
        # not need)
        self.cluster: LookupdCluster | None = None
        if opts.etcd_endpoints:
            require_cluster_extra()
            from nsqpy.lookupd.cluster import LookupdCluster

            self.cluster = LookupdCluster(opts)

    @property
    def registry(self) -> Registry:
        return self._registry

    @property
    def connections(self) -> set[V1Connection]:
        return self._connections

    def cluster_figures(self) -> ClusterFigures | None:
        cluster = self.cluster
        if cluster is None or cluster.view is None:
            return None
        coordinator = cluster.coordinator
        latency = cluster.etcd.latency.snapshot() if cluster.etcd is not None else {}
        if coordinator is None:
            return ClusterFigures(cluster.view.snapshot(), False, 0, 0, etcd_latency=latency)
        return ClusterFigures(
            cluster.view.snapshot(),
            cluster.leading,
            coordinator.changes_applied,
            coordinator.compacted,
            coordinator.elections,
            coordinator.isr_shrinks,
            coordinator.isr_expands,
            etcd_latency=latency,
        )

    @property
    def tcp_port(self) -> int:
        """The bound TCP port (0 before ``start``)."""
        return self._tcp_port

    @property
    def http_port(self) -> int:
        """The bound HTTP port (0 before ``start``)."""
        return self._http_port

    def identify_reply(self) -> dict[str, object]:
        """What an IDENTIFY is answered with (nsqd uses broadcast_address and http_port; in
        a secure cluster ``rpc_port``, where an nsqd reads this lookupd's HTTP API over
        mutual TLS)."""
        return {
            "tcp_port": self.opts.broadcast_tcp_port or self._tcp_port,
            "http_port": self.opts.broadcast_http_port or self._http_port,
            **({"rpc_port": self._rpc_port} if self._rpc_port else {}),
            "version": NSQ_VERSION,
            "broadcast_address": self.opts.broadcast_address,
            "hostname": self.hostname,
            "partitions": True,  # (nsqpy's PARTITIONS taken: an nsqpy nsqd sends it)
        }

    async def start(self) -> None:
        """Bind TCP then HTTP; on failure nothing stays bound."""
        tcp_host, tcp_port = listen_host_port("tcp-address", self.opts.tcp_address)
        http_host, http_port = listen_host_port("http-address", self.opts.http_address)
        self.tls = ClusterTls.from_options(self.opts)  # (nsqd registers over mutual TLS)
        if self.tls is None and self.cluster is not None:
            log.warning(INSECURE)
        self._tcp_server = await serve_protocol(
            lambda: V1Connection(self), tcp_host, tcp_port, self.tls, "TCP", log,
            reuse_address=True,
        )  # fmt: skip
        self._tcp_port = self._tcp_server.sockets[0].getsockname()[1]
        log.info("TCP: listening on %s:%d", tcp_host, self._tcp_port)
        try:
            cluster_api = None
            if self.cluster is not None:
                from nsqpy.lookupd.cluster_http import ClusterHttpApi

                cluster_api = ClusterHttpApi(self.cluster, self._registry)
            runner = web.AppRunner(make_app(self, cluster_api), access_log=None)
            await runner.setup()
            self._http_runner = runner
            site = web.TCPSite(runner, http_host, http_port, reuse_address=True)
            await site.start()
            if self.cluster is not None and self.tls is not None:
                # the same API where the cluster's daemons call it, over mutual TLS
                rpc_host, rpc_port = listen_host_port("rpc-address", self.opts.rpc_address)
                assert runner.server is not None  # (set up)
                self._rpc_server = await serve_protocol(
                    runner.server, rpc_host, rpc_port, self.tls, "RPC", log,
                    on_secured=self._rpc_connected, reuse_address=True,
                )  # fmt: skip
                self._rpc_port = self._rpc_server.sockets[0].getsockname()[1]
                log.info("RPC: listening on %s:%d", rpc_host, self._rpc_port)
        except BaseException:
            await self.stop()
            raise
        self._http_port = int(runner.addresses[0][1])
        log.info("HTTP: listening on %s:%d", http_host, self._http_port)
        if self.cluster is not None:
            try:
                await self.cluster.start(self._tcp_port, self._http_port, self._rpc_port, self.tls)
            except BaseException:
                await self.stop()
                raise
            self._forget_deleted_topics()

    def _forget_deleted_topics(self) -> None:
        """In a cluster, a topic deleted from etcd (through any lookupd) leaves this one's
        registry too: the channels created here by /channel/create (nsqadmin's create form)
        are registrations no nsqd removes. Looked up key by key on each change of the view
        (no snapshot is built for it)."""
        assert self.cluster is not None and self.cluster.view is not None
        view, keys = self.cluster.view, self.cluster.keys
        seen: set[str] = set()  # registered topics etcd has had

        def forget() -> None:
            for topic in self._registry.topics():
                if view.kv(keys.topic_meta(topic)) is not None:
                    seen.add(topic)
                elif topic in seen:
                    seen.discard(topic)
                    self._registry.delete_topic(topic)

        view.listeners.append(forget)

    def _rpc_connected(self) -> None:
        self.rpc_connections += 1

    async def stop(self) -> None:
        """Stop accepting, close every connection (peers leave the registry), stop HTTP;
        in a cluster, leave it first (the coordinator lock passes on at once)."""
        if self.cluster is not None:
            await self.cluster.stop()
        if self._tcp_server is not None:
            self._tcp_server.close()
        for conn in list(self._connections):
            conn.close()
        if self._tcp_server is not None:
            await self._tcp_server.wait_closed()
            self._tcp_server = None
        if self._rpc_server is not None:
            self._rpc_server.close()
            await self._rpc_server.wait_closed()
            self._rpc_server = None
        if self._http_runner is not None:
            await self._http_runner.cleanup()
            self._http_runner = None
        # Let the transports run connection_lost before the loop goes away.
        for _ in range(3):
            if not self._connections:
                break
            await asyncio.sleep(0)
        log.info("nsqlookupd stopped")
