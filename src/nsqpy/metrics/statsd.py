"""nsqd's statsd push (NSQ's ``statsdLoop``): its flags, key names, UDP packets and timing.

Every ``--statsd-interval`` nsqd sends ``<prefix><key>:<value>|c`` (counters: the change
since the previous push) and ``|g`` (gauges) lines over UDP to ``--statsd-address``:

- ``topic.<t>.message_count`` and ``.message_bytes`` (c), ``.depth``, ``.backend_depth`` (g),
  ``.e2e_processing_latency_<pct>`` (g, when percentiles are configured);
- ``topic.<t>.channel.<c>.message_count``, ``.requeue_count``, ``.timeout_count`` (c),
  ``.depth``, ``.backend_depth``, ``.in_flight_count``, ``.deferred_count``, ``.clients`` (g),
  ``.e2e_processing_latency_<pct>`` (g);
- in a cluster, per partition held: ``topic.<t>.partition.<p>.leader`` (1 where this nsqd
  leads it), ``.isr``, ``.committed_offset``, ``.end_offset`` (g);
- with ``--statsd-mem-stats``: ``mem.heap_objects``, ``mem.heap_idle_bytes``,
  ``mem.heap_in_use_bytes``, ``mem.heap_released_bytes``, ``mem.gc_pause_usec_100|99|95``,
  ``mem.next_gc_bytes`` (g) and ``mem.gc_runs`` (c).

``--statsd-prefix`` (``nsq.%s``) has ``%s`` replaced by ``<broadcast address>:<HTTP port>``
with ``.`` and ``:`` turned into ``_``, and gets a trailing ``.``. Lines are packed whole into
packets of at most ``--statsd-udp-packet-size`` bytes (a longer line goes alone) and the
packets are spread over the interval minus one second, as NSQ's writers do.
``--statsd-exclude-ephemeral`` skips ``#ephemeral`` topics and channels. ``StatsdEmitter`` is
given what it reads (the broker, the options and the HTTP port) by nsqd's server; reads the
broker through ``broker.stats``; imports asyncio and socket, never the servers' modules.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterable
from typing import Any

from nsqpy.broker.broker import Broker
from nsqpy.broker.stats import memory_stats, stats
from nsqpy.options import NsqdOptions

log = logging.getLogger("nsqpy.nsqd")

MEM_GAUGES = (
    "heap_objects",
    "heap_idle_bytes",
    "heap_in_use_bytes",
    "heap_released_bytes",
    "gc_pause_usec_100",
    "gc_pause_usec_99",
    "gc_pause_usec_95",
    "next_gc_bytes",
)
EPHEMERAL = "#ephemeral"


def host_key(host_port: str) -> str:
    """NSQ's statsd.HostKey: ``.`` and ``:`` become ``_``."""
    return host_port.replace(".", "_").replace(":", "_")


def statsd_prefix(template: str, broadcast_address: str, http_port: int) -> str:
    """The key prefix: ``%s`` -> host key of ``address:port``, then a trailing ``.``."""
    if not template:
        return ""
    host = f"[{broadcast_address}]" if ":" in broadcast_address else broadcast_address
    prefix = template.replace("%s", host_key(f"{host}:{http_port}"))
    return prefix if prefix.endswith(".") else prefix + "."


class StatsdCollector:
    """Turns successive /stats documents into statsd lines (counters as differences)."""

    def __init__(self, prefix: str, *, exclude_ephemeral: bool = False) -> None:
        self.prefix = prefix
        self.exclude_ephemeral = exclude_ephemeral
        self._last_topics: dict[str, dict[str, Any]] = {}
        self._last_gc_runs = 0
        self.lines: list[str] = []

    def _incr(self, key: str, value: int) -> None:
        self.lines.append(f"{self.prefix}{key}:{value}|c\n")

    def _gauge(self, key: str, value: int) -> None:
        self.lines.append(f"{self.prefix}{key}:{value}|g\n")

    def _latency(self, key: str, latency: Any) -> None:
        for item in (latency or {}).get("percentiles") or []:
            self._gauge(
                f"{key}.e2e_processing_latency_{item['quantile'] * 100:.0f}", int(item["value"])
            )

    def collect(self, topics: Iterable[dict[str, Any]], mem: dict[str, int] | None) -> list[str]:
        """The lines of one push; remembers the counts for the next one."""
        self.lines = []
        seen: dict[str, dict[str, Any]] = {}
        for topic in topics:
            name = str(topic["topic_name"])
            if self.exclude_ephemeral and name.endswith(EPHEMERAL):
                continue
            seen[name] = topic
            self._topic(topic, self._last_topics.get(name, {}))
        self._last_topics = seen
        if mem is not None:
            for key in MEM_GAUGES:
                self._gauge(f"mem.{key}", int(mem.get(key, 0)))
            runs = int(mem.get("gc_total_runs", 0))
            self._incr("mem.gc_runs", runs - self._last_gc_runs)
            self._last_gc_runs = runs
        return self.lines

    def _topic(self, topic: dict[str, Any], last: dict[str, Any]) -> None:
        key = f"topic.{topic['topic_name']}"
        self._incr(f"{key}.message_count", topic["message_count"] - last.get("message_count", 0))
        self._incr(f"{key}.message_bytes", topic["message_bytes"] - last.get("message_bytes", 0))
        self._gauge(f"{key}.depth", topic["depth"])
        self._gauge(f"{key}.backend_depth", topic["backend_depth"])
        self._latency(key, topic["e2e_processing_latency"])
        for part in topic.get("partitions") or []:
            if "role" not in part:  # (a single nsqd's partitions: no cluster fields)
                continue
            at = f"{key}.partition.{part['partition']}"
            self._gauge(f"{at}.leader", int(part["role"] == "leader"))
            self._gauge(f"{at}.isr", len(part.get("isr") or ()))
            self._gauge(f"{at}.committed_offset", int(part.get("committed_offset") or 0))
            self._gauge(f"{at}.end_offset", int(part["high_watermark"]))
        last_channels = {c["channel_name"]: c for c in last.get("channels") or []}
        for channel in topic["channels"]:
            name = str(channel["channel_name"])
            if self.exclude_ephemeral and name.endswith(EPHEMERAL):
                continue
            self._channel(f"{key}.channel.{name}", channel, last_channels.get(name, {}))

    def _channel(self, key: str, channel: dict[str, Any], last: dict[str, Any]) -> None:
        for count in ("message_count", "requeue_count", "timeout_count"):
            self._incr(f"{key}.{count}", channel[count] - last.get(count, 0))
        for level in ("depth", "backend_depth", "in_flight_count", "deferred_count"):
            self._gauge(f"{key}.{level}", channel[level])
        self._gauge(f"{key}.clients", channel["client_count"])
        self._latency(key, channel["e2e_processing_latency"])


def pack(lines: Iterable[str], packet_size: int) -> list[bytes]:
    """Whole lines into packets of at most ``packet_size`` bytes (NSQ's boundary writer)."""
    packets: list[bytes] = []
    current = bytearray()
    for line in lines:
        data = line.encode()
        if current and len(current) + len(data) > packet_size:
            packets.append(bytes(current))
            current.clear()
        current += data
        if len(current) >= packet_size:
            packets.append(bytes(current))
            current.clear()
    if current:
        packets.append(bytes(current))
    return packets


class StatsdEmitter:
    """The push loop of one nsqd; ``run()`` until cancelled. ``http_port`` is the port its
    HTTP listener got (the key prefix names it unless ``--broadcast-http-port`` is set)."""

    def __init__(self, broker: Broker, opts: NsqdOptions, http_port: int) -> None:
        self.broker = broker
        self.opts = opts
        port = opts.broadcast_http_port or http_port
        self.collector = StatsdCollector(
            statsd_prefix(opts.statsd_prefix, opts.broadcast_address, port),
            exclude_ephemeral=opts.statsd_exclude_ephemeral,
        )

    async def run(self) -> None:
        interval = self.opts.statsd_interval_ms / 1000
        loop = asyncio.get_running_loop()
        next_push = loop.time() + interval
        while True:
            await asyncio.sleep(max(0.0, next_push - loop.time()))
            next_push += interval
            try:
                await self.push(spread=max(0.0, interval - 1.0))
            except OSError as exc:
                log.error("STATSD: failed to push to %s - %s", self.opts.statsd_address, exc)

    async def push(self, spread: float = 0.0) -> int:
        """Collect, pack and send one round; returns the number of packets sent."""
        opts = self.opts
        host, _, port = opts.statsd_address.rpartition(":")
        infos = await asyncio.get_running_loop().getaddrinfo(
            host.strip("[]"), int(port), type=socket.SOCK_DGRAM
        )
        family, kind, proto, _, address = infos[0]
        doc = stats(self.broker, include_clients=False, include_mem=False)
        topics: list[dict[str, Any]] = doc["topics"] or []  # type: ignore[assignment]
        mem = memory_stats() if opts.statsd_mem_stats else None
        packets = pack(self.collector.collect(topics, mem), opts.statsd_udp_packet_size)
        log.info("STATSD: pushing stats to %s", opts.statsd_address)
        with socket.socket(family, kind, proto) as sock:
            sock.setblocking(False)
            sock.connect(address)
            for i, packet in enumerate(packets):
                if i and spread:
                    await asyncio.sleep(spread / len(packets))
                try:
                    sock.send(packet)
                except (BlockingIOError, ConnectionRefusedError):
                    pass  # UDP: a full buffer or nobody listening loses the packet, as in NSQ
        return len(packets)
