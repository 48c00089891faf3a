"""One nsqd per data path: the second one is refused, as NSQ flocks its data path (SPEC 5.1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nsqpy.broker.broker import Broker, DataPathInUse
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
