"""Discovery through nsqlookupd's HTTP ``/lookup`` (SPEC 3.2, 7.4).

``lookup_url`` normalises an address as go-nsq does (``host:port`` -> ``http://host:port``,
path ``/lookup`` when none, ``topic`` added to the query). ``parse_producers`` reads the
reply (also the legacy ``{"data": ...}`` envelope and ``address`` for old lookupds).
``LookupdPoller`` asks one lookupd per round (round-robin, the next on error, at most 3
tries) and hands every producer address to the consumer; timing (jitter, interval) is the
consumer's. Uses aiohttp's client; must not import the consumer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp

from nsqpy.client.errors import ClientError

log = logging.getLogger("nsqpy.client")

ACCEPT = "application/vnd.nsq; version=1.0"


def lookup_url(address: str, topic: str, partition: int = -1) -> str:
    """The ``/lookup?topic=`` URL for a lookupd given as ``host:port`` or a URL (with
    ``metainfo`` for a ``partition`` >= 0: the lookupd then lists each partition's node)."""
    if "://" not in address:
        address = "http://" + address
    parts = urlsplit(address)
    path = parts.path if parts.path not in ("", "/") else "/lookup"
    query = [p for p in parts.query.split("&") if p and not p.startswith("topic=")]
    query.append(urlencode({"topic": topic}))
    if partition >= 0:
        query.append("metainfo=true")
    return urlunsplit((parts.scheme, parts.netloc, path, "&".join(query), ""))


def parse_producers(payload: Any, partition: int = -1) -> list[str]:
    """``host:port`` of every producer in a /lookup reply (``broadcast_address:tcp_port``),
    or of the one listed for ``partition`` (>= 0) in its ``partitions`` map when it has one
    (youzan's lookupd and nsqpy's list each partition's leader there)."""
    if not isinstance(payload, dict):
        raise ClientError(f"lookupd reply is not a JSON object: {str(payload)[:80]}")
    if "producers" not in payload and isinstance(payload.get("data"), dict):
        payload = payload["data"]
    producers = payload.get("producers")
    if not isinstance(producers, list):
        raise ClientError("lookupd reply has no producers list")
    partitions = payload.get("partitions")
    if partition >= 0 and isinstance(partitions, dict):
        found = partitions.get(str(partition))
        producers = [found] if found is not None else []
    out: list[str] = []
    for p in producers:
        if not isinstance(p, dict):
            continue
        host = p.get("broadcast_address") or p.get("address")
        port = p.get("tcp_port")
        if isinstance(host, str) and host and isinstance(port, int) and port > 0:
            addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            if addr not in out:
                out.append(addr)
    return out


class LookupdPoller:
    """Round-robin queries over several lookupd HTTP addresses."""

    def __init__(
        self,
        addresses: Sequence[str],
        topic: str,
        *,
        timeout: float = 5.0,
        auth_secret: str | None = None,
        partition: int = -1,
    ) -> None:
        if not addresses:
            raise ValueError("LookupdPoller needs at least one lookupd address")
        self.urls = [lookup_url(a, topic, partition) for a in addresses]
        self.partition = partition
        self.timeout = timeout
        self.headers = {"Accept": ACCEPT}
        if auth_secret:  # go-nsq sends its AUTH secret to lookupd too (lookupd_authorization)
            self.headers["Authorization"] = f"Bearer {auth_secret}"
        self._next = 0
        self._session: aiohttp.ClientSession | None = None

    async def query_one(self, url: str) -> list[str]:
        """Producers from one lookupd; a 404 (topic not registered yet) means none."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        async with self._session.get(url, headers=self.headers) as resp:
            if resp.status == 404:
                return []
            if resp.status != 200:
                raise ClientError(f"lookupd {url} answered HTTP {resp.status}")
            text = await resp.text()
        try:
            return parse_producers(json.loads(text), self.partition)
        except json.JSONDecodeError as exc:
            raise ClientError(f"lookupd {url} sent invalid JSON: {exc}") from None

    async def poll(self) -> list[str]:
        """One round: the next lookupd, then the following ones on error (3 tries at most)."""
        tries = min(3, len(self.urls))
        for _ in range(tries):
            url = self.urls[self._next % len(self.urls)]
            self._next += 1
            try:
                return await self.query_one(url)
            except (aiohttp.ClientError, TimeoutError, ClientError) as exc:
                log.warning("lookupd query %s failed: %s", url, exc)
        return []

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
