"""nsqadmin's options (SPEC 5.3): one flat dataclass whose fields mirror the flags.

Defaults live here (NSQ v1.3.0's, plus nsqpy's two sampling flags), and so does the flag
table (names, fields, config keys, as /config/:opt also reads them). Durations are kept
in milliseconds (``*_ms``). Also owns the checks of an options object (``validate``), the
``--base-path`` normalisation and ``host:port`` splitting. Imports only the standard
library, nsqpy.errors and nsqpy.flags.
"""

from __future__ import annotations

import ipaddress
import posixpath
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from nsqpy.errors import ConfigError
from nsqpy.flags import Flag

LOG_LEVELS = {"debug": 10, "info": 20, "warn": 30, "error": 40, "fatal": 50}


@dataclass
class NsqAdminOptions:
    """nsqadmin's flags with NSQ v1.3.0's defaults."""

    http_address: str = "0.0.0.0:4171"
    base_path: str = "/"
    dev_static_dir: str = ""
    lookupd_http_addresses: list[str] = field(default_factory=list)
    nsqd_http_addresses: list[str] = field(default_factory=list)
    graphite_url: str = ""
    proxy_graphite: bool = False
    statsd_prefix: str = "nsq.%s"
    statsd_counter_format: str = "stats.counters.%s.count"
    statsd_gauge_format: str = "stats.gauges.%s"
    statsd_interval_ms: int = 60_000
    notification_http_endpoint: str = ""
    http_client_connect_timeout_ms: int = 2_000
    http_client_request_timeout_ms: int = 5_000
    http_client_tls_insecure_skip_verify: bool = False
    http_client_tls_root_ca_file: str = ""
    http_client_tls_cert: str = ""
    http_client_tls_key: str = ""
    allow_config_from_cidr: str = "127.0.0.1/8"
    acl_http_header: str = "X-Forwarded-User"
    admin_users: list[str] = field(default_factory=list)
    log_level: str = "info"
    log_prefix: str = "[nsqadmin] "
    verbose: bool = False  # deprecated in NSQ, no effect
    # nsqpy: nsqadmin samples every nsqd's /stats this often into an in-memory history that
    # feeds the graphs (no graphite needed); 0 turns sampling off.
    stats_sample_interval_ms: int = 10_000
    # nsqpy: samples kept per series (topic, channel, node): 360 x 10s = one hour.
    stats_history_size: int = 360


def split_host_port(address: str, flag: str = "http-address") -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port); an empty host means all interfaces."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(f"--{flag} {address!r} is not <addr>:<port> with a port in 0-65535")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", int(port_text)


def normalize_base_path(path: str) -> str:
    """NSQ's rule: a leading ``/``, cleaned, no trailing ``/`` (``""`` -> ``/``)."""
    if not path:
        return "/"
    if not path.startswith("/"):
        path = "/" + path
    return "/" + posixpath.normpath(path).lstrip("/")


def _check_upstream(address: str, flag: str) -> None:
    if address.startswith(("http://", "https://")):
        parts = urlsplit(address)
        if not parts.hostname:
            raise ConfigError(f"--{flag} {address!r} has no host")
        return
    host, _ = split_host_port(address, flag)
    if not host or any(c in host for c in "/?#@ "):
        raise ConfigError(f"--{flag} {address!r} is not <addr>:<port>")


def _check_url(url: str, flag: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--{flag} {url!r} must be an http:// or https:// URL")


def validate(opts: NsqAdminOptions) -> None:
    """Raise ConfigError naming the first bad option; normalises ``base_path``."""
    split_host_port(opts.http_address, "http-address")
    if not opts.lookupd_http_addresses and not opts.nsqd_http_addresses:
        raise ConfigError("--nsqd-http-address or --lookupd-http-address required")
    if opts.lookupd_http_addresses and opts.nsqd_http_addresses:
        raise ConfigError("use --nsqd-http-address or --lookupd-http-address not both")
    for address in opts.lookupd_http_addresses:
        _check_upstream(address, "lookupd-http-address")
    for address in opts.nsqd_http_addresses:
        _check_upstream(address, "nsqd-http-address")
    if opts.graphite_url:
        _check_url(opts.graphite_url, "graphite-url")
    elif opts.proxy_graphite:
        raise ConfigError("--proxy-graphite needs --graphite-url")
    if opts.notification_http_endpoint:
        _check_url(opts.notification_http_endpoint, "notification-http-endpoint")
    if bool(opts.http_client_tls_cert) != bool(opts.http_client_tls_key):
        raise ConfigError("--http-client-tls-cert and --http-client-tls-key must be given together")
    if opts.allow_config_from_cidr:
        try:
            ipaddress.ip_network(opts.allow_config_from_cidr, strict=False)
        except ValueError:
            raise ConfigError(
                f"--allow-config-from-cidr {opts.allow_config_from_cidr!r} is not a CIDR"
            ) from None
    if opts.log_level.lower() not in LOG_LEVELS:
        raise ConfigError(
            f"invalid --log-level {opts.log_level!r} (debug, info, warn, error or fatal)"
        )
    for name in ("http_client_connect_timeout_ms", "http_client_request_timeout_ms"):
        if getattr(opts, name) <= 0:
            raise ConfigError(f"--{name[:-3].replace('_', '-')} must be positive")
    if opts.statsd_interval_ms < 1000:
        raise ConfigError("--statsd-interval must be at least 1s")
    if opts.stats_sample_interval_ms < 0:
        raise ConfigError("--stats-sample-interval must not be negative")
    if not 2 <= opts.stats_history_size <= 100_000:
        raise ConfigError(f"--stats-history-size {opts.stats_history_size} out of range 2-100000")
    if not opts.acl_http_header.strip():
        raise ConfigError("--acl-http-header must not be empty")
    opts.base_path = normalize_base_path(opts.base_path)


FLAGS = [
    Flag("log-level", "log_level", help="set log verbosity: debug, info, warn, error, or fatal"),
    Flag("log-prefix", "log_prefix", help="log message prefix"),
    Flag("verbose", "verbose", "bool", help="[deprecated] has no effect, use --log-level"),
    Flag("http-address", "http_address", help="<addr>:<port> to listen on for HTTP clients"),
    Flag("base-path", "base_path", help="URL base path"),
    Flag(
        "dev-static-dir",
        "dev_static_dir",
        help="(development use only) serve static assets from this directory",
    ),
    Flag("graphite-url", "graphite_url", help="graphite HTTP address"),
    Flag("proxy-graphite", "proxy_graphite", "bool", help="proxy HTTP requests to graphite"),
    Flag(
        "statsd-counter-format",
        "statsd_counter_format",
        help="the counter stats key formatting applied by the implementation of statsd",
    ),
    Flag(
        "statsd-gauge-format",
        "statsd_gauge_format",
        help="the gauge stats key formatting applied by the implementation of statsd",
    ),
    Flag(
        "statsd-prefix",
        "statsd_prefix",
        help="prefix used for keys sent to statsd (%s for host replacement, must match nsqd)",
    ),
    Flag(
        "statsd-interval",
        "statsd_interval_ms",
        "duration",
        help="time interval nsqd is configured to push to statsd (must match nsqd)",
    ),
    Flag(
        "notification-http-endpoint",
        "notification_http_endpoint",
        help="HTTP endpoint (fully qualified) to which POST notifications of admin actions will be sent",
    ),
    Flag(
        "http-client-connect-timeout",
        "http_client_connect_timeout_ms",
        "duration",
        help="timeout for HTTP connect",
    ),
    Flag(
        "http-client-request-timeout",
        "http_client_request_timeout_ms",
        "duration",
        help="timeout for HTTP request",
    ),
    Flag(
        "http-client-tls-insecure-skip-verify",
        "http_client_tls_insecure_skip_verify",
        "bool",
        help="configure the HTTP client to skip verification of TLS certificates",
    ),
    Flag(
        "http-client-tls-root-ca-file",
        "http_client_tls_root_ca_file",
        help="path to CA file for the HTTP client",
    ),
    Flag(
        "http-client-tls-cert",
        "http_client_tls_cert",
        help="path to certificate file for the HTTP client",
    ),
    Flag("http-client-tls-key", "http_client_tls_key", help="path to key file for the HTTP client"),
    Flag(
        "allow-config-from-cidr",
        "allow_config_from_cidr",
        help="a CIDR from which to allow HTTP requests to the /config endpoint",
    ),
    Flag(
        "acl-http-header",
        "acl_http_header",
        help="HTTP header to check for authenticated admin users",
    ),
    Flag(
        "lookupd-http-address",
        "lookupd_http_addresses",
        "list",
        help="lookupd HTTP address (may be given multiple times)",
        config_key="nsqlookupd_http_addresses",
    ),
    Flag(
        "nsqd-http-address",
        "nsqd_http_addresses",
        "list",
        help="nsqd HTTP address (may be given multiple times)",
        config_key="nsqd_http_addresses",
    ),
    Flag(
        "admin-user",
        "admin_users",
        "list",
        help="admin user (may be given multiple times; if specified, only these users will be able to perform privileged actions)",
        config_key="admin_users",
    ),
    Flag(
        "stats-sample-interval",
        "stats_sample_interval_ms",
        "duration",
        help="nsqpy: how often nsqadmin samples every nsqd's /stats for its own graphs (0 disables)",
    ),
    Flag(
        "stats-history-size",
        "stats_history_size",
        "int",
        help="nsqpy: samples kept per topic/channel/node series for the graphs",
    ),
]
