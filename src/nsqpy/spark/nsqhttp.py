"""Blocking HTTP calls from Spark's driver and workers to nsqd and nsqlookupd.

Owns one keep-alive connection per nsqd (``NsqdHttp``): the log-read API (watermarks,
offset for a time, a read), publishing (``/mpub?binary=true``, ``/pub?defer=``) and
discovery through nsqlookupd's ``/lookup`` and ``/nodes``. Spark workers run plain
Python processes without an event loop, so this uses ``http.client`` from the standard
library (the log-read API's format and header names from ``nsqpy.protocol.logread``); no
aiohttp, no asyncio, no pyspark. Errors are ``NsqHttpError`` with the status and NSQ's V1
error code.
"""

from __future__ import annotations

import http.client
import json
import ssl
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from nsqpy.errors import NsqError
from nsqpy.protocol.logread import (
    COLUMNS,
    HIGH_WATERMARK_HEADER,
    LOW_WATERMARK_HEADER,
    NEXT_OFFSET_HEADER,
)
from nsqpy.spark.options import TlsOptions

_RETRYABLE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


_HINTS = {
    "TLS_REQUIRED": " (nsqd requires HTTPS: give the source or sink the nsq.ssl.* options)",
    "TLS_CLOSED": " (nsqd closed the TLS connection unanswered: it may require a client "
    "certificate, nsq.ssl.certfile and nsq.ssl.keyfile, of its --tls-root-ca-file)",
}


class NsqHttpError(NsqError):
    """An HTTP call to nsqd or nsqlookupd failed (``status`` 0: no answer at all)."""

    def __init__(self, address: str, path: str, status: int, code: str, doc: Any = None) -> None:
        super().__init__(f"{address}{path}: {status} {code}{_HINTS.get(code, '')}")
        self.address = address
        self.path = path
        self.status = status
        self.code = code
        self.doc = doc


CLUSTER_NODE = "cluster:"  # the node of a cluster's partitions: "cluster:<cluster-id>"


@dataclass(frozen=True)
class Watermarks:
    """One partition's offsets on one nsqd: readable range [low, high), fsynced below durable.

    ``node`` names that nsqd as nsqlookupd does (``broadcast_address:http_port``); for a
    partition of an nsqpy cluster, where every replica has the same offsets, it names the
    cluster (``cluster:<cluster-id>``), so offsets kept by a query stay good when another
    node takes the lead. ``leader``: whether this nsqd leads it (always on a single node);
    a cluster's partitions are read from their leader, up to its committed offset.
    """

    partition: int
    low: int
    high: int
    durable: int
    node: str = ""
    leader: bool = True


@dataclass(frozen=True)
class ReadReply:
    """A /log/read answer: the binary body and the headers that frame it."""

    body: bytes
    next_offset: int
    low: int
    high: int


def split_address(address: str) -> tuple[str, int]:
    """``host:port``, ``http://host:port`` or ``https://host:port`` -> (host, port)."""
    url = urlsplit(address if "://" in address else "http://" + address)
    if url.scheme not in ("http", "https") or not url.hostname or url.port is None:
        raise NsqHttpError(address, "", 0, "BAD_ADDRESS")
    return url.hostname, url.port


# (host, HTTP port) -> nsqd's HTTPS port, as its /info or its TLS_REQUIRED answer says;
# found once per process
_HTTPS_PORTS: dict[tuple[str, int], int] = {}


class NsqdHttp:
    """A keep-alive HTTP/1.1 connection to one nsqd (or nsqlookupd).

    With ``tls``, it speaks HTTPS: to the address itself when it is ``https://...``, else
    to the HTTPS port of the nsqd whose HTTP address it is (nsqd's ``/info`` names it, and
    a plain request to an nsqd with ``--tls-required`` answers 403 with it; that first
    request carries nothing but its path). Without ``tls``, an nsqd that requires TLS is
    refused with NsqHttpError ``TLS_REQUIRED``.
    """

    def __init__(self, address: str, timeout: float = 30.0, tls: TlsOptions | None = None) -> None:
        self.address = address
        self.host, self.port = split_address(address)
        self.timeout = timeout
        self.tls = tls
        self._secure = address.startswith("https://")
        self._context: ssl.SSLContext | None = None
        self._conn: http.client.HTTPConnection | None = None

    def _connect(self) -> http.client.HTTPConnection:
        if self.tls is None and not self._secure:
            return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        if self._context is None:
            self._context = (self.tls or TlsOptions()).context()
        port = self.port if self._secure else self._https_port()
        return http.client.HTTPSConnection(self.host, port, timeout=self.timeout,
                                           context=self._context)  # fmt: skip

    def _https_port(self) -> int:
        key = (self.host, self.port)
        if key not in _HTTPS_PORTS:
            plain = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                plain.request("GET", "/info")
                answer = plain.getresponse()
                status, data = answer.status, answer.read()
            except (OSError, http.client.HTTPException) as exc:
                raise NsqHttpError(self.address, "/info", 0, type(exc).__name__) from exc
            finally:
                plain.close()
            try:
                port = json.loads(data).get("https_port")
            except (ValueError, AttributeError):
                port = None
            if status not in (200, 403) or not isinstance(port, int) or not 0 < port < 65536:
                raise NsqHttpError(self.address, "/info", status, "NO_HTTPS_PORT",
                                   {"message": "nsqd serves no HTTPS (no --tls-cert)"})  # fmt: skip
            _HTTPS_PORTS[key] = port
        return _HTTPS_PORTS[key]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> NsqdHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, path: str, query: dict[str, Any], body: bytes | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body); one reconnect when a kept-alive connection went stale.

        NsqHttpError with status 0 when there is no answer (refused, reset, timed out).
        """
        target = f"{path}?{urlencode(query)}" if query else path
        for attempt in (0, 1):
            fresh = self._conn is None
            try:
                if self._conn is None:
                    self._conn = self._connect()
                self._conn.request(method, target, body=body)
                resp = self._conn.getresponse()
                data = resp.read()
            except _RETRYABLE as exc:
                self.close()
                if fresh and (self.tls is not None or self._secure):
                    # (nsqd ends a TLS connection it refuses at the first read: a client
                    # certificate missing or not of its CA)
                    raise NsqHttpError(self.address, path, 0, "TLS_CLOSED") from exc
                if fresh or attempt:
                    raise NsqHttpError(self.address, path, 0, type(exc).__name__) from exc
                continue
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                raise NsqHttpError(self.address, path, 0, type(exc).__name__) from exc
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        raise AssertionError("unreachable")

    def _json(self, path: str, query: dict[str, Any]) -> tuple[int, Any]:
        status, _, data = self.request("GET", path, query)
        try:
            doc = json.loads(data) if data else None
        except ValueError:
            doc = None
        return status, doc

    def _fail(self, path: str, status: int, doc: Any) -> NsqHttpError:
        code = doc.get("message", "") if isinstance(doc, dict) else ""
        return NsqHttpError(self.address, path, status, str(code) or "UNEXPECTED_REPLY", doc)

    # -- the log-read API --------------------------------------------------------------

    def watermarks(self, topic: str) -> list[Watermarks] | None:
        """Every partition of ``topic`` on this nsqd; None when it has no such topic."""
        status, doc = self._json("/log/watermarks", {"topic": topic})
        if status == 404 and isinstance(doc, dict) and doc.get("message") == "TOPIC_NOT_FOUND":
            return None
        if status != 200 or not isinstance(doc, dict):
            raise self._fail("/log/watermarks", status, doc)
        node = doc.get("node")
        if not isinstance(node, str) or not node or "/" in node:
            node = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        cluster = doc.get("cluster")
        if isinstance(cluster, str) and cluster and "/" not in cluster:
            node = f"{CLUSTER_NODE}{cluster}"
        try:
            return [
                Watermarks(
                    int(p["partition"]),
                    int(p["low"]),
                    int(p["high"]),
                    int(p["durable"]),
                    node,
                    p.get("leader", True) is not False,
                )
                for p in doc["partitions"]
            ]
        except (KeyError, TypeError, ValueError):
            raise self._fail("/log/watermarks", 200, doc) from None

    def offset_for_time(self, topic: str, partition: int, ts_ms: int) -> int:
        """The first offset published at or after ``ts_ms``."""
        query = {"topic": topic, "partition": partition, "ts_ms": ts_ms}
        status, doc = self._json("/log/offset_for_time", query)
        if status != 200 or not isinstance(doc, dict) or not isinstance(doc.get("offset"), int):
            raise self._fail("/log/offset_for_time", status, doc)
        return int(doc["offset"])

    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        fmt: str = COLUMNS,
    ) -> ReadReply:
        """Records from ``offset`` in the ``format`` asked for (``columns`` or ``batches``);
        NsqHttpError OFFSET_OUT_OF_RANGE carries low/high in its doc."""
        query = {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "max_count": max_count,
            "max_bytes": max_bytes,
        }
        if fmt != COLUMNS:
            query["format"] = fmt
        status, headers, data = self.request("GET", "/log/read", query)
        if status != 200:
            try:
                doc = json.loads(data)
            except ValueError:
                doc = None
            raise self._fail("/log/read", status, doc)
        try:
            return ReadReply(
                data,
                int(headers[NEXT_OFFSET_HEADER.lower()]),
                int(headers[LOW_WATERMARK_HEADER.lower()]),
                int(headers[HIGH_WATERMARK_HEADER.lower()]),
            )
        except (KeyError, ValueError):
            raise self._fail("/log/read", status, None) from None

    # -- publishing --------------------------------------------------------------------

    def _post(self, path: str, query: dict[str, Any], body: bytes) -> None:
        status, _, data = self.request("POST", path, query, body)
        if status != 200:
            try:
                doc = json.loads(data)
            except ValueError:
                doc = {"message": data[:80].decode(errors="replace")}
            raise self._fail(path, status, doc)

    def mpub(self, topic: str, bodies: Sequence[bytes], partition_key: bytes = b"") -> None:
        """Publish ``bodies`` in one binary MPUB; returns once nsqd has written them.

        A partition key goes as the ``partition_key`` query argument (nsqd without keyed
        partitions ignores it: a topic of one partition).
        """
        pack = struct.Struct(">i").pack
        parts = [pack(len(bodies))]
        for body in bodies:
            parts.append(pack(len(body)))
            parts.append(body)
        query: dict[str, Any] = {"topic": topic, "binary": "true"}
        if partition_key:
            query["partition_key"] = partition_key
        self._post("/mpub", query, b"".join(parts))

    def pub(self, topic: str, body: bytes, defer_ms: int = 0) -> None:
        """Publish one message, deferred by ``defer_ms`` when > 0 (HTTP DPUB)."""
        query: dict[str, Any] = {"topic": topic}
        if defer_ms > 0:
            query["defer"] = defer_ms
        self._post("/pub", query, body)

    # -- nsqlookupd ----------------------------------------------------------------------

    def lookup(self, topic: str, partition: int | None = None) -> list[str]:
        """nsqlookupd: the HTTP addresses of the nsqd that have ``topic`` ([] when none);
        with ``partition``, of a cluster lookupd, the one leading it."""
        query: dict[str, Any] = {"topic": topic}
        if partition is not None:
            query["partition"] = partition
        status, doc = self._json("/lookup", query)
        if status == 404:
            return []
        if status != 200 or not isinstance(doc, dict):
            raise self._fail("/lookup", status, doc)
        return _producer_addresses(doc.get("producers"))

    def nodes(self) -> list[str]:
        """nsqlookupd: the HTTP addresses of every nsqd registered."""
        status, doc = self._json("/nodes", {})
        if status != 200 or not isinstance(doc, dict):
            raise self._fail("/nodes", status, doc)
        return _producer_addresses(doc.get("producers"))


def _producer_addresses(producers: Any) -> list[str]:
    out: list[str] = []
    for p in producers if isinstance(producers, list) else []:
        if not isinstance(p, dict):
            continue
        host, port = p.get("broadcast_address"), p.get("http_port")
        if isinstance(host, str) and host and isinstance(port, int) and port > 0:
            addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            if addr not in out:
                out.append(addr)
    return out


def lookup_nsqd(lookupd: Sequence[str], topic: str | None, timeout: float) -> list[str]:
    """nsqd HTTP addresses from every lookupd: those with ``topic``, or all nodes if None."""
    found: list[str] = []
    errors: list[NsqHttpError] = []
    for address in lookupd:
        with NsqdHttp(address, timeout) as conn:
            try:
                addrs = conn.lookup(topic) if topic is not None else conn.nodes()
            except NsqHttpError as exc:
                errors.append(exc)
                continue
        found.extend(a for a in addrs if a not in found)
    if errors and len(errors) == len(lookupd):
        raise errors[0]
    return found
