"""What nsqadmin knows of the cluster, asked afresh over HTTP for every request.

Owns the upstream calls of SPEC 4: lookupd ``/topics``, ``/channels``, ``/lookup``,
``/nodes``, ``/topic/*``, ``/channel/*``; nsqd ``/info``, ``/stats?format=json`` and the
``/topic/*`` and ``/channel/*`` actions. Either lookupd addresses or a static nsqd list is
configured. Every query fans out to all nodes at once and keeps going when some fail: the
failures are collected in ``Errors`` (shown as the API's ``"WARNING: ..."`` message), and
only when every node asked failed is ``AllFailed`` raised (the API's 502 UPSTREAM_ERROR).
An nsqpy cluster member's topic keeps its per-partition roles (``partitions``). Imports the
upstream client and the pure stats and partitions shapes; never nsqd or lookupd code.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from nsqpy.errors import NsqError
from nsqpy.nsqadmin.partitions import node_partitions
from nsqpy.nsqadmin.stats import (
    Json,
    Producer,
    aggregate_channel,
    as_dict,
    as_int,
    as_list,
    as_str,
    mark_out_of_date,
    merge_lookupd_nodes,
    node_topic,
    producer_from_info,
    producer_from_peer,
)
from nsqpy.nsqadmin.upstream import Upstream, UpstreamError, endpoint

T = TypeVar("T")


class AllFailed(UpstreamError):
    """Every upstream asked failed (the API answers 502 ``UPSTREAM_ERROR: ...``)."""


class NotFound(NsqError):
    """The topic, channel or node asked for does not exist (404 with ``code``)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class Errors:
    """Failures of some upstreams during one request, in the order seen."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, *messages: str) -> None:
        self.items.extend(m for m in messages if m and m not in self.items)

    def warning(self) -> str:
        """NSQ's ``message`` field: "" or ``WARNING: a; b``."""
        return "WARNING: " + "; ".join(self.items) if self.items else ""


async def fan_out(
    addresses: Sequence[str], call: Callable[[str], Awaitable[T]], errors: Errors, what: str
) -> list[tuple[str, T]]:
    """``call`` on every address concurrently; failures of some go to ``errors``.

    When all of them failed: NotFound if they all answered the same 404 ``*_NOT_FOUND``
    (the thing does not exist), else AllFailed naming every failure.
    """
    results = await asyncio.gather(*(call(a) for a in addresses), return_exceptions=True)
    ok: list[tuple[str, T]] = []
    failed: list[UpstreamError] = []
    for address, result in zip(addresses, results, strict=True):
        if isinstance(result, UpstreamError):
            failed.append(result)
        elif isinstance(result, BaseException):
            raise result
        else:
            ok.append((address, result))
    if addresses and not ok:
        codes = {(e.status, e.code) for e in failed}
        if len(codes) == 1 and failed[0].status == 404 and failed[0].code.endswith("_NOT_FOUND"):
            raise NotFound(failed[0].code)  # every node agrees the thing does not exist
        raise AllFailed(f"failed to query any {what}: " + "; ".join(map(str, failed)))
    errors.add(*map(str, failed))
    return ok


class Cluster:
    """The cluster as seen through ``lookupd`` addresses or a static ``nsqd`` list."""

    def __init__(self, upstream: Upstream, lookupd: list[str], nsqd: list[str]) -> None:
        self.upstream = upstream
        self.lookupd = lookupd
        self.nsqd = nsqd

    @property
    def uses_lookupd(self) -> bool:
        return bool(self.lookupd)

    # -- discovery -------------------------------------------------------------------------

    async def topics(self, errors: Errors) -> list[str]:
        """Sorted union of topic names (lookupd /topics, or nsqd /stats)."""
        if self.uses_lookupd:
            replies = await fan_out(self.lookupd, self._lookupd_topics, errors, "nsqlookupd")
        else:
            replies = await fan_out(self.nsqd, self._nsqd_topic_names, errors, "nsqd")
        return sorted({t for _, names in replies for t in names})

    async def _lookupd_topics(self, address: str) -> list[str]:
        doc = await self.upstream.get_object(address, "/topics")
        return [t for t in as_list(doc.get("topics")) if isinstance(t, str)]

    async def _nsqd_topic_names(self, address: str) -> list[str]:
        doc = await self.upstream.get_object(
            address, "/stats", {"format": "json", "include_clients": "false"}
        )
        return [as_str(as_dict(t).get("topic_name")) for t in as_list(doc.get("topics"))]

    async def topic_channels(self, topic: str, errors: Errors) -> list[str]:
        """Channels lookupd has registered for ``topic`` (lookupd mode only)."""

        async def one(address: str) -> list[str]:
            doc = await self.upstream.get_object(address, "/channels", {"topic": topic})
            return [c for c in as_list(doc.get("channels")) if isinstance(c, str)]

        replies = await fan_out(self.lookupd, one, errors, "nsqlookupd")
        return sorted({c for _, names in replies for c in names})

    async def lookupd_topic_producers(self, topic: str, errors: Errors) -> list[Producer] | None:
        """Producers of ``topic`` per lookupd /lookup; None when no lookupd knows the topic."""
        known = False

        async def one(address: str) -> list[Json]:
            nonlocal known
            try:
                doc = await self.upstream.get_object(address, "/lookup", {"topic": topic})
            except UpstreamError as exc:
                if exc.status == 404:
                    return []
                raise
            known = True
            return [as_dict(p) for p in as_list(doc.get("producers"))]

        replies = await fan_out(self.lookupd, one, errors, "nsqlookupd")
        seen: dict[str, Producer] = {}
        for _, peers in replies:
            for peer in peers:
                producer = producer_from_peer(peer)
                if producer is not None:
                    seen.setdefault(producer.node, producer)
        return list(seen.values()) if known else None

    async def producers(self, errors: Errors) -> list[Producer]:
        """Every nsqd: lookupd /nodes merged, or /info + /stats of each configured nsqd."""
        if self.uses_lookupd:

            async def nodes(address: str) -> list[Json]:
                doc = await self.upstream.get_object(address, "/nodes")
                return [as_dict(p) for p in as_list(doc.get("producers"))]

            replies = await fan_out(self.lookupd, nodes, errors, "nsqlookupd")
            return merge_lookupd_nodes(replies)
        replies2 = await fan_out(self.nsqd, self._nsqd_producer, errors, "nsqd")
        return mark_out_of_date([p for _, p in replies2])

    async def _nsqd_producer(self, address: str) -> Producer:
        info, names = await asyncio.gather(
            self.upstream.get_object(address, "/info"), self._nsqd_topic_names(address)
        )
        return producer_from_info(address, info, names)

    async def topic_producers(self, topic: str, errors: Errors) -> list[Producer] | None:
        """The nsqd that have ``topic``; None when no node knows the topic at all."""
        if self.uses_lookupd:
            return await self.lookupd_topic_producers(topic, errors)
        producers = await self.producers(errors)
        having = [p for p in producers if any(t == topic for t, _ in p.topics)]
        return having or None

    # -- stats -----------------------------------------------------------------------------

    async def node_stats(
        self,
        producers: Sequence[Producer],
        errors: Errors,
        *,
        topic: str = "",
        channel: str = "",
        include_clients: bool = True,
    ) -> list[Json]:
        """Per-node TopicStats (channels and clients inside) of every producer."""
        params = {"format": "json"}
        if topic:
            params["topic"] = topic
        if channel:
            params["channel"] = channel
        if not include_clients:
            params["include_clients"] = "false"
        by_address = {p.http_address: p for p in producers}
        now_s = int(time.time())

        async def one(address: str) -> list[Json]:
            doc = await self.upstream.get_object(address, "/stats", params)
            p = by_address[address]
            topics = [_node_topic(p, t, now_s) for t in as_list(doc.get("topics"))]
            return [
                t for t in topics if t["topic_name"] and (not topic or t["topic_name"] == topic)
            ]

        replies = await fan_out(list(by_address), one, errors, "nsqd")
        return [t for _, topics in replies for t in topics]

    @staticmethod
    def channel_stats(per_node_topics: list[Json]) -> dict[tuple[str, str], Json]:
        """Channels aggregated across nodes, keyed by (topic, channel)."""
        groups: dict[tuple[str, str], list[Json]] = {}
        for t in per_node_topics:
            for c in t["channels"]:
                groups.setdefault((t["topic_name"], c["channel_name"]), []).append(c)
        return {
            key: aggregate_channel(key[0], key[1], group) for key, group in sorted(groups.items())
        }

    # -- actions ---------------------------------------------------------------------------

    async def post_all(
        self,
        addresses: Sequence[str],
        path: str,
        params: dict[str, str],
        errors: Errors,
        what: str,
        *,
        required: bool = True,
    ) -> None:
        """POST an action to every address; partial failure is collected, total failure
        raised (or, when not ``required``, collected as well)."""

        async def one(address: str) -> None:
            await self.upstream.post(address, path, params)

        try:
            await fan_out(addresses, one, errors, what)
        except (AllFailed, NotFound) as exc:
            if required:
                raise
            errors.add(f"{what} {path}: {exc}")

    async def producer_action(
        self, topic: str, path: str, params: dict[str, str], errors: Errors
    ) -> None:
        """``/topic/<x>`` or ``/channel/<x>`` on every nsqd that has the topic."""
        producers = await self.topic_producers(topic, errors)
        if producers is None:
            raise NotFound("TOPIC_NOT_FOUND")
        await self.post_all([p.http_address for p in producers], path, params, errors, "nsqd")

    async def create_topic_channel(self, topic: str, channel: str, errors: Errors) -> None:
        """On every lookupd (and the channel on producers); in nsqd mode on every nsqd."""
        if not self.uses_lookupd:
            await self.post_all(self.nsqd, "/topic/create", {"topic": topic}, errors, "nsqd")
            if channel:
                params = {"topic": topic, "channel": channel}
                await self.post_all(self.nsqd, "/channel/create", params, errors, "nsqd")
            return
        # (``implicit``: a cluster's lookupd creates the topic with the cluster's defaults,
        # where NSQ's form names no partitions; any other lookupd ignores it)
        params = {"topic": topic, "implicit": "true"}
        await self.post_all(self.lookupd, "/topic/create", params, errors, "nsqlookupd")
        if channel:
            params = {"topic": topic, "channel": channel}
            await self.post_all(self.lookupd, "/channel/create", params, errors, "nsqlookupd")
            await self._channel_on_producers(topic, params, errors)

    async def _channel_on_producers(
        self, topic: str, params: dict[str, str], errors: Errors
    ) -> None:
        """The new channel on every nsqd that has the topic already. One that does not have
        it yet (a cluster's nodes take up a new topic's partitions a moment after it is
        created: 404 ``TOPIC_NOT_FOUND``) asks lookupd for the topic's channels when it
        does, and creates this one then; any other failure is a warning, as in NSQ."""
        producers = await self.topic_producers(topic, errors) or []

        async def one(address: str) -> None:
            try:
                await self.upstream.post(address, "/channel/create", params)
            except UpstreamError as exc:
                if (exc.status, exc.code) != (404, "TOPIC_NOT_FOUND"):
                    errors.add(f"nsqd {address} /channel/create: {exc}")

        await asyncio.gather(*(one(p.http_address) for p in producers))

    async def coordinator_action(self, path: str, params: dict[str, str]) -> Json:
        """A cluster operation (``/topic/create`` with partitions, ``/topic/partition/*``,
        ``/cluster/node/remove``) on the first lookupd that answers: every cluster lookupd
        forwards it to the coordinator. A refusal is raised as it came (``status``, ``code``),
        every lookupd unreachable as AllFailed."""
        failures = []
        for address in self.lookupd:
            try:
                body = await self.upstream.request("POST", endpoint(address, path, params))
            except UpstreamError as exc:
                if exc.status:  # (answered: the coordinator's refusal)
                    raise
                failures.append(str(exc))
                continue
            try:
                doc = json.loads(body) if body.strip() else {}
            except ValueError:
                doc = {}
            return doc if isinstance(doc, dict) else {}
        raise AllFailed("; ".join(failures) or "no nsqlookupd configured")

    async def delete_topic(self, topic: str, errors: Errors) -> None:
        await self._delete(topic, "/topic/delete", {"topic": topic}, errors)

    async def delete_channel(self, topic: str, channel: str, errors: Errors) -> None:
        await self._delete(topic, "/channel/delete", {"topic": topic, "channel": channel}, errors)

    async def _delete(self, topic: str, path: str, params: dict[str, str], errors: Errors) -> None:
        """The topic's producers first (lookupd forgets them; none: 404), then lookupd (a
        failure there is only a warning), then every nsqd with the topic."""
        producers = await self.topic_producers(topic, errors)
        if producers is None:
            raise NotFound("TOPIC_NOT_FOUND")
        if self.uses_lookupd:
            await self.post_all(self.lookupd, path, params, errors, "nsqlookupd", required=False)
        addresses = [p.http_address for p in producers]
        await self.post_all(addresses, path, params, errors, "nsqd")

    async def tombstone(self, topic: str, producer: Producer, errors: Errors) -> None:
        """lookupd ``/topic/tombstone`` everywhere, then ``/topic/delete`` on that node."""
        if self.uses_lookupd:
            params = {"topic": topic, "node": producer.node}
            await self.post_all(self.lookupd, "/topic/tombstone", params, errors, "nsqlookupd")
        await self.post_all(
            [producer.http_address], "/topic/delete", {"topic": topic}, errors, "nsqd"
        )


def _node_topic(producer: Producer, raw: object, now_s: int) -> Json:
    """One node's TopicStats; in cluster mode with its ``partition_num`` and ``partitions``
    (roles, leader, ISR: ``partitions.node_partitions``)."""
    doc = node_topic(producer.node, producer.hostname, raw, now_s)
    held = node_partitions(producer.node, raw)
    if held is not None:
        doc["partition_num"] = as_int(as_dict(raw).get("partition_num"))
        doc["partitions"] = held
    return doc


def find_producer(producers: list[Producer], node: str) -> Producer | None:
    """The producer whose node id (``broadcast:http_port``) is ``node``."""
    return next((p for p in producers if p.node == node), None)
