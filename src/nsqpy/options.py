"""Options of the daemons: one flat dataclass per daemon whose fields mirror NSQ's flags.

Defaults live here and only here. Durations are kept in milliseconds (``*_ms``) so the
wire and HTTP layers can convert them to NSQ's units (ms in IDENTIFY, ns in /info and
/config). This module imports only the standard library.
"""

from __future__ import annotations

import socket
import zlib
from dataclasses import dataclass, field
from hashlib import md5


def default_node_id() -> int:
    """NSQ's default --node-id: crc32 of the md5 of the hostname, modulo 1024."""
    digest = md5(socket.gethostname().encode(), usedforsecurity=False).digest()
    return zlib.crc32(digest) % 1024


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
