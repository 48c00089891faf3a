"""The HTTP look-ups the tools make: lookupd ``/topics`` and ``/lookup``, nsqd ``/stats``.

As NSQ's ``clusterinfo``: every lookupd is asked and the answers are united; the call
fails only when every address failed. Replies may be V1 (bare JSON) or the legacy
``{"data": ...}`` envelope. Addresses are ``host:port`` or ``http://host:port``.
Uses aiohttp's client; must not import the servers.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

import aiohttp

from nsqpy.tools.common import ToolError, describe

log = logging.getLogger("nsqpy.tools")

ACCEPT = "application/vnd.nsq; version=1.0"


class HttpLookups:
    """A small HTTP client with NSQ's two timeouts (connect, whole request), in seconds."""

    def __init__(self, connect_timeout: float = 2.0, request_timeout: float = 5.0) -> None:
        self.timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def get_json(self, url: str, *, not_found_ok: bool = False) -> Any:
        """GET ``url`` and decode the JSON (unwrapping ``data``); ``None`` for an allowed 404."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        async with self._session.get(url, headers={"Accept": ACCEPT}) as resp:
            body = await resp.read()
            if resp.status == 404 and not_found_ok:
                return None
            if resp.status != 200:
                raise ToolError(f"{url} answered HTTP {resp.status}: {body[:100]!r}")
        try:
            payload = json.loads(body)
        except ValueError as exc:
            raise ToolError(f"{url} sent invalid JSON: {exc}") from None
        if isinstance(payload, dict) and "data" in payload and "status_code" in payload:
            payload = payload["data"]
        return payload

    async def _each(self, urls: Sequence[str], not_found_ok: bool = False) -> list[Any]:
        results = await asyncio.gather(
            *(self.get_json(u, not_found_ok=not_found_ok) for u in urls), return_exceptions=True
        )
        good: list[Any] = []
        errors: list[str] = []
        for url, result in zip(urls, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, (ToolError, aiohttp.ClientError, TimeoutError, OSError)):
                    raise result
                errors.append(f"{url}: {describe(result)}")
            else:
                good.append(result)
        if errors and not good:
            raise ToolError("; ".join(errors))
        for error in errors:
            log.warning("lookup failed: %s", error)
        return good

    async def lookupd_topics(self, lookupd: Sequence[str]) -> list[str]:
        """Every topic any lookupd knows (``GET /topics``), sorted."""
        try:
            replies = await self._each([base_url(a) + "/topics" for a in lookupd])
        except ToolError as exc:
            raise ToolError(f"could not retrieve topic list: {exc}") from None
        topics: set[str] = set()
        for reply in replies:
            names = reply.get("topics") if isinstance(reply, dict) else None
            topics.update(t for t in names or [] if isinstance(t, str))
        return sorted(topics)

    async def lookupd_producers(self, lookupd: Sequence[str], topic: str) -> list[str]:
        """``host:http_port`` of every nsqd that lookupd says has ``topic`` (``GET /lookup``)."""
        query = "/lookup?" + urlencode({"topic": topic})
        replies = await self._each([base_url(a) + query for a in lookupd], not_found_ok=True)
        out: list[str] = []
        for reply in replies:
            producers = reply.get("producers") if isinstance(reply, dict) else None
            for p in producers or []:
                address = _http_address(p)
                if address and address not in out:
                    out.append(address)
        return out

    async def nsqd_topic_stats(self, nsqd_http: str, topic: str) -> dict[str, Any] | None:
        """The ``topic`` entry of one nsqd's ``/stats`` (without clients), or None."""
        query = "/stats?" + urlencode(
            {"format": "json", "topic": topic, "include_clients": "false"}
        )
        reply = await self.get_json(base_url(nsqd_http) + query)
        topics = reply.get("topics") if isinstance(reply, dict) else None
        for entry in topics or []:
            if isinstance(entry, dict) and entry.get("topic_name") == topic:
                return entry
        return None


def base_url(address: str) -> str:
    """``host:port`` -> ``http://host:port``; a URL is kept (without a trailing slash)."""
    address = address.rstrip("/")
    return address if "://" in address else "http://" + address


def _http_address(producer: Any) -> str:
    if not isinstance(producer, dict):
        return ""
    host = producer.get("broadcast_address") or producer.get("address")
    port = producer.get("http_port")
    if not isinstance(host, str) or not host or not isinstance(port, int):
        return ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
