"""nsq_to_file's output files: naming, rotation, gzip members, fsync and the move to output-dir.

One ``FileLogger`` per topic, driven by ``step`` (a batch of bodies plus the tick/HUP/close
events) from a single worker at a time, mirroring NSQ's ``router``:

- a file is opened lazily; it rotates when the formatted name changes (``<DATETIME>``),
  ``rotate_interval`` has passed since it was opened, or more than ``rotate_size`` bytes
  (uncompressed, as NSQ counts) were written; ``<REV>`` becomes ``-000000``, ``-000001``, ...
  bumped while a name is taken (in work-dir or output-dir);
- files open with O_EXCL when gzip or rotate-interval is on, else with O_APPEND;
- ``sync`` ends the current gzip member (a concatenated gzip stream, so every synced
  message is readable after a crash) and fsyncs; only synced messages may be FIN'd;
- a closed file leaves ``work_dir`` for ``output_dir`` by link + unlink, never overwriting:
  on a clash the revision is bumped;
- with ``skip_empty_files`` no empty file is created by the sync ticker and an empty file
  is removed when closed.

Blocking file I/O only: no asyncio, no network. The clock is injected.
"""

from __future__ import annotations

import gzip
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from nsqpy.tools.strftime import local_now, strftime

log = logging.getLogger("nsqpy.tools")

REV = "<REV>"


@dataclass(frozen=True)
class FileConfig:
    """What shapes one topic's files (``template`` has <TOPIC>/<HOST>/<PID> filled in)."""

    template: str
    output_dir: str
    work_dir: str
    datetime_format: str = "%Y-%m-%d_%H"
    gzip: bool = False
    gzip_level: int = 6
    rotate_size: int = 0
    rotate_interval: float = 0.0
    skip_empty_files: bool = False


def filename_template(
    fmt: str, topic: str, host: str, pid: int, *, rev_needed: bool, gzip_on: bool
) -> str:
    """NSQ's computeFilenameFormat: fill <TOPIC> <HOST> <PID>; keep or drop <REV>; add .gz.

    Raises ``ValueError`` when <REV> is needed (gzip, rotation or a separate work dir) but
    missing.
    """
    if rev_needed:
        if REV not in fmt:
            raise ValueError(
                "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
            )
    else:
        fmt = fmt.replace(REV, "")
    out = fmt.replace("<TOPIC>", topic).replace("<HOST>", host).replace("<PID>", str(pid))
    if gzip_on and not out.endswith(".gz"):
        out += ".gz"
    return out


def host_identifier(identifier: str, hostname: str) -> str:
    """--host-identifier with <SHORT_HOST>/<HOSTNAME> replaced; default the short hostname."""
    short = hostname.split(".")[0]
    if not identifier:
        return short
    return identifier.replace("<SHORT_HOST>", short).replace("<HOSTNAME>", hostname)


class FileLogger:
    """The current output file of one topic and its unsynced tail."""

    def __init__(self, config: FileConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.out: BinaryIO | None = None
        self.member: gzip.GzipFile | None = None
        self.path = ""
        self.filename = ""
        self.rev = 0
        self.open_time = 0.0
        self.filesize = 0
        self.written = 0  # bytes written to this file by us
        self.pending = 0  # messages written and not yet fsynced
        self.files_closed: list[str] = []

    # ---- one router turn -------------------------------------------------------------------
    def step(
        self, bodies: list[bytes], *, tick: bool, hup: bool, force_sync: bool, close: bool
    ) -> bool:
        """Write ``bodies`` and handle the events; True when nothing written is unsynced."""
        sync = False
        close_file = hup or close
        for body in bodies:
            if self.needs_rotation():
                self.update_file()
                sync = True
            self.write(body)
            self.pending += 1
        if tick:
            if self.needs_rotation():
                if self.config.skip_empty_files:
                    close_file = True
                else:
                    self.update_file()
            sync = True
        if (sync or force_sync or close_file) and self.pending:
            self.sync()
        if close_file:
            self.close()
        return self.pending == 0

    # ---- files -------------------------------------------------------------------------------
    def current_filename(self) -> str:
        stamp = strftime(self.config.datetime_format, local_now(self.clock()))
        return self.config.template.replace("<DATETIME>", stamp)

    def needs_rotation(self) -> bool:
        if self.out is None:
            return True
        if self.current_filename() != self.filename:
            return True
        interval = self.config.rotate_interval
        if interval > 0 and self.clock() - self.open_time > interval:
            return True
        return 0 < self.config.rotate_size < self.filesize

    def update_file(self) -> None:
        """Close the current file and open the next one (new name, or next revision)."""
        self.close()
        filename = self.current_filename()
        self.rev = 0 if filename != self.filename else self.rev + 1
        self.filename = filename
        self.open_time = self.clock()
        cfg = self.config
        full = os.path.join(cfg.work_dir, filename)
        _make_parent(full)
        exclusive = cfg.gzip or cfg.rotate_interval > 0
        while True:
            path = full.replace(REV, f"-{self.rev:06d}")
            if cfg.work_dir != cfg.output_dir:
                target = self._output_path(path)
                _make_parent(target)
                if os.path.exists(target):
                    log.warning("output file already exists: %s", target)
                    self.rev += 1
                    continue
            try:
                out = open(path, "xb" if exclusive else "ab")  # noqa: SIM115 - kept open
            except FileExistsError:
                log.warning("working file already exists: %s", path)
                self.rev += 1
                continue
            size = os.fstat(out.fileno()).st_size
            if 0 < cfg.rotate_size < size:
                out.close()
                self.rev += 1
                continue
            break
        log.debug("opening %s", path)
        self.out, self.path, self.filesize, self.written = out, path, size, 0

    def write(self, body: bytes) -> None:
        assert self.out is not None
        if self.config.gzip:
            if self.member is None:
                self.member = gzip.GzipFile(
                    fileobj=self.out, mode="wb", compresslevel=self.config.gzip_level
                )
            self.member.write(body)
            self.member.write(b"\n")
        else:
            self.out.write(body)
            self.out.write(b"\n")
        self.filesize += len(body) + 1
        self.written += len(body) + 1

    def sync(self) -> None:
        """End the gzip member, flush and fsync: everything written is now durable."""
        if self.out is None:
            return
        if self.member is not None:
            self.member.close()  # writes the trailer; the file itself stays open
            self.member = None
        self.out.flush()
        os.fsync(self.out.fileno())
        self.pending = 0

    def close(self) -> None:
        """Sync and close the file; move it to output-dir (or drop it if empty and allowed)."""
        if self.out is None:
            return
        if self.config.gzip and self.written == 0 and not self.config.skip_empty_files:
            gzip.GzipFile(fileobj=self.out, mode="wb").close()  # a valid, empty gzip file
        self.sync()
        size = os.fstat(self.out.fileno()).st_size
        self.out.close()
        self.out = None
        src = self.path
        if self.config.skip_empty_files and size == 0:
            os.unlink(src)
            log.debug("removed empty file %s", src)
            return
        if self.config.work_dir != self.config.output_dir:
            src = self._move_to_output(src)
        self.files_closed.append(src)

    def _output_path(self, work_path: str) -> str:
        rel = os.path.relpath(work_path, self.config.work_dir)
        return os.path.join(self.config.output_dir, rel)

    def _move_to_output(self, src: str) -> str:
        dst = self._output_path(src)
        _make_parent(dst)
        rev = self.rev
        template = self._output_path(os.path.join(self.config.work_dir, self.filename))
        while True:
            try:
                os.link(src, dst)
            except FileExistsError:
                log.warning("destination file already exists: %s", dst)
                rev += 1
                if REV not in template:
                    raise
                dst = template.replace(REV, f"-{rev:06d}")
                continue
            os.unlink(src)
            log.debug("moved finished file %s to %s", src, dst)
            return dst


def _make_parent(path: str) -> None:
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, mode=0o770, exist_ok=True)
