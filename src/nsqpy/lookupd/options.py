"""nsqlookupd's options (SPEC 5.2): one flat dataclass whose fields mirror the flags.

Defaults live here. Durations are kept in milliseconds (``*_ms``). Also owns the check of
an options object and the ``host:port`` splitting of listen addresses. Imports only the
standard library and nsqpy.errors.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

from nsqpy.errors import ConfigError

LOG_LEVELS = {"debug": 10, "info": 20, "warn": 30, "error": 40, "fatal": 50}


@dataclass
class NsqLookupdOptions:
    """nsqlookupd's flags with NSQ v1.3.0's defaults (ports 0 = pick a free port)."""

    tcp_address: str = "0.0.0.0:4160"
    http_address: str = "0.0.0.0:4161"
    broadcast_address: str = field(default_factory=socket.gethostname)
    # nsqpy: the ports announced in the IDENTIFY reply (0 = the listeners' own ports).
    broadcast_tcp_port: int = 0
    broadcast_http_port: int = 0
    inactive_producer_timeout_ms: int = 300_000
    tombstone_lifetime_ms: int = 45_000
    log_level: str = "info"
    log_prefix: str = "[nsqlookupd] "
    verbose: bool = False  # deprecated in NSQ, no effect


def split_host_port(address: str, flag: str = "address") -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port); an empty host means all interfaces."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ConfigError(f"--{flag} {address!r} is not <addr>:<port>")
    port = int(port_text)
    if port > 65535:
        raise ConfigError(f"--{flag} {address!r}: port {port} out of range 0-65535")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", port


def validate(opts: NsqLookupdOptions) -> None:
    """Raise ConfigError naming the first bad option."""
    split_host_port(opts.tcp_address, "tcp-address")
    split_host_port(opts.http_address, "http-address")
    for name in ("broadcast_tcp_port", "broadcast_http_port"):
        port = getattr(opts, name)
        if not 0 <= port <= 65535:
            raise ConfigError(f"--{name.replace('_', '-')} {port} out of range 0-65535")
    if opts.log_level.lower() not in LOG_LEVELS:
        raise ConfigError(
            f"invalid --log-level {opts.log_level!r} (debug, info, warn, error or fatal)"
        )
