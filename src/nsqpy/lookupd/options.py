"""nsqlookupd's options (SPEC 5.2): one flat dataclass whose fields are its flags.

Each field is declared once with ``nsqpy.flags.option`` (flag name, default, help, kind,
check); that declaration drives ``nsqlookupd``'s parser, ``--help``, ``--config`` files and
docs/flags.md. Durations are kept in milliseconds (``*_ms``). ``validate`` runs the checks.
Imports only the standard library, nsqpy.errors and nsqpy.flags.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from nsqpy.flags import (
    check_cluster_id,
    check_endpoints,
    check_host_port,
    check_options,
    log_level_check,
    must,
    option,
)
from nsqpy.flags.cluster import ClusterSecurityOptions

_PORT = must(lambda v: 0 <= v <= 65535, "--{flag} {value} out of range 0-65535")


@dataclass
class NsqLookupdOptions(ClusterSecurityOptions):
    """nsqlookupd's flags with NSQ v1.3.0's defaults (ports 0 = pick a free port)."""

    tcp_address: str = option(
        "tcp-address",
        "0.0.0.0:4160",
        "<addr>:<port> to listen on for TCP clients",
        check=check_host_port,
    )
    http_address: str = option(
        "http-address",
        "0.0.0.0:4161",
        "<addr>:<port> to listen on for HTTP clients",
        check=check_host_port,
    )
    broadcast_address: str = option(
        "broadcast-address",
        factory=socket.gethostname,
        help="address of this lookupd node (default: the OS hostname)",
    )
    # nsqpy: the ports announced in the IDENTIFY reply (0 = the listeners' own ports).
    broadcast_tcp_port: int = option(
        "broadcast-tcp-port",
        0,
        "nsqpy: TCP port announced in IDENTIFY replies (0 = the TCP listener's)",
        check=_PORT,
    )
    broadcast_http_port: int = option(
        "broadcast-http-port",
        0,
        "nsqpy: HTTP port announced in IDENTIFY replies (0 = the HTTP listener's)",
        check=_PORT,
    )
    inactive_producer_timeout_ms: int = option(
        "inactive-producer-timeout",
        300_000,
        "duration of time a producer will remain in the active list since its last ping",
        kind="duration_ms",
    )
    tombstone_lifetime_ms: int = option(
        "tombstone-lifetime",
        45_000,
        "duration of time a producer will remain tombstoned if registration remains",
        kind="duration_ms",
    )
    # Cluster mode (docs/cluster.md): with --etcd-endpoints this lookupd may coordinate.
    etcd_endpoints: str = option(
        "etcd-endpoints",
        "",
        "nsqpy: etcd members host:port[,host:port...]; serves and coordinates --cluster-id",
        check=check_endpoints,
    )
    cluster_id: str = option(
        "cluster-id",
        "nsqpy",
        "nsqpy: the cluster's name (its keys in etcd)",
        check=check_cluster_id,
    )
    rpc_address: str = option(
        "rpc-address",
        "0.0.0.0:4260",
        "nsqpy: <addr>:<port> where the cluster's daemons call this lookupd (the coordinator) "
        "over mutual TLS; opened only with --cluster-tls-*",
        check=check_host_port,
    )
    etcd_lease_ttl_ms: int = option(
        "etcd-lease-ttl",
        10_000,
        "nsqpy: lease of this lookupd in etcd (and of the coordinator lock)",
        kind="duration_ms",
        check=must(lambda v: v >= 1000, "--{flag} must be at least 1s"),
    )
    default_partitions: int = option(
        "default-partitions",
        1,
        "nsqpy: partitions of a topic created implicitly (a PUB or SUB)",
        check=must(lambda v: 1 <= v <= 255, "--{flag} must be in 1..255, got {value}"),
    )
    default_replicas: int = option(
        "default-replicas",
        3,
        "nsqpy: replicas of a topic created implicitly (at most the live nodes)",
        check=must(lambda v: 1 <= v <= 5, "--{flag} must be in 1..5, got {value}"),
    )
    replica_repair_delay_ms: int = option(
        "replica-repair-delay",
        600_000,
        "nsqpy: how long a replica may stay dead before it is made again elsewhere "
        "(10s when at most half the replicas live)",
        kind="duration_ms",
    )
    rebalance_interval_ms: int = option(
        "rebalance-interval",
        300_000,
        "nsqpy: how often the coordinator evens out the load of leaders and replicas "
        "(msgs/s, bytes, partitions), one partition at a time, when the cluster is "
        "healthy (0 never)",
        kind="duration_ms",
    )
    etcd_compact_interval_ms: int = option(
        "etcd-compact-interval",
        300_000,
        "nsqpy: how often the coordinator compacts etcd's history, keeping the last "
        "interval of it (0 never: then run etcd with --auto-compaction-retention)",
        kind="duration_ms",
    )
    log_level: str = option(
        "log-level",
        "info",
        "set log verbosity: debug, info, warn, error, or fatal",
        check=log_level_check(),
    )
    log_prefix: str = option("log-prefix", "[nsqlookupd] ", "log message prefix")
    verbose: bool = option("verbose", False, "[deprecated] has no effect, use --log-level")


def validate(opts: NsqLookupdOptions) -> None:
    """Raise ConfigError naming the first bad option."""
    check_options(opts)
