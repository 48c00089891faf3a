"""The report of a checked run: the summary leads with the verdict and names what was
lost; write_report leaves the summary, the JSON result and a real PNG timeline."""

from __future__ import annotations

import json
from pathlib import Path

from nsqpy.jepsen.checker import check
from nsqpy.jepsen.report import summary_text, write_report

from .helpers import acks, clean, fault, history, pub, recv

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_write_report_on_a_history_with_a_lost_value(tmp_path: Path) -> None:
    rates = [10] * 10 + [0, 0] + [10] * 8
    events = history(
        acks(rates),
        [recv(v, "b", 19.9) for v in range(sum(rates)) if v != 42],  # b misses 42
        [pub(900, 10.5, "info", "timeout"), pub(901, 10.6, "fail", "E_PUB_FAILED")],
        fault("halves", 0, 10.0, 11.5),
        fault("kill", 1, 15.0, 15.5),
    )
    result = check(events, ["a", "b"])
    paths = write_report(tmp_path / "report", events, result, title="halves run")
    assert set(paths) == {"summary", "result", "timeline"}
    png = paths["timeline"].read_bytes()
    assert png.startswith(PNG_SIGNATURE)
    assert len(png) > 10_000
    summary = paths["summary"].read_text()
    assert summary.splitlines()[0] == "INVALID: halves run"
    assert "channel a: lost 0, unexpected 0," in summary
    assert "channel b: lost 1, unexpected 0," in summary
    assert "  lost: 42" in summary.splitlines()
    assert "errors (fail): E_PUB_FAILED 1" in summary
    assert "errors (info): timeout 1" in summary
    doc = json.loads(paths["result"].read_text())
    assert doc["valid"] is False
    assert doc["channels"][1]["lost"] == [42]


def test_summary_of_a_valid_history_tables_the_faults() -> None:
    rates = [10] * 10 + [0, 0] + [10] * 10
    result = check(history(acks(rates), fault("halves", 0, 10.0, 11.5)), ["a"])
    lines = summary_text(result).splitlines()
    assert lines[0] == "VALID"
    assert "channel a: lost 0, unexpected 0" in lines[2]
    (row,) = [line for line in lines if line.startswith("halves")]
    assert row.split() == ["halves", "1", "0", "0.50s", "0.50s", "2.05s"]


def test_summary_lists_only_the_first_lost_values() -> None:
    events = [e for e in clean(30) if e["op"] != "recv" or e["v"] >= 25]
    (line,) = [line for line in summary_text(check(events, ["a"])).splitlines() if "lost (" in line]
    assert line == "  lost (first 10 of 25): 0, 1, 2, 3, 4, 5, 6, 7, 8, 9"
