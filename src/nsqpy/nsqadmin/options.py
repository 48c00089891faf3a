"""nsqadmin's options (SPEC 5.3): one flat dataclass whose fields are its flags.

Each field is declared once with ``nsqpy.flags.option`` (flag name, default, help, kind,
check, config key): NSQ v1.3.0's flags plus nsqpy's two sampling flags. That declaration
drives ``nsqadmin``'s parser, ``--help``, ``--config`` files, ``GET /config/:opt``
(``config_value``) and docs/flags.md. Durations are kept in milliseconds (``*_ms``). Also
owns the checks across options (``validate``) and the ``--base-path`` normalisation.
Imports only the standard library, nsqpy.errors and nsqpy.flags.
"""

from __future__ import annotations

import ipaddress
import posixpath
from dataclasses import dataclass
from urllib.parse import urlsplit

from nsqpy.errors import ConfigError
from nsqpy.flags import (
    api_value,
    check_host_port,
    check_options,
    config_options,
    declared,
    each,
    log_level_check,
    must,
    option,
    shown_log_level,
    unless_empty,
)
from nsqpy.flags.cluster import ClusterTlsOptions, cluster_tls_check, cluster_tls_on


def check_upstream(flag: str, address: str) -> None:
    """An nsqd or nsqlookupd HTTP address: ``<host>:<port>`` or an http(s) URL with a host."""
    if address.startswith(("http://", "https://")):
        if not urlsplit(address).hostname:
            raise ConfigError(f"--{flag} {address!r} has no host")
        return
    host, _ = check_host_port(flag, address)
    if not host:
        raise ConfigError(f"--{flag} {address!r} is not <addr>:<port>")


def _check_url(flag: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--{flag} {url!r} must be an http:// or https:// URL")


def _check_cidr(flag: str, cidr: str) -> None:
    try:
        ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        raise ConfigError(f"--{flag} {cidr!r} is not a CIDR") from None


_POSITIVE = must(lambda v: v > 0, "--{flag} must be positive")


@dataclass
class NsqAdminOptions(ClusterTlsOptions):
    """nsqadmin's flags with NSQ v1.3.0's defaults (and the cluster's certificates, with
    which it calls nsqlookupd where the cluster's daemons do: over mutual TLS)."""

    http_address: str = option(
        "http-address",
        "0.0.0.0:4171",
        "<addr>:<port> to listen on for HTTP clients",
        check=check_host_port,
    )
    base_path: str = option("base-path", "/", "URL base path")
    dev_static_dir: str = option(
        "dev-static-dir", "", "(development use only) serve static assets from this directory"
    )
    lookupd_http_addresses: list[str] = option(
        "lookupd-http-address",
        [],
        "lookupd HTTP address (may be given multiple times)",
        config_key="nsqlookupd_http_addresses",
        check=each(check_upstream),
    )
    nsqd_http_addresses: list[str] = option(
        "nsqd-http-address",
        [],
        "nsqd HTTP address (may be given multiple times)",
        config_key="nsqd_http_addresses",
        check=each(check_upstream),
    )
    graphite_url: str = option(
        "graphite-url", "", "graphite HTTP address", check=unless_empty(_check_url)
    )
    proxy_graphite: bool = option("proxy-graphite", False, "proxy HTTP requests to graphite")
    statsd_prefix: str = option(
        "statsd-prefix",
        "nsq.%s",
        "prefix used for keys sent to statsd (%s for host replacement, must match nsqd)",
    )
    statsd_counter_format: str = option(
        "statsd-counter-format",
        "stats.counters.%s.count",
        "the counter stats key formatting applied by the implementation of statsd",
    )
    statsd_gauge_format: str = option(
        "statsd-gauge-format",
        "stats.gauges.%s",
        "the gauge stats key formatting applied by the implementation of statsd",
    )
    statsd_interval_ms: int = option(
        "statsd-interval",
        60_000,
        "time interval nsqd is configured to push to statsd (must match nsqd)",
        kind="duration_ms",
        check=must(lambda v: v >= 1000, "--{flag} must be at least 1s"),
    )
    notification_http_endpoint: str = option(
        "notification-http-endpoint",
        "",
        "HTTP endpoint (fully qualified) to which POST notifications of admin actions will be sent",
        check=unless_empty(_check_url),
    )
    http_client_connect_timeout_ms: int = option(
        "http-client-connect-timeout",
        2_000,
        "timeout for HTTP connect",
        kind="duration_ms",
        check=_POSITIVE,
    )
    http_client_request_timeout_ms: int = option(
        "http-client-request-timeout",
        5_000,
        "timeout for HTTP request",
        kind="duration_ms",
        check=_POSITIVE,
    )
    http_client_tls_insecure_skip_verify: bool = option(
        "http-client-tls-insecure-skip-verify",
        False,
        "configure the HTTP client to skip verification of TLS certificates",
    )
    http_client_tls_root_ca_file: str = option(
        "http-client-tls-root-ca-file", "", "path to CA file for the HTTP client"
    )
    http_client_tls_cert: str = option(
        "http-client-tls-cert", "", "path to certificate file for the HTTP client"
    )
    http_client_tls_key: str = option(
        "http-client-tls-key", "", "path to key file for the HTTP client"
    )
    allow_config_from_cidr: str = option(
        "allow-config-from-cidr",
        "127.0.0.1/8",
        "a CIDR from which to allow HTTP requests to the /config endpoint",
        check=unless_empty(_check_cidr),
    )
    acl_http_header: str = option(
        "acl-http-header",
        "X-Forwarded-User",
        "HTTP header to check for authenticated admin users",
        check=must(lambda v: bool(v.strip()), "--{flag} must not be empty"),
    )
    admin_users: list[str] = option(
        "admin-user",
        [],
        "admin user (may be given multiple times; if specified, only these users will be "
        "able to perform privileged actions)",
        config_key="admin_users",
    )
    log_level: str = option(
        "log-level",
        "info",
        "set log verbosity: debug, info, warn, error, or fatal",
        check=log_level_check(),
        shown=shown_log_level,
    )
    log_prefix: str = option("log-prefix", "[nsqadmin] ", "log message prefix")
    verbose: bool = option("verbose", False, "[deprecated] has no effect, use --log-level")
    # nsqpy: nsqadmin samples every nsqd's /stats this often into an in-memory history that
    # feeds the graphs (no graphite needed); 0 turns sampling off.
    stats_sample_interval_ms: int = option(
        "stats-sample-interval",
        10_000,
        "nsqpy: how often nsqadmin samples every nsqd's /stats for its own graphs (0 disables)",
        kind="duration_ms",
        check=must(lambda v: v >= 0, "--{flag} must not be negative"),
    )
    # nsqpy: samples kept per series (topic, channel, node): 360 x 10s = one hour.
    stats_history_size: int = option(
        "stats-history-size",
        360,
        "nsqpy: samples kept per topic/channel/node series for the graphs",
        check=must(lambda v: 2 <= v <= 100_000, "--{flag} {value} out of range 2-100000"),
    )


FLAGS = declared(NsqAdminOptions)


def config_value(opts: NsqAdminOptions, name: str) -> object:
    """GET /config/<name>: the option as nsqadmin shows it. KeyError for any other name."""
    opt = config_options(NsqAdminOptions)[name]
    return api_value(opt, getattr(opts, opt.field))


def normalize_base_path(path: str) -> str:
    """NSQ's rule: a leading ``/``, cleaned, no trailing ``/`` (``""`` -> ``/``)."""
    if not path:
        return "/"
    if not path.startswith("/"):
        path = "/" + path
    return "/" + posixpath.normpath(path).lstrip("/")


def validate(opts: NsqAdminOptions) -> None:
    """Raise ConfigError naming the first bad option; normalises ``base_path``."""
    check_options(opts)
    if not opts.lookupd_http_addresses and not opts.nsqd_http_addresses:
        raise ConfigError("--nsqd-http-address or --lookupd-http-address required")
    if opts.lookupd_http_addresses and opts.nsqd_http_addresses:
        raise ConfigError("use --nsqd-http-address or --lookupd-http-address not both")
    if opts.proxy_graphite and not opts.graphite_url:
        raise ConfigError("--proxy-graphite needs --graphite-url")
    if bool(opts.http_client_tls_cert) != bool(opts.http_client_tls_key):
        raise ConfigError("--http-client-tls-cert and --http-client-tls-key must be given together")
    problem = cluster_tls_check(opts)
    if problem:
        raise ConfigError(problem)
    if cluster_tls_on(opts) and (
        opts.http_client_tls_root_ca_file
        or opts.http_client_tls_cert
        or opts.http_client_tls_insecure_skip_verify
    ):
        raise ConfigError(
            "--cluster-tls-* and --http-client-tls-* both given: with the cluster's "
            "certificates nsqadmin trusts the cluster's CA only"
        )
    opts.base_path = normalize_base_path(opts.base_path)
