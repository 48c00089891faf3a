"""``nsq_to_file``: archive topics to newline-delimited files, rotated and optionally gzipped.

NSQ v1.3.0's flags and defaults (SPEC 6); files are handled by ``filelogger.FileLogger``.
Per topic, one consumer feeds a ``TopicArchiver``: each handler hands its body to the
archiver's router task and waits; the router writes batches in a worker thread and fsyncs
every ``--sync-interval``, when ``--max-in-flight`` messages wait, or when the consumer is
starved (a connection with in-flight >= 85% of its RDY, go-nsq's ``IsStarved``). A
handler returns, and so FINs its message, only after the fsync that covers it: a crash
loses nothing that was FIN'd. SIGHUP syncs and closes every file (reopened on the next
message). SIGINT/SIGTERM: sync everything written, close the consumers (CLS; what
arrives meanwhile is synced at once, or REQ'd if it comes after CLS), close the files
(moved from ``--work-dir`` to ``--output-dir``) and exit 0.

Topics come from ``--topic`` or, without it, from lookupd's ``/topics`` every
``--topic-refresh`` (first at start), filtered by the ``--topic-pattern`` regular
expression (unanchored search, as Go's ``regexp.MatchString``). Uses ``nsqpy.client``;
must not import the servers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nsqpy.flags import check_options, each, log_level_check, must, option
from nsqpy.tools.clientopts import client_opts_option
from nsqpy.tools.common import (
    Signals,
    ToolError,
    ToolSpec,
    channel_option,
    check_positive,
    check_sources,
    check_topic,
    describe,
    http_connect_timeout_option,
    http_request_timeout_option,
    lookupd_http_addresses_option,
    nsqd_tcp_addresses_option,
    run_tool,
)
from nsqpy.tools.filelogger import FileConfig, FileLogger, filename_template, host_identifier

if TYPE_CHECKING:
    from nsqpy.client import Consumer, Message

log = logging.getLogger("nsqpy.tools")

TOOL = "nsq_to_file"


_NOT_NEGATIVE = must(
    lambda v: v >= 0, "--rotate-size and --rotate-interval must be >= 0", ToolError
)


def _check_pattern(flag: str, pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"--{flag} is invalid: {pattern!r}: {exc}") from None


@dataclass
class ToFileOptions:
    topics: list[str] = option(
        "topic", [], "nsq topic (may be given multiple times)", check=each(check_topic)
    )
    topic_pattern: str = option(
        "topic-pattern",
        "",
        "only log topics matching the following pattern (a regular expression)",
        check=_check_pattern,
    )
    topic_refresh: float = option(
        "topic-refresh",
        60.0,
        "how frequently the topic list should be refreshed",
        kind="duration",
        check=check_positive,
    )
    channel: str = channel_option("nsq_to_file")
    nsqd_tcp_addresses: list[str] = nsqd_tcp_addresses_option()
    lookupd_http_addresses: list[str] = lookupd_http_addresses_option()
    consumer_opts: list[str] = client_opts_option("consumer")
    max_in_flight: int = option(
        "max-in-flight",
        200,
        "max number of messages to allow in flight",
        check=must(lambda v: v >= 1, "--{flag} must be >= 1", ToolError),
    )
    http_client_connect_timeout: float = http_connect_timeout_option()
    http_client_request_timeout: float = http_request_timeout_option(5.0)
    log_prefix: str = option("log-prefix", "[nsq_to_file] ", "log message prefix")
    log_level: str = option(
        "log-level",
        "info",
        "set log verbosity: debug, info, warn, error, or fatal",
        check=log_level_check(ToolError),
    )
    output_dir: str = option("output-dir", "/tmp", "directory to write output files to")
    work_dir: str = option(
        "work-dir",
        "",
        "directory for in-progress files before moving to output-dir",
        default_text="the output-dir",
    )
    datetime_format: str = option(
        "datetime-format",
        "%Y-%m-%d_%H",
        "strftime compatible format for <DATETIME> in filename format",
    )
    filename_format: str = option(
        "filename-format",
        "<TOPIC>.<HOST><REV>.<DATETIME>.log",
        "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. "
        "<REV> is increased when file already exists)",
    )
    host_identifier: str = option(
        "host-identifier",
        "",
        "value to output in log filename in place of hostname. <SHORT_HOST> and <HOSTNAME> "
        "are valid replacement tokens",
    )
    gzip_level: int = option(
        "gzip-level",
        6,
        "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)",
        check=must(
            lambda v: 1 <= v <= 9, "invalid --{flag} value ({value}), should be 1-9", ToolError
        ),
    )
    gzip: bool = option("gzip", False, "gzip output files.")
    skip_empty_files: bool = option("skip-empty-files", False, "skip writing empty files")
    rotate_size: int = option(
        "rotate-size",
        0,
        "rotate the file when it grows bigger than rotate-size bytes (0 = off)",
        metavar="bytes",
        check=_NOT_NEGATIVE,
    )
    rotate_interval: float = option(
        "rotate-interval",
        0.0,
        "rotate the file every duration (0 = off)",
        kind="duration",
        check=_NOT_NEGATIVE,
    )
    sync_interval: float = option(
        "sync-interval",
        30.0,
        "sync file to disk every duration",
        kind="duration",
        check=check_positive,
    )


def validate(opts: ToFileOptions, given: set[str]) -> None:
    check_options(opts)
    if not opts.channel:
        raise ToolError("--channel is required")
    check_sources(opts.nsqd_tcp_addresses, opts.lookupd_http_addresses)
    if not opts.topics and not opts.topic_pattern:
        raise ToolError("--topic or --topic-pattern required")
    if not opts.topics and not opts.lookupd_http_addresses:
        raise ToolError("--lookupd-http-address must be specified when no --topic specified")
    opts.work_dir = opts.work_dir or opts.output_dir
    file_config(opts, "topic")  # <REV> check


def file_config(opts: ToFileOptions, topic: str) -> FileConfig:
    rev_needed = (
        opts.gzip
        or opts.rotate_size > 0
        or opts.rotate_interval > 0
        or opts.work_dir != opts.output_dir
    )
    try:
        template = filename_template(
            opts.filename_format,
            topic,
            host_identifier(opts.host_identifier, socket.gethostname()),
            os.getpid(),
            rev_needed=rev_needed,
            gzip_on=opts.gzip,
        )
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    return FileConfig(
        template=template,
        output_dir=opts.output_dir,
        work_dir=opts.work_dir,
        datetime_format=opts.datetime_format,
        gzip=opts.gzip,
        gzip_level=opts.gzip_level,
        rotate_size=opts.rotate_size,
        rotate_interval=opts.rotate_interval,
        skip_empty_files=opts.skip_empty_files,
    )


def consumer_starved(consumer: Consumer) -> bool:
    """go-nsq's IsStarved: some connection has in-flight >= 85% of its RDY."""
    for conn in consumer.connections:
        if conn.in_flight > 0 and conn.in_flight >= int(conn.rdy * 0.85):
            return True
    return False


class TopicArchiver:
    """One topic: the consumer's handler on one side, the file router on the other."""

    def __init__(
        self,
        topic: str,
        flog: FileLogger,
        sync_interval: float,
        max_in_flight: int,
        fatal: asyncio.Event,
    ) -> None:
        self.topic = topic
        self.flog = flog
        self.sync_interval = sync_interval
        self.max_in_flight = max_in_flight
        self.fatal = fatal
        self.consumer: Consumer | None = None
        self.error: BaseException | None = None
        self.draining = False
        self._stopping = False
        self._hup = False
        self._inbox: list[tuple[bytes, asyncio.Future[bool]]] = []
        self._written: list[asyncio.Future[bool]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._router())

    async def handle(self, msg: Message) -> None:
        """The consumer's handler: returns (FIN) once the body is written and fsynced."""
        if self.error is not None or self._stopping:
            msg.requeue(0, backoff=False)
            return
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._inbox.append((msg.body, done))
        self._wake.set()
        if not await done:
            msg.requeue(0, backoff=False)

    def hup(self) -> None:
        self._hup = True
        self._wake.set()

    def drain(self) -> None:
        """From now on every batch is synced at once (the consumer is closing)."""
        self.draining = True
        self._wake.set()

    async def stop(self) -> None:
        """Sync and close the file, then end the router."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            await self._task

    async def _router(self) -> None:
        loop = asyncio.get_running_loop()
        next_tick = loop.time() + self.sync_interval
        while True:
            try:
                async with asyncio.timeout_at(next_tick):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            tick = loop.time() >= next_tick
            if tick:
                next_tick = loop.time() + self.sync_interval
            stopping = self._stopping
            if not await self._turn(tick, stopping) or stopping:
                return

    async def _turn(self, tick: bool, stopping: bool) -> bool:
        batch, self._inbox = self._inbox, []
        hup, self._hup = self._hup, False
        full = len(self._written) + len(batch) >= self.max_in_flight
        starved = full or (self.consumer is not None and consumer_starved(self.consumer))
        try:
            synced = await asyncio.to_thread(
                self.flog.step,
                [body for body, _ in batch],
                tick=tick,
                hup=hup,
                force_sync=starved or self.draining,
                close=stopping,
            )
        except Exception as exc:  # disk full, permissions, a bad path: fatal, as in NSQ
            self._fail(exc, batch)
            return False
        self._written.extend(done for _, done in batch)
        if synced:
            for done in self._written:
                if not done.done():
                    done.set_result(True)
            self._written.clear()
        return True

    def _fail(self, exc: BaseException, batch: list[tuple[bytes, asyncio.Future[bool]]]) -> None:
        log.error("[%s] writing to disk failed: %s", self.topic, describe(exc))
        self.error = exc
        for done in [*self._written, *(d for _, d in batch), *(d for _, d in self._inbox)]:
            if not done.done():
                done.set_result(False)
        self._written.clear()
        self._inbox.clear()
        self.fatal.set()


class Archive:
    """Every topic being archived, and the lookupd topic discovery that adds more."""

    def __init__(self, opts: ToFileOptions) -> None:
        from nsqpy.tools.discovery import HttpLookups
        from nsqpy.tools.nsqopts import ConsumerFactory

        self.opts = opts
        self.fatal = asyncio.Event()
        self.archivers: dict[str, TopicArchiver] = {}
        self.pattern = re.compile(opts.topic_pattern) if opts.topic_pattern else None
        self.factory = ConsumerFactory.from_flags(TOOL, opts)
        self.http = HttpLookups(opts.http_client_connect_timeout, opts.http_client_request_timeout)

    def allowed(self, topic: str) -> bool:
        if self.pattern is None or self.pattern.search(topic):
            return True
        log.warning("skipping topic %s (doesn't match pattern %s)", topic, self.opts.topic_pattern)
        return False

    async def add_topics(self, topics: list[str]) -> None:
        for topic in topics:
            if topic in self.archivers or not self.allowed(topic):
                continue
            flog = FileLogger(file_config(self.opts, topic))
            archiver = TopicArchiver(
                topic, flog, self.opts.sync_interval, self.opts.max_in_flight, self.fatal
            )
            consumer = self.factory.build(topic, self.opts.channel, archiver.handle)
            archiver.consumer = consumer
            archiver.start()
            self.archivers[topic] = archiver
            await self.factory.start(consumer)
            log.info("archiving topic %s to %s", topic, self.opts.output_dir)

    async def discover(self, *, first: bool) -> None:
        try:
            topics = await self.http.lookupd_topics(self.opts.lookupd_http_addresses)
        except ToolError as exc:
            if first:
                raise
            log.error("%s", exc)
            return
        await self.add_topics(topics)

    def hup(self) -> None:
        for archiver in self.archivers.values():
            archiver.hup()

    async def close(self) -> None:
        archivers = list(self.archivers.values())
        for archiver in archivers:
            archiver.drain()
        await asyncio.gather(
            *(a.consumer.close() for a in archivers if a.consumer is not None),
            return_exceptions=True,
        )
        await asyncio.gather(*(a.stop() for a in archivers), return_exceptions=True)
        await self.http.close()


def prepare_dirs(opts: ToFileOptions) -> None:
    for flag, path in (("output-dir", opts.output_dir), ("work-dir", opts.work_dir)):
        try:
            os.makedirs(path, mode=0o770, exist_ok=True)
        except OSError as exc:
            raise ToolError(f"cannot create --{flag} {path}: {describe(exc)}") from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise ToolError(f"cannot write to --{flag} {path}: permission denied")


async def _until(event: asyncio.Event, timeout: float) -> bool:
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def run(opts: ToFileOptions, signals: Signals) -> int:
    prepare_dirs(opts)
    archive = Archive(opts)
    signals.on_hup = archive.hup
    stop_or_fatal = asyncio.Event()
    watchers = [
        asyncio.ensure_future(_relay(signals.stop, stop_or_fatal)),
        asyncio.ensure_future(_relay(archive.fatal, stop_or_fatal)),
    ]
    try:
        if opts.topics:
            await archive.add_topics(opts.topics)
        else:
            await archive.discover(first=True)
            while not await _until(stop_or_fatal, opts.topic_refresh):
                await archive.discover(first=False)
        await stop_or_fatal.wait()
    finally:
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await archive.close()
    for archiver in archive.archivers.values():
        if archiver.error is not None:
            raise ToolError(f"writing topic {archiver.topic} failed: {describe(archiver.error)}")
    return 0


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


SPEC = ToolSpec(
    name=TOOL,
    summary="Consume topics and append each message (plus a newline) to files, optionally "
    "rotating and gzipping them; a message is FIN'd only once fsynced.",
    options=ToFileOptions,
    validate=validate,
    main=run,
    log_level=lambda opts: str(opts.log_level),
    log_prefix=lambda opts: str(opts.log_prefix),
)


def main(argv: list[str] | None = None) -> int:
    return run_tool(SPEC, argv)
