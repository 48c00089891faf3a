"""nsq_to_file's files in-process: names, rotation, revisions, gzip members, work-dir moves."""

from __future__ import annotations

import gzip
import os
import zlib
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqpy.tools.filelogger import FileConfig, FileLogger, filename_template, host_identifier
from nsqpy.tools.strftime import strftime

T0 = datetime(2024, 3, 5, 14, 7, 9, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def logger(tmp_path: Path, clock: Clock, **overrides: object) -> FileLogger:
    fields: dict[str, object] = {
        "template": "t.host<REV>.<DATETIME>.log",
        "output_dir": str(tmp_path / "out"),
        "work_dir": str(tmp_path / "out"),
        "datetime_format": "%Y%m%d%H%M",
    }
    fields.update(overrides)
    for key in ("output_dir", "work_dir"):
        os.makedirs(str(fields[key]), exist_ok=True)
    return FileLogger(FileConfig(**fields), clock=clock)  # type: ignore[arg-type]


def read_gzip_members(path: Path) -> bytes:
    """Decode a concatenated gzip stream member by member (what a reader sees after a crash)."""
    data, out = path.read_bytes(), b""
    while data:
        d = zlib.decompressobj(31)
        out += d.decompress(data)
        data = d.unused_data
    return out


def test_strftime_subset_matches_go_layouts() -> None:
    when = datetime(2024, 3, 5, 14, 7, 9, tzinfo=timezone(timedelta(hours=-7), "MST"))
    assert strftime("%Y-%m-%d_%H", when) == "2024-03-05_14"
    assert strftime("%y %b %B %a %A %I %p %M %S %Z %z %%", when) == (
        "24 Mar March Tue Tuesday 02 PM 07 09 MST -0700 %"
    )
    assert strftime("%Q%e %", when) == "%Q%e %"  # unknown directives stay as written


@given(st.text(alphabet="xq%-_.HMSYQ/", max_size=30))
def test_strftime_never_reinterprets_literal_text(fmt: str) -> None:
    when = datetime(2001, 2, 3, 4, 5, 6)
    out = strftime(fmt, when)
    expected = ""
    i = 0
    while i < len(fmt):
        if fmt[i] == "%" and i + 1 < len(fmt) and fmt[i + 1] in "%HMSY":
            expected += when.strftime(fmt[i : i + 2])
            i += 2
        else:
            expected += fmt[i]
            i += 1
    assert out == expected


def test_filename_template_rules() -> None:
    fmt = "<TOPIC>.<HOST><REV>.<DATETIME>.log"
    assert (
        filename_template(fmt, "t", "h", 42, rev_needed=False, gzip_on=False)
        == "t.h.<DATETIME>.log"
    )
    assert (
        filename_template(fmt, "t", "h", 42, rev_needed=True, gzip_on=True)
        == "t.h<REV>.<DATETIME>.log.gz"
    )
    assert (
        filename_template("<PID>-<TOPIC>.gz", "t", "h", 42, rev_needed=False, gzip_on=True)
        == "42-t.gz"
    )
    with pytest.raises(ValueError, match="missing <REV>"):
        filename_template("<TOPIC>.log", "t", "h", 1, rev_needed=True, gzip_on=False)
    assert host_identifier("", "web1.example.com") == "web1"
    assert host_identifier("<SHORT_HOST>-<HOSTNAME>", "web1.example.com") == "web1-web1.example.com"


def test_rotates_when_the_datetime_changes(tmp_path: Path) -> None:
    clock = Clock()
    flog = logger(tmp_path, clock, template="t.<DATETIME>.log")
    assert flog.step([b"a", b"b"], tick=False, hup=False, force_sync=True, close=False)
    clock.now += 60
    assert flog.step([b"c"], tick=False, hup=False, force_sync=False, close=False)  # rotation syncs
    flog.step([], tick=False, hup=False, force_sync=False, close=True)
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["t.202403051407.log", "t.202403051408.log"]
    assert (tmp_path / "out" / names[0]).read_bytes() == b"a\nb\n"
    assert (tmp_path / "out" / names[1]).read_bytes() == b"c\n"


def test_rotate_size_bumps_the_revision(tmp_path: Path) -> None:
    flog = logger(tmp_path, Clock(), rotate_size=5)
    for body in (b"1234", b"5678", b"9"):
        flog.step([body], tick=False, hup=False, force_sync=True, close=False)
    flog.step([], tick=False, hup=False, force_sync=False, close=True)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "t.host-000000.202403051407.log",
        "t.host-000001.202403051407.log",
    ]
    assert (out / "t.host-000000.202403051407.log").read_bytes() == b"1234\n5678\n"
    assert (out / "t.host-000001.202403051407.log").read_bytes() == b"9\n"


def test_rotate_interval_opens_a_new_exclusive_file(tmp_path: Path) -> None:
    clock = Clock()
    flog = logger(tmp_path, clock, rotate_interval=10.0)
    flog.step([b"x"], tick=False, hup=False, force_sync=True, close=False)
    clock.now += 11
    assert flog.needs_rotation()
    flog.step([b"y"], tick=False, hup=False, force_sync=False, close=True)
    assert [p.read_bytes() for p in sorted((tmp_path / "out").iterdir())] == [b"x\n", b"y\n"]


def test_unsynced_until_a_sync_event(tmp_path: Path) -> None:
    flog = logger(tmp_path, Clock())
    assert flog.step([b"a"], tick=False, hup=False, force_sync=False, close=False)  # opened: synced
    assert not flog.step([b"b"], tick=False, hup=False, force_sync=False, close=False)
    assert flog.pending == 1
    assert flog.step([], tick=True, hup=False, force_sync=False, close=False)  # the sync ticker
    assert flog.pending == 0
    flog.close()


def test_gzip_members_are_readable_after_each_sync(tmp_path: Path) -> None:
    flog = logger(tmp_path, Clock(), gzip=True, template="t<REV>.log.gz")
    flog.step([b"one", b"two"], tick=False, hup=False, force_sync=True, close=False)
    path = Path(flog.path)
    assert read_gzip_members(path) == b"one\ntwo\n"  # still open: what a crash would leave
    flog.step([b"three"], tick=False, hup=False, force_sync=True, close=False)
    assert read_gzip_members(path) == b"one\ntwo\nthree\n"
    flog.step([], tick=False, hup=False, force_sync=False, close=True)
    assert gzip.decompress(path.read_bytes()) == b"one\ntwo\nthree\n"


def test_work_dir_files_move_to_output_without_overwriting(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "t-000000.log").write_bytes(b"old\n")
    flog = logger(tmp_path, Clock(), template="t<REV>.log", work_dir=str(tmp_path / "work"))
    flog.step([b"new"], tick=False, hup=False, force_sync=True, close=False)
    assert Path(flog.path) == tmp_path / "work" / "t-000001.log"  # output name already taken
    flog.step([], tick=False, hup=True, force_sync=False, close=False)  # SIGHUP closes
    assert list((tmp_path / "work").iterdir()) == []
    assert (out / "t-000000.log").read_bytes() == b"old\n"
    assert (out / "t-000001.log").read_bytes() == b"new\n"
    flog.step([b"again"], tick=False, hup=False, force_sync=False, close=True)
    assert (out / "t-000002.log").read_bytes() == b"again\n"


def test_a_move_clash_bumps_the_revision(tmp_path: Path) -> None:
    flog = logger(tmp_path, Clock(), template="t<REV>.log", work_dir=str(tmp_path / "work"))
    flog.step([b"mine"], tick=False, hup=False, force_sync=True, close=False)
    (tmp_path / "out" / "t-000000.log").write_bytes(b"someone else\n")  # appears meanwhile
    flog.step([], tick=False, hup=False, force_sync=False, close=True)
    assert (tmp_path / "out" / "t-000000.log").read_bytes() == b"someone else\n"
    assert (tmp_path / "out" / "t-000001.log").read_bytes() == b"mine\n"


def test_skip_empty_files(tmp_path: Path) -> None:
    flog = logger(tmp_path, Clock(), skip_empty_files=True)
    flog.step([], tick=True, hup=False, force_sync=False, close=False)
    assert flog.out is None  # the ticker opened nothing
    flog.step([], tick=False, hup=False, force_sync=False, close=True)
    assert list((tmp_path / "out").iterdir()) == []
    keep = logger(tmp_path / "k", Clock())
    keep.step([], tick=True, hup=False, force_sync=False, close=True)
    assert [p.stat().st_size for p in (tmp_path / "k" / "out").iterdir()] == [0]  # NSQ's empty file


def test_appends_to_an_existing_file_without_rev(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "t.log").write_bytes(b"before\n")
    flog = logger(tmp_path, Clock(), template="t.log")
    flog.step([b"after"], tick=False, hup=False, force_sync=False, close=True)
    assert (tmp_path / "out" / "t.log").read_bytes() == b"before\nafter\n"
