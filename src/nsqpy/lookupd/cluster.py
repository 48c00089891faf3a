"""nsqlookupd in a cluster: its etcd connection, view and coordinator, and request forwarding.

With ``--etcd-endpoints`` an nsqlookupd reads the cluster from etcd (``ClusterView``),
campaigns for the coordinator lock and, while it holds it, coordinates
(``nsqpy.cluster.coordinator``). A write request (topic create, delete, meta update) that
reaches a lookupd that does not coordinate is forwarded to the one that does, and its
answer relayed (Youzan's lookupd refuses instead; nsqpy forwards, so any lookupd address
works for every request). Imports asyncio, aiohttp and the cluster package; never nsqd.
"""

from __future__ import annotations

import logging
import socket

import aiohttp
from aiohttp import web

from nsqpy.cluster.coordinator import Coordinator, CoordinatorSettings
from nsqpy.cluster.etcd import Etcd, EtcdUnavailable
from nsqpy.cluster.keys import Keys
from nsqpy.cluster.model import LookupdInfo
from nsqpy.cluster.tls import ClusterTls, coordinator_url
from nsqpy.cluster.view import ClusterView
from nsqpy.errors import ConfigError
from nsqpy.flags import etcd_endpoints
from nsqpy.httpapi import HttpError
from nsqpy.lookupd.options import NsqLookupdOptions

log = logging.getLogger("nsqpy.lookupd")

FORWARDED_HEADER = "X-Nsqpy-Forwarded"  # a forwarded request is never forwarded again
TAKEOVER_WAIT_S = 5.0  # at most, for this lookupd's own takeover once etcd names it


def lookupd_id(address: str, tcp_port: int, http_port: int) -> str:
    """Youzan's lookupd id form ``ip:port:tcpport:nsqlookup`` (nsqpy has no lookupd rpc
    port: the HTTP port stands in its place)."""
    return f"{address}:{http_port}:{tcp_port}:nsqlookup"


class LookupdCluster:
    """The cluster side of one nsqlookupd (see the module docstring)."""

    def __init__(self, opts: NsqLookupdOptions) -> None:
        self.opts = opts
        self.keys = Keys(opts.cluster_id)
        self.settings = CoordinatorSettings(
            lease_ttl_s=opts.etcd_lease_ttl_ms / 1000,
            tick_s=min(1.0, opts.etcd_lease_ttl_ms / 3000),
            repair_delay_ns=opts.replica_repair_delay_ms * 1_000_000,
            emergency_delay_ns=min(10_000, opts.replica_repair_delay_ms) * 1_000_000,
            default_partitions=opts.default_partitions,
            default_replicas=opts.default_replicas,
            rebalance_interval_ns=opts.rebalance_interval_ms * 1_000_000,
            compact_interval_ns=opts.etcd_compact_interval_ms * 1_000_000,
        )
        self.etcd: Etcd | None = None
        self.view: ClusterView | None = None
        self.coordinator: Coordinator | None = None
        self.me: LookupdInfo | None = None
        self._http: aiohttp.ClientSession | None = None
        self.tls: ClusterTls | None = None

    async def start(
        self, tcp_port: int, http_port: int, rpc_port: int = 0, tls: ClusterTls | None = None
    ) -> None:
        """Connect, load the view, start campaigning; ConfigError when etcd is unreachable.
        With ``tls`` (a secure cluster), this lookupd is called by the others at its
        ``rpc_port``, and calls the coordinator at its own, over mutual TLS."""
        self.tls = tls
        address = self.opts.broadcast_address or socket.gethostname()
        tcp_port = self.opts.broadcast_tcp_port or tcp_port
        http_port = self.opts.broadcast_http_port or http_port
        self.me = LookupdInfo(
            lookupd_id(address, tcp_port, http_port), address, tcp_port, http_port
        )
        try:
            self.etcd = await Etcd.connect(
                etcd_endpoints(self.opts.etcd_endpoints), security=self.opts.etcd_security()
            )
            self.view = ClusterView(self.etcd, self.keys)
            await self.view.start()
        except EtcdUnavailable as exc:
            await self.stop()
            raise ConfigError(f"--etcd-endpoints: etcd unreachable: {exc}") from exc
        self.coordinator = Coordinator(
            self.etcd, self.view, self.me, f"{address}:{http_port}", self.settings,
            rpc_address=f"{address}:{rpc_port}" if tls is not None and rpc_port else "",
        )  # fmt: skip
        await self.coordinator.start()
        log.info("cluster %s: joined as lookupd %s", self.keys.cluster_id, self.me.id)

    async def stop(self) -> None:
        if self.coordinator is not None:
            await self.coordinator.stop()
        if self.view is not None:
            await self.view.stop()
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self.etcd is not None:
            await self.etcd.close()

    @property
    def leading(self) -> bool:
        return self.coordinator is not None and self.coordinator.leading

    async def coordinates(self) -> bool:
        """Whether this lookupd coordinates, to act on a write rather than forward it:
        when etcd names it while its campaign is under way, once that is done (at most
        ``TAKEOVER_WAIT_S``; a write it then does not coordinate is answered 503
        MISSING_COORDINATOR, never forwarded to itself)."""
        if self.coordinator is None:
            return False
        return await self.coordinator.takeover(TAKEOVER_WAIT_S)

    async def forward(self, request: web.Request) -> web.Response:
        """Send ``request`` to the coordinator and answer what it answers."""
        assert self.view is not None
        target = self.view.coordinator
        if target is None or request.headers.get(FORWARDED_HEADER):
            raise HttpError(503, "MISSING_COORDINATOR")
        if self.me is not None and target.id == self.me.id:  # (its takeover did not come)
            raise HttpError(503, "MISSING_COORDINATOR")
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15))
        url = coordinator_url(target, self.tls) + str(request.rel_url)
        headers = {FORWARDED_HEADER: "1"}
        accept = request.headers.get("Accept")
        if accept:
            headers["Accept"] = accept
        try:
            tls = self.tls.client if self.tls is not None and url.startswith("https:") else True
            async with self._http.request(request.method, url, headers=headers, ssl=tls) as resp:
                body = await resp.read()
                out = web.Response(status=resp.status, body=body)
                for name in ("Content-Type", "X-NSQ-Content-Type"):
                    if name in resp.headers:
                        out.headers[name] = resp.headers[name]
                return out
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("cluster: forwarding %s to %s failed: %s", request.path, url, exc)
            raise HttpError(503, "MISSING_COORDINATOR") from exc
