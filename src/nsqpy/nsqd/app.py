"""The ``nsqd`` program: flags -> NsqdOptions -> NsqdServer, until SIGTERM/SIGINT.

A thin shell: parsing, logging set-up, the event loop (uvloop when installed) and a
graceful shutdown that stops accepting, flushes and persists before exiting.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from nsqpy import NSQ_VERSION, __version__
from nsqpy.daemon import raise_open_files_limit, run, serve_until_signal
from nsqpy.errors import ConfigError, StorageError
from nsqpy.flags import Flag, check_host_port, parse_flags
from nsqpy.logs import setup_daemon_logging
from nsqpy.options import NsqdOptions, listen_address
from nsqpy.protocol.names import valid_topic_name

FLAGS = [
    Flag("log-level", "log_level", help="log level: debug, info, warn, error, or fatal"),
    Flag("log-prefix", "log_prefix", help="log message prefix"),
    Flag("verbose", "verbose_unused", "bool", help="[deprecated] has no effect"),
    Flag("worker-id", "worker_id_unused", "int", help="[deprecated] use --node-id"),
    Flag(
        "node-id",
        "node_id",
        "int",
        help="unique part for message IDs, (int) in range [0,1024)",
        config_key="id",
    ),
    Flag("tcp-address", "tcp_address", help="<addr>:<port> to listen on for TCP clients"),
    Flag(
        "http-address",
        "http_address",
        help='<addr>:<port> to listen on for HTTP clients ("" disables)',
    ),
    Flag("https-address", "https_address", help="<addr>:<port> to listen on for HTTPS clients"),
    Flag(
        "broadcast-address",
        "broadcast_address",
        help="address registered with nsqlookupd (default: the OS hostname)",
    ),
    Flag(
        "broadcast-tcp-port",
        "broadcast_tcp_port",
        "int",
        help="TCP port registered with nsqlookupd (0 = the TCP listener's)",
    ),
    Flag(
        "broadcast-http-port",
        "broadcast_http_port",
        "int",
        help="HTTP port registered with nsqlookupd (0 = the HTTP listener's)",
    ),
    Flag(
        "lookupd-tcp-address",
        "lookupd_tcp_addresses",
        "list",
        help="lookupd TCP address (may be given multiple times)",
        config_key="nsqlookupd_tcp_addresses",
    ),
    Flag(
        "auth-http-address",
        "auth_http_addresses",
        "list",
        help="<addr>:<port> or a full URL to query the auth server (may be given multiple times)",
        config_key="auth_http_addresses",
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
    Flag("data-path", "data_path", help="path to store the topic logs, cursors and metadata"),
    Flag(
        "mem-queue-size",
        "mem_queue_size",
        "int",
        help="messages kept by an ephemeral topic; nsqpy keeps every durable message on disk",
    ),
    Flag(
        "max-bytes-per-file",
        "max_bytes_per_file",
        "int",
        help="bytes per topic log segment before rolling",
    ),
    Flag("sync-every", "sync_every", "int", help="number of messages per fsync of a topic log"),
    Flag(
        "sync-timeout",
        "sync_timeout_ms",
        "duration",
        help="duration of time per fsync of a topic log",
    ),
    Flag(
        "sync-always",
        "sync_always",
        "bool",
        help="nsqpy: acknowledge a publish only after the fsync that covers it",
    ),
    Flag(
        "queue-scan-worker-pool-max",
        "queue_scan_worker_pool_max",
        "int",
        help="[unused in nsqpy] kept for compatibility",
    ),
    Flag(
        "queue-scan-selection-count",
        "queue_scan_selection_count",
        "int",
        help="[unused in nsqpy] kept for compatibility",
    ),
    Flag(
        "queue-scan-interval",
        "queue_scan_interval_ms",
        "duration",
        help="how often in-flight timeouts and deferred messages are checked",
    ),
    Flag(
        "msg-timeout",
        "msg_timeout_ms",
        "duration",
        help="default duration to wait before auto-requeing a message",
    ),
    Flag(
        "max-msg-timeout",
        "max_msg_timeout_ms",
        "duration",
        help="maximum duration before a message will timeout",
    ),
    Flag("max-msg-size", "max_msg_size", "int", help="maximum size of a single message in bytes"),
    Flag(
        "max-req-timeout",
        "max_req_timeout_ms",
        "duration",
        help="maximum requeuing timeout for a message, also the maximum DPUB/HTTP defer "
        "(nsqpy keeps deferred messages on disk: up to 3650 days)",
    ),
    Flag("max-body-size", "max_body_size", "int", help="maximum size of a single command body"),
    Flag(
        "max-heartbeat-interval",
        "max_heartbeat_interval_ms",
        "duration",
        help="maximum client configurable duration of time between client heartbeats",
    ),
    Flag("max-rdy-count", "max_rdy_count", "int", help="maximum RDY count for a client"),
    Flag(
        "max-output-buffer-size",
        "max_output_buffer_size",
        "int",
        help="maximum client configurable size (in bytes) for a client output buffer",
    ),
    Flag(
        "max-output-buffer-timeout",
        "max_output_buffer_timeout_ms",
        "duration",
        help="maximum client configurable duration of time between flushing to a client",
    ),
    Flag(
        "min-output-buffer-timeout",
        "min_output_buffer_timeout_ms",
        "duration",
        help="minimum client configurable duration of time between flushing to a client",
    ),
    Flag(
        "output-buffer-timeout",
        "output_buffer_timeout_ms",
        "duration",
        help="default duration of time between flushing data to clients",
    ),
    Flag(
        "max-channel-consumers",
        "max_channel_consumers",
        "int",
        help="maximum channel consumer connection count per nsqd instance (0 = unlimited)",
    ),
    Flag(
        "statsd-address",
        "statsd_address",
        help="UDP <addr>:<port> of a statsd daemon for pushing stats",
    ),
    Flag(
        "statsd-interval",
        "statsd_interval_ms",
        "duration",
        help="duration between pushing to statsd",
    ),
    Flag(
        "statsd-mem-stats",
        "statsd_mem_stats",
        "bool",
        help="toggle sending memory and GC stats to statsd",
    ),
    Flag(
        "statsd-prefix",
        "statsd_prefix",
        help="prefix used for keys sent to statsd (%s for host replacement)",
    ),
    Flag(
        "statsd-udp-packet-size",
        "statsd_udp_packet_size",
        "int",
        help="the size in bytes of statsd UDP packets",
    ),
    Flag(
        "statsd-exclude-ephemeral",
        "statsd_exclude_ephemeral",
        "bool",
        help="skip ephemeral topics and channels when sending stats to statsd",
    ),
    Flag(
        "e2e-processing-latency-percentile",
        "e2e_processing_latency_percentiles",
        "float_list",
        help="message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or comma separated)",
    ),
    Flag(
        "e2e-processing-latency-window-time",
        "e2e_processing_latency_window_time_ms",
        "duration",
        help="calculate end to end latency quantiles for this duration of time",
    ),
    Flag("tls-cert", "tls_cert", help="path to certificate file"),
    Flag("tls-key", "tls_key", help="path to key file"),
    Flag(
        "tls-client-auth-policy",
        "tls_client_auth_policy",
        help="client certificate auth policy ('require' or 'require-verify')",
    ),
    Flag("tls-root-ca-file", "tls_root_ca_file", help="path to certificate authority file"),
    Flag(
        "tls-required",
        "tls_required",
        help="require TLS for client connections (true, false, tcp-https)",
    ),
    Flag(
        "tls-min-version",
        "tls_min_version",
        help="minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')",
    ),
    Flag(
        "deflate", "deflate", "bool", help="enable deflate feature negotiation (client compression)"
    ),
    Flag(
        "max-deflate-level",
        "max_deflate_level",
        "int",
        help="max deflate compression level a client can negotiate (> values == > nsqd CPU usage)",
    ),
    Flag("snappy", "snappy", "bool", help="enable snappy feature negotiation (client compression)"),
    Flag(
        "retention",
        "retention_ms",
        "duration",
        help="nsqpy: keep confirmed messages this long before their segments are deleted",
    ),
    Flag(
        "retention-bytes",
        "retention_bytes",
        "int",
        help="nsqpy: keep at most this many bytes of confirmed messages per partition",
    ),
    Flag(
        "client-timeout",
        "client_timeout_ms",
        "duration",
        help="nsqpy: the default heartbeat interval is half of this (NSQ fixes it at 60s); "
        "also the time an HTTP request's head, then its body, may take to arrive",
    ),
    Flag(
        "max-attempts",
        "max_attempts",
        "int",
        help="nsqpy: attempts after which a message goes to its channel's dead-letter topic "
        "(0 = never, as NSQ; channels may override it over HTTP)",
    ),
    Flag(
        "dead-letter-suffix",
        "dead_letter_suffix",
        help="nsqpy: a channel's dead-letter topic is <topic><suffix> unless set over HTTP",
    ),
    Flag(
        "trace-max-records",
        "trace_max_records",
        "int",
        help="nsqpy: trace events kept (the oldest are deleted beyond this)",
    ),
]

MAX_DELAY_MS = 3650 * 86_400_000  # deferred messages live on disk; ten years bounds the ns math

VERSION_LINE = f"nsqd v{NSQ_VERSION} (nsqpy {__version__}, python {sys.version.split()[0]})"


def validate_addresses(opts: NsqdOptions) -> None:
    """Every address flag is <addr>:<port> (dialled ones with a host; the TCP and HTTP
    listeners may also be unix socket paths, as in nsqd 1.3.0), checked at start-up."""
    listen_address("tcp-address", opts.tcp_address)
    if opts.http_address:
        listen_address("http-address", opts.http_address)
    if opts.https_address:
        check_host_port("https-address", opts.https_address)
    for address in opts.lookupd_tcp_addresses:
        check_host_port("lookupd-tcp-address", address, need_host=True)
    for address in opts.auth_http_addresses:
        if not address.startswith(("http://", "https://")):
            check_host_port("auth-http-address", address, need_host=True)
    if opts.statsd_address:
        check_host_port("statsd-address", opts.statsd_address, need_host=True)
    for name in ("broadcast_tcp_port", "broadcast_http_port"):
        if not 0 <= getattr(opts, name) <= 65535:
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(opts, name)} out of range")


def validate(opts: NsqdOptions) -> None:
    validate_addresses(opts)
    if not 0 <= opts.node_id < 1024:
        raise ConfigError(f"--node-id must be in [0,1024), got {opts.node_id}")
    if not 1 <= opts.max_deflate_level <= 9:
        raise ConfigError(f"--max-deflate-level must be in [1,9], got {opts.max_deflate_level}")
    if opts.tls_required not in ("true", "false", "tcp-https", "1", "0"):
        raise ConfigError(
            f"--tls-required must be true, false or tcp-https, got {opts.tls_required!r}"
        )
    if opts.log_level.lower() not in ("debug", "info", "warn", "error", "fatal"):
        raise ConfigError(f"invalid --log-level {opts.log_level!r}")
    if not 0 <= opts.max_req_timeout_ms <= MAX_DELAY_MS:
        raise ConfigError(
            f"--max-req-timeout must be in [0, 3650 days], got {opts.max_req_timeout_ms}ms"
        )
    if not 0 <= opts.max_attempts <= 65535:
        raise ConfigError(f"--max-attempts must be in [0,65535], got {opts.max_attempts}")
    if opts.max_attempts and not valid_topic_name("t" + opts.dead_letter_suffix):
        raise ConfigError(
            f"--dead-letter-suffix {opts.dead_letter_suffix!r} makes invalid topic names"
        )
    if opts.trace_max_records < 1:
        raise ConfigError(f"--trace-max-records must be >= 1, got {opts.trace_max_records}")
    for q in opts.e2e_processing_latency_percentiles:
        if not 0 < q <= 1:
            raise ConfigError(f"--e2e-processing-latency-percentile {q} must be in (0, 1.0]")
    if opts.statsd_interval_ms <= 0:
        raise ConfigError("--statsd-interval must be positive")
    if opts.statsd_udp_packet_size <= 0:
        raise ConfigError("--statsd-udp-packet-size must be positive")
    from nsqpy.nsqd.tls import TlsSettings

    TlsSettings.from_options(opts)  # unreadable certificate or key, incomplete TLS flags


def setup_logging(level: str, prefix: str) -> None:
    """nsqd's log lines (``nsqpy.logs``): prefix, time, level; one line per event."""
    setup_daemon_logging(level, prefix)


def parse_args(argv: Sequence[str]) -> NsqdOptions:
    opts: NsqdOptions = parse_flags(
        NsqdOptions,
        FLAGS,
        argv,
        prog="nsqd",
        description="nsqd (nsqpy): the NSQ daemon that receives, keeps on disk and delivers messages",
        version=VERSION_LINE,
        validate=validate,
    )
    return opts


async def serve(opts: NsqdOptions) -> None:
    from nsqpy.nsqd.server import NsqdServer

    await serve_until_signal(NsqdServer(opts))


MIN_OPEN_FILES = 64  # listeners, the event loop, a few clients and files


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging(opts.log_level, opts.log_prefix)
    _, open_files = raise_open_files_limit()
    log = logging.getLogger("nsqpy")
    if open_files < MIN_OPEN_FILES:
        log.error(
            "FATAL: the open files limit is %d; nsqd needs at least %d (raise it with ulimit -n)",
            open_files, MIN_OPEN_FILES,
        )  # fmt: skip
        return 1
    try:
        run(serve(opts))
    except (OSError, StorageError) as exc:  # a port or the data path is taken, a disk fails
        log.error("FATAL: %s", exc)
        return 1
    except ConfigError as exc:
        print(f"nsqd: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # anything else: one clear line, the traceback at debug level
        log.error("FATAL: %s: %s", type(exc).__name__, exc)
        log.debug("FATAL", exc_info=True)
        return 1
    return 0
