"""The archive's own Parquet files: written by date in a task, published once per micro-batch.

No Spark here: ``write_dated`` gets Arrow batches of the source schema as a task would,
and ``publish`` is called as the query's foreachBatch calls it, including the runs of a
micro-batch that Spark repeats after a crash.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from nsqpy.errors import ConfigError
from nsqpy.spark import parquetfiles as pf
from nsqpy.spark.parquetfiles import StagedFile, Target, publish, write_dated
from nsqpy.spark.wire import ARROW_SCHEMA

DAY = 86_400_000_000
MIDNIGHT = 20_000 * DAY  # 2024-10-04T00:00:00Z in microseconds


def batch(first: int, n: int, start_us: int, step_us: int = 1_000_000) -> pa.RecordBatch:
    """``n`` records of the source schema from offset ``first``, ``step_us`` apart."""
    offsets = np.arange(first, first + n, dtype=np.int64)
    headers = [[("k", str(i))] if i % 3 == 0 else None for i in range(first, first + n)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(["audit"] * n, pa.string()),
            pa.array([1] * n, pa.int32()),
            pa.array(offsets),
            pa.array(start_us + (offsets - first) * step_us, pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            ),
            pa.array([f"{o:016x}" for o in offsets]),
            pa.array([b"body-%d" % o for o in offsets], pa.binary()),
            pa.array([None] * n, pa.string()),
            pa.array(headers, pa.map_(pa.string(), pa.string())),
        ],
        schema=ARROW_SCHEMA,
    )


def read_back(path: Path) -> pa.Table:
    return pq.read_table(str(path))


def test_a_task_writes_one_file_per_utc_date(tmp_path: Path) -> None:
    target = Target.of(str(tmp_path))
    # 10 records one hour apart from 20:00 the day before midnight: 4 before, 6 after
    batches = [batch(100, 5, MIDNIGHT - 4 * 3600 * 10**6, 3600 * 10**6)]
    batches.append(batch(105, 5, MIDNIGHT + 3600 * 10**6, 3600 * 10**6))
    files = write_dated(iter(batches), target, "_staging/q/7")

    assert [(f.date, f.rows, f.first_offset, f.last_offset) for f in files] == [
        ("2024-10-03", 4, 100, 103),
        ("2024-10-04", 6, 104, 109),
    ]
    assert all(f.topic == "audit" and f.partition == 1 for f in files)
    assert all(f.path.startswith("_staging/q/7/") for f in files)
    whole = pa.Table.from_batches(batches)
    got = pa.concat_tables([read_back(tmp_path / f.path) for f in files])
    assert got.schema == ARROW_SCHEMA
    assert got.equals(whole)  # every column as the source gave it, in offset order
    assert [f.bytes for f in files] == [(tmp_path / f.path).stat().st_size for f in files]


def test_big_dates_are_written_a_row_group_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = batch(0, 100, MIDNIGHT).nbytes
    monkeypatch.setattr(pf, "ROW_GROUP_BYTES", 3 * size)
    monkeypatch.setattr(pf, "BUFFER_BYTES", 4 * size)
    # two dates interleaved: neither reaches a row group, both together pass the buffer
    days = [MIDNIGHT, MIDNIGHT + DAY] * 5
    batches = [batch(100 * i, 100, start) for i, start in enumerate(days)]
    files = write_dated(iter(batches), Target.of(str(tmp_path)), "_staging/q/0")

    assert [f.rows for f in files] == [500, 500]
    groups = [pq.ParquetFile(str(tmp_path / f.path)).num_row_groups for f in files]
    assert all(g >= 2 for g in groups), groups  # flushed before the end, bounded buffers
    offsets = [read_back(tmp_path / f.path).column("offset").to_pylist() for f in files]
    assert sorted(offsets[0] + offsets[1]) == list(range(1000))


def test_a_failing_read_leaves_no_staged_file(tmp_path: Path) -> None:
    def failing() -> Iterator[pa.RecordBatch]:
        yield batch(0, 10, MIDNIGHT)
        yield batch(10, 10, MIDNIGHT + DAY)
        raise OSError("nsqd went away")

    with pytest.raises(OSError, match="went away"):
        write_dated(failing(), Target.of(str(tmp_path)), "_staging/q/0")
    assert not [p for p in (tmp_path / "_staging/q/0").iterdir()]


def stage(tmp_path: Path, batch_id: int, *starts: int) -> list[StagedFile]:
    """One task's files per start time, as the tasks of micro-batch ``batch_id`` write them."""
    out: list[StagedFile] = []
    for n, start in enumerate(starts):
        b = batch(1000 * batch_id + 10 * n, 10, start)
        out += write_dated(iter([b]), Target.of(str(tmp_path)), f"_staging/q/{batch_id}")
    return out


def offsets_in(root: Path) -> list[int]:
    found: list[int] = []
    for path in root.glob("date=*/*.parquet"):
        found += read_back(path).column("offset").to_pylist()
    return sorted(found)


def test_publish_moves_files_into_date_directories(tmp_path: Path) -> None:
    files = stage(tmp_path, 0, MIDNIGHT, MIDNIGHT + DAY)
    names = publish(Target.of(str(tmp_path)), "q", 0, files)

    assert names == [
        "date=2024-10-04/part-00000000-00000-q.parquet",
        "date=2024-10-05/part-00000000-00001-q.parquet",
    ]
    assert offsets_in(tmp_path) == list(range(20))
    manifest = json.loads((tmp_path / "_manifests/q/0.json").read_text())
    assert manifest["files"] == names
    assert not (tmp_path / "_staging/q/0").exists()
    table = pq.read_table(str(tmp_path))  # a plain read of the directory: dates, no staging
    assert table.num_rows == 20
    assert sorted({str(d) for d in table.column("date").to_pylist()}) == [
        "2024-10-04",
        "2024-10-05",
    ]


def test_a_micro_batch_run_again_replaces_what_its_first_run_published(tmp_path: Path) -> None:
    target = Target.of(str(tmp_path))
    publish(target, "q", 0, stage(tmp_path, 0, MIDNIGHT))
    # batch 1 published, then the driver died before Spark committed it; its leftovers
    # from a failed task attempt are still in staging
    first_run = stage(tmp_path, 1, MIDNIGHT, MIDNIGHT + DAY)
    publish(target, "q", 1, first_run)
    leftover = stage(tmp_path, 1, MIDNIGHT)[0]
    # Spark runs batch 1 again with the same offsets, split differently: one task
    again = stage(tmp_path, 1, MIDNIGHT)
    publish(target, "q", 1, again)

    assert offsets_in(tmp_path) == list(range(10)) + list(range(1000, 1010))
    assert not (tmp_path / leftover.path).exists()  # staging up to batch 1 cleared
    assert not (tmp_path / "_manifests/q/0.json").exists()  # batch 0 will never run again
    assert (tmp_path / "_manifests/q/1.json").exists()


class DiesOnMove:
    """A file system that fails the ``n``-th move of a Parquet file (a driver killed
    while it publishes); everything else goes to the real one."""

    def __init__(self, real: object, n: int) -> None:
        self.real, self.n, self.moves = real, n, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def move(self, src: str, dst: str) -> None:
        if dst.endswith(".parquet"):
            self.moves += 1
            if self.moves == self.n:
                raise KeyboardInterrupt("killed")
        self.real.move(src, dst)  # type: ignore[attr-defined]


def test_a_crash_between_manifest_and_moves_is_repaired_by_the_next_run(tmp_path: Path) -> None:
    target = Target.of(str(tmp_path))
    files = stage(tmp_path, 3, MIDNIGHT, MIDNIGHT + 10, MIDNIGHT + 20)
    with pytest.raises(KeyboardInterrupt):
        publish(Target(DiesOnMove(target.fs, 2), target.root), "q", 3, files)
    assert offsets_in(tmp_path) == list(range(3000, 3010))  # one of three files out

    publish(target, "q", 3, stage(tmp_path, 3, MIDNIGHT, MIDNIGHT + 10, MIDNIGHT + 20))
    assert offsets_in(tmp_path) == list(range(3000, 3030))


def test_another_query_into_the_same_output_keeps_its_files(tmp_path: Path) -> None:
    target = Target.of(str(tmp_path))
    publish(target, "q", 0, stage(tmp_path, 0, MIDNIGHT))
    theirs = write_dated(iter([batch(500, 5, MIDNIGHT)]), target, "_staging/other/0")
    publish(target, "other", 0, theirs)
    assert offsets_in(tmp_path) == list(range(10)) + list(range(500, 505))


def test_locations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert pf.location("out/archive") == str(tmp_path / "out/archive")
    assert pf.location(f"file://{tmp_path}/a") == f"{tmp_path}/a"
    with pytest.raises(ConfigError, match="cannot write Parquet with pyarrow to nosuch://x"):
        pf.location("nosuch://x/y")


@pytest.mark.parametrize(
    "manifest",
    [
        b"",
        b"{not json",
        b"[1, 2]",
        b'{"batch": 1}',
        b'{"files": "date=2024-10-04/part-00000001-00000-q.parquet"}',
        b'{"files": [7]}',
        b'{"files": ["../../elsewhere/part-00000001-00000-q.parquet"]}',
        b'{"files": ["date=2024-10-04/../../x/part-00000001-00000-q.parquet"]}',
        b'{"files": ["date=2024-10-04/part-00000001-00000-../q.parquet"]}',
    ],
)
def test_a_damaged_manifest_stops_the_publication_and_deletes_nothing(
    tmp_path: Path, manifest: bytes
) -> None:
    target = Target.of(str(tmp_path / "out"))
    publish(target, "q", 0, stage(tmp_path / "out", 0, MIDNIGHT))
    keep = tmp_path / "elsewhere" / "part-00000001-00000-q.parquet"
    keep.parent.mkdir()
    keep.write_bytes(b"not the archive's")
    (tmp_path / "out/_manifests/q/1.json").write_bytes(manifest)
    files = stage(tmp_path / "out", 1, MIDNIGHT)

    with pytest.raises(pf.DamagedManifest, match=r"archive manifest .*1\.json"):
        publish(target, "q", 1, files)
    assert keep.exists()
    assert offsets_in(tmp_path / "out") == list(range(10))  # batch 0 as it was
    assert (tmp_path / "out" / files[0].path).exists()  # batch 1 still staged
