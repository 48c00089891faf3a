"""A stream whose nsqd is down logs it once, not at every trigger: the driver's planner
(``StreamPlanner``, what the source calls at each trigger) against a real nsqd that is
stopped and started again on the same address."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nsqpy.spark import plan
from nsqpy.spark.options import source_options
from nsqpy.spark.plan import StreamPlanner
from nsqpy.testing import http_request

from .conftest import start_nsqd


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "nsqpy.spark"]


def test_a_node_down_is_logged_once_then_every_minute_then_when_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = start_nsqd(tmp_path / "data")
    address = daemon.http.removeprefix("http://")
    try:
        assert http_request("POST", f"{daemon.http}/topic/create?topic=events")[0] == 200
        planner = StreamPlanner(
            source_options({"nsqd": address, "topic": "events"}, streaming=True)
        )
        assert planner.refresh()  # (its partition, while it answers)
        now = [1000.0]
        planner.down.clock = lambda: now[0]
        caplog.set_level(logging.INFO, "nsqpy.spark")
        daemon.stop()
        for _ in range(20):  # twenty triggers, a second apart
            assert planner.refresh() == {}
            now[0] += 1
        assert len(lines(caplog)) == 1, lines(caplog)
        assert f"{address} did not answer" in lines(caplog)[0]
        now[0] += plan.REPEAT_S
        planner.refresh()
        planner.refresh()
        assert len(lines(caplog)) == 2, lines(caplog)
        assert f"{address} still does not answer after 80 s and 21 looks" in lines(caplog)[1]
        port = address.rsplit(":", 1)[1]
        daemon = start_nsqd(tmp_path / "data", f"--http-address=127.0.0.1:{port}")
        assert planner.refresh()
        planner.refresh()
        assert lines(caplog)[2:] == [f"nsq source: {address} answers again after 80 s"]
    finally:
        daemon.stop()


def test_a_node_no_longer_asked_is_forgotten(caplog: pytest.LogCaptureFixture) -> None:
    """(lookupd lists another leader: the dead one is not asked any more) A node that is
    asked again later starts over: no "still" line with the time it was not asked."""
    now = [0.0]
    down = plan.DownNodes(lambda: now[0])
    caplog.set_level(logging.INFO, "nsqpy.spark")
    failure = ConnectionRefusedError("refused")
    for _ in range(5):
        down.look({"a:4151": failure, "b:4151": None})
        now[0] += 1
    down.look({"b:4151": None})
    now[0] += plan.REPEAT_S * 10
    down.look({"a:4151": failure})
    assert [line.split(" (")[0] for line in lines(caplog)] == [
        "nsq source: a:4151 did not answer",
        "nsq source: a:4151 did not answer",
    ]
