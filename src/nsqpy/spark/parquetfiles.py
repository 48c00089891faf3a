"""Archive files: a task's messages into Parquet by UTC date, and their publication.

Owns the archive pipeline's own way to Parquet: ``write_dated`` turns a task's Arrow
batches (the ``nsq`` source schema, in offset order) into one Parquet file per UTC date
of the publish time, written by pyarrow under the output's ``_staging`` directory, and
describes each file (``StagedFile``); ``publish`` then moves one micro-batch's staged
files to ``date=YYYY-MM-DD/part-<batch>-<n>-<query id>.parquet``, exactly once per
micro-batch: a manifest saved before the moves names the files, so a micro-batch that
Spark runs again after a crash first removes whatever its earlier run published.
Directories whose names start with ``_`` are skipped by Spark's and pyarrow's readers,
so staged files and manifests never show in a read of the output.
Imports the standard library, numpy and pyarrow; never pyspark.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, astuple, dataclass, field
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.fs as pafs  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from nsqpy.errors import ConfigError, NsqError

MICROS_PER_DAY = 86_400_000_000
EPOCH = dt.date(1970, 1, 1)
# a date's rows are written as one row group once this much is buffered (Spark's own
# Parquet row groups are up to 128 MB); all dates of a task together buffer at most
# BUFFER_BYTES, the largest being written first when they would buffer more
ROW_GROUP_BYTES = 64 << 20
BUFFER_BYTES = 128 << 20
STAGING = "_staging"
MANIFESTS = "_manifests"


@dataclass(frozen=True)
class Target:
    """Where an archive goes: a pyarrow file system and the output's path on it."""

    fs: pafs.FileSystem
    root: str

    @classmethod
    def of(cls, location: str) -> Target:
        """An absolute local path (see ``location``) or a URI pyarrow knows."""
        if not urlparse(location).scheme:
            return cls(pafs.LocalFileSystem(), location)
        fs, path = pafs.FileSystem.from_uri(location)
        return cls(fs, path.rstrip("/") or "/")

    def path(self, relative: str) -> str:
        return f"{self.root.rstrip('/')}/{relative}"


def location(output: str) -> str:
    """``output`` as the tasks and the driver must both see it: a local path made
    absolute (``file:`` URIs included), or a URI of a file system pyarrow can open.
    ConfigError when pyarrow cannot write there."""
    parsed = urlparse(output)
    if not parsed.scheme:
        return os.path.abspath(output)
    if parsed.scheme == "file":
        return os.path.abspath(parsed.path)
    try:
        pafs.FileSystem.from_uri(output)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise ConfigError(f"the archive cannot write Parquet with pyarrow to {output}: {exc}")
    return output


def staging_dir(query_id: str, batch_id: str) -> str:
    return f"{STAGING}/{query_id}/{batch_id}"


@dataclass(frozen=True)
class StagedFile:
    """A Parquet file a task wrote (``path`` relative to the output) and what it holds."""

    path: str
    date: str
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    rows: int
    bytes: int

    def row(self) -> tuple[object, ...]:
        """The file as a row of ``nsqpy.spark.archive.FILES_SCHEMA`` (same field order)."""
        return astuple(self)


@dataclass
class _DateFile:
    """The Parquet file of one date: batches buffered, written a row group at a time."""

    target: Target
    path: str
    day: int
    batches: list[pa.RecordBatch] = field(default_factory=list)
    buffered: int = 0
    rows: int = 0
    first: int = -1
    last: int = -1
    topic: str = ""
    partition: int = 0
    writer: pq.ParquetWriter | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        offsets = batch.column("offset")
        if not self.rows:
            self.first = offsets[0].as_py()
            self.topic = batch.column("topic")[0].as_py()
            self.partition = batch.column("partition")[0].as_py()
        self.last = offsets[-1].as_py()
        self.rows += batch.num_rows
        self.batches.append(batch)
        self.buffered += batch.nbytes

    def flush(self) -> None:
        if not self.batches:
            return
        table = pa.Table.from_batches(self.batches)
        if self.writer is None:
            self.writer = pq.ParquetWriter(
                self.target.path(self.path),
                table.schema,
                filesystem=self.target.fs,
                compression="snappy",
            )
        self.writer.write_table(table, row_group_size=table.num_rows)
        self.batches, self.buffered = [], 0

    def close(self) -> StagedFile:
        self.flush()
        assert self.writer is not None
        self.writer.close()
        size = self.target.fs.get_file_info(self.target.path(self.path)).size
        date = (EPOCH + dt.timedelta(days=self.day)).isoformat()
        return StagedFile(
            self.path, date, self.topic, self.partition, self.first, self.last, self.rows, size
        )

    def abandon(self) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
                self.target.fs.delete_file(self.target.path(self.path))
            except (OSError, pa.ArrowException):
                pass  # staging is cleared when the micro-batch is published


def _by_date(batch: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch]]:
    """The batch split by the UTC day of its ``timestamp`` (usually a single day)."""
    micros = batch.column("timestamp").cast(pa.int64()).to_numpy(zero_copy_only=False)
    days = micros // MICROS_PER_DAY
    first = int(days[0])
    if bool(np.all(days == first)):
        return [(first, batch)]
    return [(int(day), batch.filter(pa.array(days == day))) for day in np.unique(days)]


def write_dated(
    batches: Iterable[pa.RecordBatch], target: Target, staging: str
) -> list[StagedFile]:
    """Write ``batches`` (one topic partition, offset order) as one Parquet file per UTC
    date under ``staging``; the files written, by date. A failure removes them."""
    files: dict[int, _DateFile] = {}
    target.fs.create_dir(target.path(staging), recursive=True)
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            for day, part in _by_date(batch):
                if day not in files:
                    files[day] = _DateFile(target, f"{staging}/{uuid.uuid4().hex}.parquet", day)
                files[day].add(part)
                if files[day].buffered >= ROW_GROUP_BYTES:
                    files[day].flush()
            while sum(f.buffered for f in files.values()) > BUFFER_BYTES:
                max(files.values(), key=lambda f: f.buffered).flush()
        return [files[day].close() for day in sorted(files)]
    except BaseException:
        for f in files.values():
            f.abandon()
        raise


def final_name(f: StagedFile, n: int, batch_id: int, query_id: str) -> str:
    return f"date={f.date}/part-{batch_id:08d}-{n:05d}-{query_id}.parquet"


FINAL_NAME = re.compile(r"date=\d{4}-\d\d-\d\d/part-\d{8,}-\d{5,}-[0-9A-Za-z_-]+\.parquet")


def _manifest(query_id: str, batch_id: int) -> str:
    return f"{MANIFESTS}/{query_id}/{batch_id}.json"


class DamagedManifest(NsqError):
    """A micro-batch's manifest cannot be read, so what its earlier run published is unknown."""


def _read_manifest(target: Target, relative: str) -> list[str]:
    """The files an earlier run of the micro-batch published (none without a manifest).

    DamagedManifest unless it is a JSON object whose ``files`` are names ``publish``
    gives, so nothing outside the output's ``date=`` directories is ever deleted."""
    path = target.path(relative)
    if target.fs.get_file_info(path).type != pafs.FileType.File:
        return []
    with target.fs.open_input_stream(path) as fh:
        raw = fh.read()
    try:
        files = json.loads(raw)["files"]
    except (ValueError, TypeError, KeyError) as exc:
        raise DamagedManifest(f"archive manifest {path} is not readable: {exc!r}") from None
    if not isinstance(files, list) or not all(
        isinstance(f, str) and FINAL_NAME.fullmatch(f) for f in files
    ):
        raise DamagedManifest(f"archive manifest {path} lists files that are not the archive's")
    return files


def _write_manifest(target: Target, relative: str, doc: dict[str, object]) -> None:
    path = target.path(relative)
    target.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    temp = f"{path}.{uuid.uuid4().hex}.tmp"
    with target.fs.open_output_stream(temp) as fh:
        fh.write(json.dumps(doc, indent=1).encode())
    target.fs.move(temp, path)


def _delete_files(target: Target, relatives: Iterable[str]) -> None:
    for relative in relatives:
        path = target.path(relative)
        if target.fs.get_file_info(path).type == pafs.FileType.File:
            target.fs.delete_file(path)


def publish(target: Target, query_id: str, batch_id: int, files: Sequence[StagedFile]) -> list[str]:
    """Move a micro-batch's staged files into their ``date=`` directories; the names.

    What an earlier run of the same micro-batch published (its manifest says) is removed
    first, so each message of the micro-batch is in the output once whatever crashed
    before. Then the staging and manifests this query no longer needs are cleared.
    """
    manifest = _manifest(query_id, batch_id)
    _delete_files(target, _read_manifest(target, manifest))
    ordered = sorted(files, key=lambda f: (f.date, f.topic, f.partition, f.first_offset))
    finals = [final_name(f, n, batch_id, query_id) for n, f in enumerate(ordered)]
    doc = {"batch": batch_id, "files": finals, "staged": [asdict(f) for f in ordered]}
    _write_manifest(target, manifest, doc)
    for f, final in zip(ordered, finals, strict=True):
        target.fs.create_dir(target.path(final.rsplit("/", 1)[0]), recursive=True)
        target.fs.move(target.path(f.path), target.path(final))
    _clear_before(target, query_id, batch_id)
    return finals


def _numbered(target: Target, relative: str) -> list[tuple[int, pafs.FileInfo]]:
    """The entries of a directory named by a number (``12`` or ``12.json``)."""
    selector = pafs.FileSelector(target.path(relative), allow_not_found=True)
    out = []
    for info in target.fs.get_file_info(selector):
        stem = info.base_name.split(".", 1)[0]
        if stem.isdigit():
            out.append((int(stem), info))
    return out


def _clear_before(target: Target, query_id: str, batch_id: int) -> None:
    """Manifests of micro-batches before ``batch_id`` (Spark committed them, so they never
    run again) and staging of micro-batches up to it (leftovers of failed task attempts
    and of killed runs)."""
    for number, info in _numbered(target, f"{MANIFESTS}/{query_id}"):
        if number < batch_id and info.type == pafs.FileType.File:
            target.fs.delete_file(info.path)
    for number, info in _numbered(target, f"{STAGING}/{query_id}"):
        if number <= batch_id and info.type == pafs.FileType.Directory:
            target.fs.delete_dir(info.path)
