"""The ``nsqd`` program: flags -> NsqdOptions -> NsqdServer, until SIGTERM/SIGINT.

A thin shell: parsing, logging set-up, the event loop (uvloop when installed) and a
graceful shutdown that stops accepting, flushes and persists before exiting.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from nsqpy import NSQ_VERSION, __version__
from nsqpy.errors import ConfigError
from nsqpy.flags import Flag, parse_flags
from nsqpy.options import NsqdOptions

FLAGS = [
    Flag("log-level", "log_level", help="log level: debug, info, warn, error, or fatal"),
    Flag("log-prefix", "log_prefix", help="log message prefix"),
    Flag("verbose", "verbose_unused", "bool", help="[deprecated] has no effect"),
    Flag("worker-id", "worker_id_unused", "int", help="[deprecated] use --node-id"),
    Flag("node-id", "node_id", "int", help="unique part for message IDs, (int) in range [0,1024)", config_key="id"),
    Flag("tcp-address", "tcp_address", help="<addr>:<port> to listen on for TCP clients"),
    Flag("http-address", "http_address", help='<addr>:<port> to listen on for HTTP clients ("" disables)'),
    Flag("https-address", "https_address", help="<addr>:<port> to listen on for HTTPS clients"),
    Flag("broadcast-address", "broadcast_address", help="address registered with nsqlookupd (default: hostname)"),
    Flag("broadcast-tcp-port", "broadcast_tcp_port", "int", help="TCP port registered with nsqlookupd (0 = the TCP listener's)"),
    Flag("broadcast-http-port", "broadcast_http_port", "int", help="HTTP port registered with nsqlookupd (0 = the HTTP listener's)"),
    Flag("lookupd-tcp-address", "lookupd_tcp_addresses", "list", help="lookupd TCP address (may be given multiple times)", config_key="nsqlookupd_tcp_addresses"),
    Flag("auth-http-address", "auth_http_addresses", "list", help="<addr>:<port> or a full URL to query the auth server (may be given multiple times)", config_key="auth_http_addresses"),
    Flag("http-client-connect-timeout", "http_client_connect_timeout_ms", "duration", help="timeout for HTTP connect"),
    Flag("http-client-request-timeout", "http_client_request_timeout_ms", "duration", help="timeout for HTTP request"),
    Flag("data-path", "data_path", help="path to store the topic logs, cursors and metadata"),
    Flag("mem-queue-size", "mem_queue_size", "int", help="messages kept by an ephemeral topic; nsqpy keeps every durable message on disk"),
    Flag("max-bytes-per-file", "max_bytes_per_file", "int", help="bytes per topic log segment before rolling"),
    Flag("sync-every", "sync_every", "int", help="number of messages per fsync of a topic log"),
    Flag("sync-timeout", "sync_timeout_ms", "duration", help="duration of time per fsync of a topic log"),
    Flag("sync-always", "sync_always", "bool", help="nsqpy: acknowledge a publish only after the fsync that covers it"),
    Flag("queue-scan-worker-pool-max", "queue_scan_worker_pool_max", "int", help="[unused in nsqpy] kept for compatibility"),
    Flag("queue-scan-selection-count", "queue_scan_selection_count", "int", help="[unused in nsqpy] kept for compatibility"),
    Flag("queue-scan-interval", "queue_scan_interval_ms", "duration", help="how often in-flight timeouts and deferred messages are checked"),
    Flag("msg-timeout", "msg_timeout_ms", "duration", help="default duration to wait before auto-requeing a message"),
    Flag("max-msg-timeout", "max_msg_timeout_ms", "duration", help="maximum duration before a message will timeout"),
    Flag("max-msg-size", "max_msg_size", "int", help="maximum size of a single message in bytes"),
    Flag("max-req-timeout", "max_req_timeout_ms", "duration", help="maximum requeuing timeout for a message"),
    Flag("max-body-size", "max_body_size", "int", help="maximum size of a single command body"),
    Flag("max-heartbeat-interval", "max_heartbeat_interval_ms", "duration", help="maximum client configurable duration of time between client heartbeats"),
    Flag("max-rdy-count", "max_rdy_count", "int", help="maximum RDY count for a client"),
    Flag("max-output-buffer-size", "max_output_buffer_size", "int", help="maximum client configurable size (in bytes) for a client output buffer"),
    Flag("max-output-buffer-timeout", "max_output_buffer_timeout_ms", "duration", help="maximum client configurable duration of time between flushing to a client"),
    Flag("min-output-buffer-timeout", "min_output_buffer_timeout_ms", "duration", help="minimum client configurable duration of time between flushing to a client"),
    Flag("output-buffer-timeout", "output_buffer_timeout_ms", "duration", help="default duration of time between flushing data to clients"),
    Flag("max-channel-consumers", "max_channel_consumers", "int", help="maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)"),
    Flag("statsd-address", "statsd_address", help="UDP <addr>:<port> of a statsd daemon for pushing stats"),
    Flag("statsd-interval", "statsd_interval_ms", "duration", help="duration between pushing to statsd"),
    Flag("statsd-mem-stats", "statsd_mem_stats", "bool", help="toggle sending memory and GC stats to statsd"),
    Flag("statsd-prefix", "statsd_prefix", help="prefix used for keys sent to statsd (%s for host replacement)"),
    Flag("statsd-udp-packet-size", "statsd_udp_packet_size", "int", help="the size in bytes of statsd UDP packets"),
    Flag("statsd-exclude-ephemeral", "statsd_exclude_ephemeral", "bool", help="skip ephemeral topics and channels when sending stats to statsd"),
    Flag("e2e-processing-latency-percentile", "e2e_processing_latency_percentiles", "float_list", help="message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or comma separated)"),
    Flag("e2e-processing-latency-window-time", "e2e_processing_latency_window_time_ms", "duration", help="calculate end to end latency quantiles for this duration of time"),
    Flag("tls-cert", "tls_cert", help="path to certificate file"),
    Flag("tls-key", "tls_key", help="path to key file"),
    Flag("tls-client-auth-policy", "tls_client_auth_policy", help="client certificate auth policy ('require' or 'require-verify')"),
    Flag("tls-root-ca-file", "tls_root_ca_file", help="path to certificate authority file"),
    Flag("tls-required", "tls_required", help="require TLS for client connections (true, false, tcp-https)"),
    Flag("tls-min-version", "tls_min_version", help="minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')"),
    Flag("deflate", "deflate", "bool", help="enable deflate feature negotiation (client compression)"),
    Flag("max-deflate-level", "max_deflate_level", "int", help="max deflate compression level a client can negotiate (> values == > nsqd CPU usage)"),
    Flag("snappy", "snappy", "bool", help="enable snappy feature negotiation (client compression)"),
    Flag("retention", "retention_ms", "duration", help="nsqpy: keep confirmed messages this long before their segments are deleted"),
    Flag("retention-bytes", "retention_bytes", "int", help="nsqpy: keep at most this many bytes of confirmed messages per partition"),
    Flag("client-timeout", "client_timeout_ms", "duration", help="nsqpy: the default heartbeat interval is half of this (NSQ fixes it at 60s)"),
]

VERSION_LINE = f"nsqd v{NSQ_VERSION} (nsqpy {__version__}, python {sys.version.split()[0]})"


def validate(opts: NsqdOptions) -> None:
    if not 0 <= opts.node_id < 1024:
        raise ConfigError(f"--node-id must be in [0,1024), got {opts.node_id}")
    if not 1 <= opts.max_deflate_level <= 9:
        raise ConfigError(f"--max-deflate-level must be in [1,9], got {opts.max_deflate_level}")
    if opts.tls_required not in ("true", "false", "tcp-https", "1", "0"):
        raise ConfigError(f"--tls-required must be true, false or tcp-https, got {opts.tls_required!r}")
    if opts.log_level.lower() not in ("debug", "info", "warn", "error", "fatal"):
        raise ConfigError(f"invalid --log-level {opts.log_level!r}")
    for q in opts.e2e_processing_latency_percentiles:
        if not 0 < q <= 1:
            raise ConfigError(f"--e2e-processing-latency-percentile {q} must be in (0, 1.0]")


def setup_logging(level: str, prefix: str) -> None:
    levels = {"debug": 10, "info": 20, "warn": 30, "error": 40, "fatal": 50}
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prefix}%(asctime)s %(levelname)s: %(message)s"))
    root = logging.getLogger("nsqpy")
    root.handlers[:] = [handler]
    root.setLevel(levels.get(level.lower(), 20))
    root.propagate = False


def parse_args(argv: Sequence[str]) -> NsqdOptions:
    opts: NsqdOptions = parse_flags(
        NsqdOptions,
        FLAGS,
        argv,
        prog="nsqd",
        description="nsqd (nsqpy): the NSQ daemon that receives, keeps on disk and delivers messages",
        version=VERSION_LINE,
    )
    try:
        validate(opts)
    except ConfigError as exc:
        print(f"nsqd: error: {exc}", file=sys.stderr)
        sys.exit(2)
    return opts


async def serve(opts: NsqdOptions) -> None:
    from nsqpy.nsqd.server import NsqdServer

    server = NsqdServer(opts)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def run(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine to completion on uvloop when it is installed."""
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(coro)


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging(opts.log_level, opts.log_prefix)
    try:
        run(serve(opts))
    except OSError as exc:
        logging.getLogger("nsqpy").error("FATAL: %s", exc)
        return 1
    return 0
