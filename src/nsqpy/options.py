"""nsqd's options: one flat dataclass whose fields are nsqd's flags, each declared once.

Every field is declared with ``nsqpy.flags.option``: NSQ's flag name, default, help text,
kind, the check of its value, its ``cfg`` key (``--config`` files, ``GET /config/<key>``).
That one declaration drives ``nsqd``'s parser and ``--help``, ``/config``
(``NSQD_CONFIG``, ``config_value``) and docs/flags.md; checks across options are in
``nsqd.app.validate``. Durations are kept in milliseconds (``*_ms``) so the wire and HTTP
layers can convert them to NSQ's units (ms in IDENTIFY, ns in /info and /config); listen
addresses are read here too (``listen_address``). Imports only the standard library,
``nsqpy.errors`` and ``nsqpy.flags``; the broker imports this module.
"""

from __future__ import annotations

import socket
import zlib
from dataclasses import dataclass
from hashlib import md5

from nsqpy.errors import ConfigError
from nsqpy.flags import (
    Option,
    api_value,
    check_cluster_id,
    check_endpoints,
    check_host_port,
    config_options,
    each,
    log_level_check,
    must,
    option,
    shown_log_level,
    split_host_port,
    unless_empty,
)
from nsqpy.flags.cluster import ClusterSecurityOptions


def default_node_id() -> int:
    """NSQ's default --node-id: crc32 of the md5 of the hostname, modulo 1024."""
    digest = md5(socket.gethostname().encode(), usedforsecurity=False).digest()
    return zlib.crc32(digest) % 1024


def listen_address(flag: str, address: str) -> tuple[str, int] | str:
    """(host, port) of a TCP address, or the path of a unix socket, as nsqd 1.3.0 reads
    ``--tcp-address``/``--http-address``: what Go's SplitHostPort cannot split (and
    anything with a ``/``) is a unix socket path. A host:port whose port is not a number
    in 0..65535 raises ConfigError."""
    if "/" in address:
        return address
    try:
        host, port = split_host_port(address)
    except ValueError:
        return address
    if not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ConfigError(
            f"--{flag}={address!r}: {port!r} is not a port (want host:port or a unix socket path)"
        )
    return host or "0.0.0.0", int(port)


MAX_DELAY_MS = 3650 * 86_400_000  # deferred messages live on disk; ten years bounds the ns math
TLS_VERSIONS = {"ssl3.0": 0x0300, "tls1.0": 0x0301, "tls1.1": 0x0302, "tls1.2": 0x0303,
                "tls1.3": 0x0304}  # fmt: skip


def _dialled(flag: str, address: str) -> None:
    check_host_port(flag, address, need_host=True)


def _auth_address(flag: str, address: str) -> None:
    if not address.startswith(("http://", "https://")):
        check_host_port(flag, address, need_host=True)


_PORT = must(lambda v: 0 <= v <= 65535, "--{flag} {value} out of range")
_POSITIVE = must(lambda v: v > 0, "--{flag} must be positive")


@dataclass
class NsqdOptions(ClusterSecurityOptions):
    """nsqd's flags (SPEC 5.1), with NSQ's defaults; ``api=False`` marks the flags nsqd 1.3.0
    has no ``/config`` option for (nsqpy's own, and deprecated ones)."""

    node_id: int = option(
        "node-id",
        factory=default_node_id,
        kind="int",
        help="unique part for message IDs, (int) in range [0,1024)",
        config_key="id",
        check=must(lambda v: 0 <= v < 1024, "--{flag} must be in [0,1024), got {value}"),
    )
    log_level: str = option(
        "log-level",
        "info",
        "log level: debug, info, warn, error, or fatal",
        check=log_level_check(),
        shown=shown_log_level,
    )
    log_prefix: str = option("log-prefix", "[nsqd] ", "log message prefix")
    tcp_address: str = option(
        "tcp-address",
        "0.0.0.0:4150",
        "<addr>:<port> to listen on for TCP clients",
        check=listen_address,
    )
    http_address: str = option(
        "http-address",
        "0.0.0.0:4151",
        '<addr>:<port> to listen on for HTTP clients ("" disables)',
        check=unless_empty(listen_address),
    )
    https_address: str = option(
        "https-address",
        "0.0.0.0:4152",
        "<addr>:<port> to listen on for HTTPS clients",
        check=unless_empty(check_host_port),
    )
    broadcast_address: str = option(
        "broadcast-address",
        factory=socket.gethostname,
        help="address registered with nsqlookupd (default: the OS hostname)",
    )
    broadcast_tcp_port: int = option(
        "broadcast-tcp-port",
        0,
        "TCP port registered with nsqlookupd (0 = the TCP listener's)",
        check=_PORT,
    )
    broadcast_http_port: int = option(
        "broadcast-http-port",
        0,
        "HTTP port registered with nsqlookupd (0 = the HTTP listener's)",
        check=_PORT,
    )
    lookupd_tcp_addresses: list[str] = option(
        "lookupd-tcp-address",
        [],
        "lookupd TCP address (may be given multiple times)",
        config_key="nsqlookupd_tcp_addresses",
        check=each(_dialled),
    )
    auth_http_addresses: list[str] = option(
        "auth-http-address",
        [],
        "<addr>:<port> or a full URL to query the auth server (may be given multiple times)",
        config_key="auth_http_addresses",
        check=each(_auth_address),
    )
    http_client_connect_timeout_ms: int = option(
        "http-client-connect-timeout", 2000, "timeout for HTTP connect", kind="duration_ms"
    )
    http_client_request_timeout_ms: int = option(
        "http-client-request-timeout", 5000, "timeout for HTTP request", kind="duration_ms"
    )
    data_path: str = option("data-path", "", "path to store the topic logs, cursors and metadata")
    # nsqpy: the bound of an ephemeral (in-memory) topic's buffer, in messages. Durable topics
    # keep every message on disk, so this no longer decides when messages go to disk.
    mem_queue_size: int = option(
        "mem-queue-size",
        10000,
        "messages kept by an ephemeral topic; nsqpy keeps every durable message on disk",
    )
    max_bytes_per_file: int = option(
        "max-bytes-per-file", 104857600, "bytes per topic log segment before rolling"
    )
    sync_every: int = option("sync-every", 2500, "number of messages per fsync of a topic log")
    sync_timeout_ms: int = option(
        "sync-timeout", 2000, "duration of time per fsync of a topic log", kind="duration_ms"
    )
    # nsqpy: "always" acknowledges a publish only after the fsync that covers it.
    sync_always: bool = option(
        "sync-always",
        False,
        "nsqpy: acknowledge a publish only after the fsync that covers it",
        api=False,
    )
    queue_scan_worker_pool_max: int = option(
        "queue-scan-worker-pool-max", 4, "[unused in nsqpy] kept for compatibility"
    )
    queue_scan_selection_count: int = option(
        "queue-scan-selection-count", 20, "[unused in nsqpy] kept for compatibility"
    )
    queue_scan_interval_ms: int = option(
        "queue-scan-interval",
        100,
        "how often in-flight timeouts and deferred messages are checked",
        kind="duration_ms",
        api=False,  # a constant in nsqd 1.3.0
    )
    msg_timeout_ms: int = option(
        "msg-timeout",
        60000,
        "default duration to wait before auto-requeing a message",
        kind="duration_ms",
    )
    max_msg_timeout_ms: int = option(
        "max-msg-timeout",
        900000,
        "maximum duration before a message will timeout",
        kind="duration_ms",
    )
    max_msg_size: int = option("max-msg-size", 1048576, "maximum size of a single message in bytes")
    max_req_timeout_ms: int = option(
        "max-req-timeout",
        3600000,
        "maximum requeuing timeout for a message, also the maximum DPUB/HTTP defer "
        "(nsqpy keeps deferred messages on disk: up to 3650 days)",
        kind="duration_ms",
        check=must(
            lambda v: 0 <= v <= MAX_DELAY_MS,
            "--{flag} must be in [0, 3650 days], got {value}ms",
        ),
    )
    max_body_size: int = option("max-body-size", 5242880, "maximum size of a single command body")
    max_heartbeat_interval_ms: int = option(
        "max-heartbeat-interval",
        60000,
        "maximum client configurable duration of time between client heartbeats",
        kind="duration_ms",
    )
    max_rdy_count: int = option("max-rdy-count", 2500, "maximum RDY count for a client")
    max_output_buffer_size: int = option(
        "max-output-buffer-size",
        65536,
        "maximum client configurable size (in bytes) for a client output buffer",
    )
    max_output_buffer_timeout_ms: int = option(
        "max-output-buffer-timeout",
        30000,
        "maximum client configurable duration of time between flushing to a client",
        kind="duration_ms",
    )
    min_output_buffer_timeout_ms: int = option(
        "min-output-buffer-timeout",
        25,
        "minimum client configurable duration of time between flushing to a client",
        kind="duration_ms",
    )
    output_buffer_timeout_ms: int = option(
        "output-buffer-timeout",
        250,
        "default duration of time between flushing data to clients",
        kind="duration_ms",
    )
    max_channel_consumers: int = option(
        "max-channel-consumers",
        0,
        "maximum channel consumer connection count per nsqd instance (0 = unlimited)",
    )
    statsd_address: str = option(
        "statsd-address",
        "",
        "UDP <addr>:<port> of a statsd daemon for pushing stats",
        check=unless_empty(_dialled),
    )
    statsd_interval_ms: int = option(
        "statsd-interval",
        60000,
        "duration between pushing to statsd",
        kind="duration_ms",
        check=_POSITIVE,
    )
    statsd_mem_stats: bool = option(
        "statsd-mem-stats", True, "toggle sending memory and GC stats to statsd"
    )
    statsd_prefix: str = option(
        "statsd-prefix", "nsq.%s", "prefix used for keys sent to statsd (%s for host replacement)"
    )
    statsd_udp_packet_size: int = option(
        "statsd-udp-packet-size", 508, "the size in bytes of statsd UDP packets", check=_POSITIVE
    )
    statsd_exclude_ephemeral: bool = option(
        "statsd-exclude-ephemeral",
        False,
        "skip ephemeral topics and channels when sending stats to statsd",
    )
    e2e_processing_latency_percentiles: list[float] = option(
        "e2e-processing-latency-percentile",
        [],
        "message processing time percentiles (as float (0, 1.0]) to track (can be specified "
        "multiple times or comma separated)",
        kind="float_list",
        config_key="e2e_processing_latency_percentiles",
        check=each(must(lambda q: 0 < q <= 1, "--{flag} {value} must be in (0, 1.0]")),
    )
    e2e_processing_latency_window_time_ms: int = option(
        "e2e-processing-latency-window-time",
        600000,
        "calculate end to end latency quantiles for this duration of time",
        kind="duration_ms",
    )
    tls_cert: str = option("tls-cert", "", "path to certificate file")
    tls_key: str = option("tls-key", "", "path to key file")
    tls_client_auth_policy: str = option(
        "tls-client-auth-policy",
        "",
        "client certificate auth policy ('require' or 'require-verify')",
    )
    tls_root_ca_file: str = option("tls-root-ca-file", "", "path to certificate authority file")
    tls_required: str = option(
        "tls-required",
        "false",
        "require TLS for client connections (true, false, tcp-https)",
        check=must(
            lambda v: v in ("true", "false", "tcp-https", "1", "0"),
            "--{flag} must be true, false or tcp-https, got {value!r}",
        ),
    )
    tls_min_version: str = option(
        "tls-min-version",
        "tls1.0",
        "minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')",
        shown=lambda v: TLS_VERSIONS.get(str(v).lower(), 0x0301),
    )
    deflate: bool = option(
        "deflate", True, "enable deflate feature negotiation (client compression)"
    )
    max_deflate_level: int = option(
        "max-deflate-level",
        6,
        "max deflate compression level a client can negotiate (> values == > nsqd CPU usage)",
        check=must(lambda v: 1 <= v <= 9, "--{flag} must be in [1,9], got {value}"),
    )
    snappy: bool = option("snappy", True, "enable snappy feature negotiation (client compression)")
    # nsqpy: how long retained data is kept once every channel has confirmed it (0 = until confirmed).
    retention_ms: int = option(
        "retention",
        0,
        "nsqpy: keep confirmed messages this long before their segments are deleted",
        kind="duration_ms",
        api=False,
    )
    retention_bytes: int = option(
        "retention-bytes",
        0,
        "nsqpy: keep at most this many bytes of confirmed messages per partition",
        api=False,
    )
    # nsqpy: heartbeats are fixed at ClientTimeout/2 in NSQ; kept here so tests can shorten them.
    client_timeout_ms: int = option(
        "client-timeout",
        60000,
        "nsqpy: the default heartbeat interval is half of this (NSQ fixes it at 60s); "
        "also the time an HTTP request's head, then its body, may take to arrive",
        kind="duration_ms",
        api=False,
    )
    # nsqpy (beyond NSQ): attempts after which a message goes to its channel's dead-letter
    # topic (0 = never, NSQ's behaviour), the dead-letter topic's suffix, and the bound of
    # the trace store (events).
    max_attempts: int = option(
        "max-attempts",
        0,
        "nsqpy: attempts after which a message goes to its channel's dead-letter topic "
        "(0 = never, as NSQ; channels may override it over HTTP)",
        api=False,
        check=must(lambda v: 0 <= v <= 65535, "--{flag} must be in [0,65535], got {value}"),
    )
    dead_letter_suffix: str = option(
        "dead-letter-suffix",
        ".dead",
        "nsqpy: a channel's dead-letter topic is <topic><suffix> unless set over HTTP",
        api=False,
    )
    trace_max_records: int = option(
        "trace-max-records",
        1_000_000,
        "nsqpy: trace events kept (the oldest are deleted beyond this)",
        api=False,
        check=must(lambda v: v >= 1, "--{flag} must be >= 1, got {value}"),
    )
    # Cluster mode (docs/cluster.md): without --etcd-endpoints nsqd is a single node.
    etcd_endpoints: str = option(
        "etcd-endpoints",
        "",
        "nsqpy: etcd members host:port[,host:port...]; joins the cluster --cluster-id",
        api=False,
        check=check_endpoints,
    )
    cluster_id: str = option(
        "cluster-id",
        "nsqpy",
        "nsqpy: the cluster's name (its keys in etcd)",
        api=False,
        check=check_cluster_id,
    )
    rpc_address: str = option(
        "rpc-address",
        "0.0.0.0:4250",
        "nsqpy: <addr>:<port> for replication between nsqd (cluster mode)",
        api=False,
        check=check_host_port,
    )
    disable_auto_create: bool = option(
        "disable-auto-create",
        False,
        "nsqpy: in a cluster, a PUB or SUB of an unknown topic fails (E_TOPIC_NOT_EXIST) "
        "instead of creating it",
        api=False,
    )
    etcd_lease_ttl_ms: int = option(
        "etcd-lease-ttl",
        3_000,
        "nsqpy: lease of this node in etcd; a node silent this long is dead",
        kind="duration_ms",
        api=False,
        check=must(lambda v: v >= 1000, "--{flag} must be at least 1s"),
    )
    etcd_report_ends_interval_ms: int = option(
        "etcd-report-ends-interval",
        10_000,
        "nsqpy: a partition's new end offset alone is written to this node's key in etcd at "
        "most this often (roles, ISR changes and failures at once)",
        kind="duration_ms",
        api=False,
        check=must(lambda v: v >= 100, "--{flag} must be at least 100ms"),
    )
    # Deprecated flags NSQ still accepts; they have no effect.
    verbose: bool = option("verbose", False, "[deprecated] has no effect", api=False)
    worker_id: int = option("worker-id", 0, "[deprecated] use --node-id", api=False)


# nsqd's /config names (SPEC 2.2): the flag-tagged fields of nsqd 1.3.0's Options, by their
# cfg name; nothing else.
NSQD_CONFIG: dict[str, Option] = dict(config_options(NsqdOptions))


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
    opt = NSQD_CONFIG[name]
    if name == "tls_required":  # nsqd's TLSRequired level also depends on the auth policy
        return tls_required_level(opts)
    return api_value(opt, getattr(opts, opt.field))
