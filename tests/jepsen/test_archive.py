"""A run's record kept compressed and checked again: ``nsqpy jepsen check`` reads a
gzipped or xz history as it is stored, and says whether a new check agrees with the
result stored beside it; ``nsqpy jepsen publish`` stores a run that way (xz)."""

from __future__ import annotations

import gzip
import json
import lzma
from pathlib import Path

import pytest

from nsqpy.jepsen.archive import find_history, publish, stored_result
from nsqpy.jepsen.checker import check
from nsqpy.jepsen.cli import main
from nsqpy.jepsen.clients import CHANNELS
from nsqpy.jepsen.history import read_history, write_history

from .helpers import Event, clean, history


def events(lose: int | None = None) -> list[Event]:
    """20 values acknowledged and received on both channels (but ``lose`` on plain)."""
    found = history(clean(20, CHANNELS))
    return [e for e in found if not (e["op"] == "recv" and e["v"] == lose and e["ch"] == "plain")]


def write_gz(path: Path, found: list[Event]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(e) + "\n" for e in found)
    return path


def a_run(directory: Path, found: list[Event]) -> Path:
    """A finished run's directory, as the harness leaves it (the plot a stand-in)."""
    directory.mkdir(parents=True)
    write_history(found, directory / "history.jsonl")
    result = check(found, CHANNELS).to_json()
    (directory / "result.json").write_text(json.dumps(result))
    (directory / "timeline.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    run = {"profile": "long", "seed": 3, "commit": "abc"}
    (directory / "run.json").write_text(json.dumps(run))
    return directory


def test_read_history_reads_gzip_and_xz_as_plain(tmp_path: Path) -> None:
    found = events()
    plain = tmp_path / "h.jsonl"
    write_history(found, plain)
    gz = write_gz(tmp_path / "h.jsonl.gz", found)
    xz = tmp_path / "h.jsonl.xz"
    xz.write_bytes(lzma.compress(plain.read_bytes()))
    assert read_history([gz]) == read_history([xz]) == read_history([plain]) == found


def test_a_stored_result_may_be_gzipped_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    found = events()
    write_gz(tmp_path / "old.history.jsonl.gz", found)
    result = json.dumps(check(found, CHANNELS).to_json()).encode()
    (tmp_path / "old.result.json.gz").write_bytes(gzip.compress(result))
    assert main(["check", str(tmp_path / "old.history.jsonl.gz")]) == 0
    assert "the same as the stored result" in capsys.readouterr().out


def test_check_reads_a_gzipped_history_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_gz(tmp_path / "run.history.jsonl.gz", events())
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("VALID: nsqpy jepsen, ")
    assert "channel plain: lost 0, unexpected 0" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no report for a file


def test_check_of_a_gzipped_history_with_a_lost_value_is_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_gz(tmp_path / "history.jsonl.gz", events(lose=7))
    assert main(["check", str(tmp_path), f"--out={tmp_path / 'again'}"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("INVALID") and "  lost: 7" in out.splitlines()
    assert find_history(tmp_path) == path
    doc = json.loads((tmp_path / "again" / "result.json").read_text())
    assert doc["channels"][1]["lost"] == [7]


def test_a_published_run_is_checked_again_as_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = a_run(tmp_path / "run", events())
    prefix = tmp_path / "docs" / "long-seed3"
    assert main(["publish", str(run), str(prefix)]) == 0
    names = sorted(p.name for p in prefix.parent.iterdir())
    assert names == ["long-seed3.history.jsonl.xz", "long-seed3.png",
                     "long-seed3.result.json.xz", "long-seed3.run.json"]  # fmt: skip
    stored = Path(f"{prefix}.history.jsonl.xz")
    assert lzma.decompress(stored.read_bytes()) == (run / "history.jsonl").read_bytes()
    assert stored_result(stored) == Path(f"{prefix}.result.json.xz")
    capsys.readouterr()
    assert main(["check", str(stored)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("VALID: nsqpy jepsen, profile long, seed 3\n")  # from its run.json
    assert "the same as the stored result" in out


def test_a_history_that_no_longer_gives_its_stored_result_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = a_run(tmp_path / "run", events())
    write_history(events(lose=3), run / "history.jsonl")  # changed after it was checked
    prefix = tmp_path / "pub" / "x"
    publish(run, prefix)
    capsys.readouterr()
    assert main(["check", f"{prefix}.history.jsonl.xz"]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS from the stored result" in out
    assert "channel plain lost_count: stored 0, now 1" in out
    assert "valid: stored True, now False" in out


def test_publishing_the_same_run_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    run = a_run(tmp_path / "run", events())
    first = [p.read_bytes() for p in publish(run, tmp_path / "a" / "r")]
    second = [p.read_bytes() for p in publish(run, tmp_path / "b" / "r")]
    assert first == second


def test_publish_and_check_say_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "half").mkdir()
    assert main(["publish", str(tmp_path / "half"), str(tmp_path / "p")]) == 2
    assert "not a finished run: no " in capsys.readouterr().err
    assert main(["check", str(tmp_path / "half")]) == 2
    assert "no history at" in capsys.readouterr().err
