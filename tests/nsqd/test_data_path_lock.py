"""One nsqd per data path: the second one is refused, as NSQ flocks its data path (SPEC 5.1);
and a data path of a newer format than nsqd knows is refused too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nsqpy import __version__
from nsqpy.broker.broker import Broker, DataPathInUse
from nsqpy.broker.dataformat import FORMAT, FORMAT_FILE, DataFormatError
from nsqpy.options import NsqdOptions
from nsqpy.testing import WireClient, consume, nsqd_process, pub


def test_a_second_nsqd_on_the_same_data_path_exits_with_one_clear_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with nsqd_process(data) as first:
        c = WireClient(first.tcp_port)
        c.send(b"  V2" + pub("kept", b"by the first"))
        assert c.read_frame() == (0, b"OK")
        second = subprocess.run(
            [
                str(Path(sys.executable).with_name("nsqd")),
                "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:0",
                f"--data-path={data}",
            ],
            capture_output=True,
            timeout=30,
        )
        assert second.returncode != 0
        lines = second.stderr.decode().strip().splitlines()
        assert len(lines) == 1, lines
        assert "in use" in lines[0] and str(data) in lines[0], lines
        assert "Traceback" not in lines[0]
        # The first one is untouched: it still takes and keeps messages.
        c.send(pub("kept", b"after the refusal"))
        assert c.read_frame() == (0, b"OK")
        got = consume(first.tcp_port, "kept", "c", 2)
        assert sorted(got) == [b"after the refusal", b"by the first"]


def test_the_lock_is_released_when_the_broker_closes(tmp_path: Path) -> None:
    opts = NsqdOptions(data_path=str(tmp_path))
    first = Broker(opts)
    with pytest.raises(DataPathInUse, match="in use"):
        Broker(opts)
    first.close()
    second = Broker(opts)
    second.close()


def test_a_data_path_of_a_newer_format_is_refused_with_one_clear_line(tmp_path: Path) -> None:
    """The data path records its format version; an nsqd meeting a newer one refuses to
    start (nothing read or written), one meeting an older one (none: written before the
    data path had one) upgrades it in place and keeps its messages."""
    data = tmp_path / "data"
    with nsqd_process(data) as first:
        c = WireClient(first.tcp_port)
        c.send(b"  V2" + pub("kept", b"before"))
        assert c.read_frame() == (0, b"OK")
        c.close()
    fmt = json.loads((data / FORMAT_FILE).read_text())
    assert fmt == {"format": FORMAT, "written_by": __version__}

    (data / FORMAT_FILE).write_text(json.dumps({"format": FORMAT + 1, "written_by": "9.9.9"}))
    before = sorted(p.name for p in data.rglob("*"))
    refused = subprocess.run(
        [str(Path(sys.executable).with_name("nsqd")), "--tcp-address=127.0.0.1:0",
         "--http-address=127.0.0.1:0", f"--data-path={data}"],
        capture_output=True, timeout=30,
    )  # fmt: skip
    assert refused.returncode != 0
    lines = refused.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert f"holds data format {FORMAT + 1} (written by nsqpy 9.9.9)" in lines[0], lines
    assert sorted(p.name for p in data.rglob("*")) == before, "nothing written"

    (data / FORMAT_FILE).unlink()  # (as a data path written before formats were recorded)
    with nsqd_process(data) as again:
        assert consume(again.tcp_port, "kept", "c", 1) == [b"before"]
    assert json.loads((data / FORMAT_FILE).read_text())["format"] == FORMAT


def test_a_damaged_format_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / FORMAT_FILE).write_text("{not json")
    with pytest.raises(DataFormatError, match="is damaged"):
        Broker(NsqdOptions(data_path=str(tmp_path)))
    (tmp_path / FORMAT_FILE).write_text('{"format": 1}')
    Broker(NsqdOptions(data_path=str(tmp_path))).close()  # the lock was released
