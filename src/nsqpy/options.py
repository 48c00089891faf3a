"""Options of the daemons: one flat dataclass per daemon whose fields mirror NSQ's flags.

Defaults live here and only here. Durations are kept in milliseconds (``*_ms``) so the
wire and HTTP layers can convert them to NSQ's units (ms in IDENTIFY, ns in /info and
/config); listen addresses are read here too. This module imports only the standard
library and ``nsqpy.errors``.
"""

from __future__ import annotations

import socket
import zlib
from dataclasses import dataclass, field
from hashlib import md5

from nsqpy.errors import ConfigError


def default_node_id() -> int:
    """NSQ's default --node-id: crc32 of the md5 of the hostname, modulo 1024."""
    digest = md5(socket.gethostname().encode(), usedforsecurity=False).digest()
    return zlib.crc32(digest) % 1024


def _go_split_host_port(address: str) -> tuple[str, str] | None:
    """Go's net.SplitHostPort: (host, port), or None where Go reports an error."""
    if address.startswith("["):
        close = address.find("]")
        if close < 0 or address[close + 1 : close + 2] != ":":
            return None
        host, port = address[1:close], address[close + 2 :]
        return (host, port) if ":" not in port else None
    host, sep, port = address.rpartition(":")
    if not sep or ":" in host:
        return None
    return host, port


def listen_address(flag: str, address: str) -> tuple[str, int] | str:
    """(host, port) of a TCP address, or the path of a unix socket, as nsqd 1.3.0 reads
    ``--tcp-address``/``--http-address``: what Go's SplitHostPort cannot split (and
    anything with a ``/``) is a unix socket path. A host:port whose port is not a number
    in 0..65535 raises ConfigError."""
    parts = None if "/" in address else _go_split_host_port(address)
    if parts is None:
        return address
    host, port = parts
    if not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ConfigError(
            f"--{flag}={address!r}: {port!r} is not a port (want host:port or a unix socket path)"
        )
    return host or "0.0.0.0", int(port)


@dataclass
class NsqdOptions:
    """nsqd's flags (SPEC 5.1), with NSQ's defaults."""

    node_id: int = field(default_factory=default_node_id)
    log_level: str = "info"
    log_prefix: str = "[nsqd] "
    tcp_address: str = "0.0.0.0:4150"
    http_address: str = "0.0.0.0:4151"
    https_address: str = "0.0.0.0:4152"
    broadcast_address: str = field(default_factory=socket.gethostname)
    broadcast_tcp_port: int = 0
    broadcast_http_port: int = 0
    lookupd_tcp_addresses: list[str] = field(default_factory=list)
    auth_http_addresses: list[str] = field(default_factory=list)
    http_client_connect_timeout_ms: int = 2000
    http_client_request_timeout_ms: int = 5000
    data_path: str = ""
    # nsqpy: the bound of an ephemeral (in-memory) topic's buffer, in messages. Durable topics
    # keep every message on disk, so this no longer decides when messages go to disk.
    mem_queue_size: int = 10000
    max_bytes_per_file: int = 104857600
    sync_every: int = 2500
    sync_timeout_ms: int = 2000
    # nsqpy: "always" acknowledges a publish only after the fsync that covers it.
    sync_always: bool = False
    queue_scan_worker_pool_max: int = 4
    queue_scan_selection_count: int = 20
    queue_scan_interval_ms: int = 100
    msg_timeout_ms: int = 60000
    max_msg_timeout_ms: int = 900000
    max_msg_size: int = 1048576
    max_req_timeout_ms: int = 3600000
    max_body_size: int = 5242880
    max_heartbeat_interval_ms: int = 60000
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 65536
    max_output_buffer_timeout_ms: int = 30000
    min_output_buffer_timeout_ms: int = 25
    output_buffer_timeout_ms: int = 250
    max_channel_consumers: int = 0
    statsd_address: str = ""
    statsd_interval_ms: int = 60000
    statsd_mem_stats: bool = True
    statsd_prefix: str = "nsq.%s"
    statsd_udp_packet_size: int = 508
    statsd_exclude_ephemeral: bool = False
    e2e_processing_latency_percentiles: list[float] = field(default_factory=list)
    e2e_processing_latency_window_time_ms: int = 600000
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_auth_policy: str = ""
    tls_root_ca_file: str = ""
    tls_required: str = "false"
    tls_min_version: str = "tls1.0"
    deflate: bool = True
    max_deflate_level: int = 6
    snappy: bool = True
    # nsqpy: how long retained data is kept once every channel has confirmed it (0 = until confirmed).
    retention_ms: int = 0
    retention_bytes: int = 0
    # nsqpy: heartbeats are fixed at ClientTimeout/2 in NSQ; kept here so tests can shorten them.
    client_timeout_ms: int = 60000
    # nsqpy (beyond NSQ): attempts after which a message goes to its channel's dead-letter
    # topic (0 = never, NSQ's behaviour), the dead-letter topic's suffix, and the bound of
    # the trace store (events).
    max_attempts: int = 0
    dead_letter_suffix: str = ".dead"
    trace_max_records: int = 1_000_000


# nsqd's /config names (SPEC 2.2): the flag-tagged fields of nsqd 1.3.0's Options, named
# by their cfg name; nothing else. Each maps to (our field, how the value is shown):
# "ns" -> our milliseconds as Go duration nanoseconds.
LOG_LEVELS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
TLS_VERSIONS = {"ssl3.0": 0x0300, "tls1.0": 0x0301, "tls1.1": 0x0302, "tls1.2": 0x0303,
                "tls1.3": 0x0304}  # fmt: skip
_SAME = ""
NSQD_CONFIG: dict[str, tuple[str, str]] = {
    "id": ("node_id", _SAME),
    "log_level": ("log_level", "log_level"),
    "log_prefix": ("log_prefix", _SAME),
    "tcp_address": ("tcp_address", _SAME),
    "http_address": ("http_address", _SAME),
    "https_address": ("https_address", _SAME),
    "broadcast_address": ("broadcast_address", _SAME),
    "broadcast_tcp_port": ("broadcast_tcp_port", _SAME),
    "broadcast_http_port": ("broadcast_http_port", _SAME),
    "nsqlookupd_tcp_addresses": ("lookupd_tcp_addresses", _SAME),
    "auth_http_addresses": ("auth_http_addresses", _SAME),
    "http_client_connect_timeout": ("http_client_connect_timeout_ms", "ns"),
    "http_client_request_timeout": ("http_client_request_timeout_ms", "ns"),
    "data_path": ("data_path", _SAME),
    "mem_queue_size": ("mem_queue_size", _SAME),
    "max_bytes_per_file": ("max_bytes_per_file", _SAME),
    "sync_every": ("sync_every", _SAME),
    "sync_timeout": ("sync_timeout_ms", "ns"),
    "queue_scan_selection_count": ("queue_scan_selection_count", _SAME),
    "queue_scan_worker_pool_max": ("queue_scan_worker_pool_max", _SAME),
    "msg_timeout": ("msg_timeout_ms", "ns"),
    "max_msg_timeout": ("max_msg_timeout_ms", "ns"),
    "max_msg_size": ("max_msg_size", _SAME),
    "max_body_size": ("max_body_size", _SAME),
    "max_req_timeout": ("max_req_timeout_ms", "ns"),
    "max_heartbeat_interval": ("max_heartbeat_interval_ms", "ns"),
    "max_rdy_count": ("max_rdy_count", _SAME),
    "max_output_buffer_size": ("max_output_buffer_size", _SAME),
    "max_output_buffer_timeout": ("max_output_buffer_timeout_ms", "ns"),
    "min_output_buffer_timeout": ("min_output_buffer_timeout_ms", "ns"),
    "output_buffer_timeout": ("output_buffer_timeout_ms", "ns"),
    "max_channel_consumers": ("max_channel_consumers", _SAME),
    "statsd_address": ("statsd_address", _SAME),
    "statsd_prefix": ("statsd_prefix", _SAME),
    "statsd_interval": ("statsd_interval_ms", "ns"),
    "statsd_mem_stats": ("statsd_mem_stats", _SAME),
    "statsd_udp_packet_size": ("statsd_udp_packet_size", _SAME),
    "statsd_exclude_ephemeral": ("statsd_exclude_ephemeral", _SAME),
    "e2e_processing_latency_window_time": ("e2e_processing_latency_window_time_ms", "ns"),
    "e2e_processing_latency_percentiles": ("e2e_processing_latency_percentiles", _SAME),
    "tls_cert": ("tls_cert", _SAME),
    "tls_key": ("tls_key", _SAME),
    "tls_client_auth_policy": ("tls_client_auth_policy", _SAME),
    "tls_root_ca_file": ("tls_root_ca_file", _SAME),
    "tls_required": ("tls_required", "tls_required"),
    "tls_min_version": ("tls_min_version", "tls_min_version"),
    "deflate": ("deflate", _SAME),
    "max_deflate_level": ("max_deflate_level", _SAME),
    "snappy": ("snappy", _SAME),
}


def tls_required_level(opts: NsqdOptions) -> int:
    """nsqd's TLSRequired: 0 not required, 1 TCP only (``tcp-https``), 2 required; a client
    auth policy forces 2 when TLS was not asked for."""
    value = str(opts.tls_required).lower()
    level = {"true": 2, "1": 2, "tcp-https": 1}.get(value, 0)
    if opts.tls_client_auth_policy and level == 0:
        level = 2
    return level


def config_value(opts: NsqdOptions, name: str) -> object:
    """GET /config/<name>: the option as nsqd 1.3.0 shows it. KeyError for any other name."""
    field_name, shown = NSQD_CONFIG[name]
    value = getattr(opts, field_name)
    if shown == "ns":
        return int(value) * 1_000_000
    if shown == "log_level":
        return LOG_LEVELS.get(str(value).lower(), 2)
    if shown == "tls_required":
        return tls_required_level(opts)
    if shown == "tls_min_version":
        return TLS_VERSIONS.get(str(value).lower(), 0x0301)
    return value
