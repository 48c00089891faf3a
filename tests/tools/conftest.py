"""Real daemons for the utilities' tests, shared by the whole folder (topics are unique per test).

``nsqd`` and ``nsqd2`` are plain nsqd programs; ``lookupd_stack`` is the real nsqlookupd with
an nsqd registered to it. All on 127.0.0.1 with ports chosen by the daemons.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from nsqpy.testing import DaemonProcess, lookupd_process, nsqd_process

from .helpers import RUNNING, Receiver

NSQD_FLAGS = ("--msg-timeout=10s",)


@pytest.fixture(scope="session")
def nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with nsqd_process(tmp_path_factory.mktemp("nsqd"), *NSQD_FLAGS) as daemon:
        yield daemon


@pytest.fixture(scope="session")
def nsqd2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with nsqd_process(tmp_path_factory.mktemp("nsqd2"), *NSQD_FLAGS) as daemon:
        yield daemon


@dataclass
class LookupStack:
    lookupd: DaemonProcess
    nsqd: DaemonProcess

    @property
    def lookupd_http(self) -> str:
        return f"127.0.0.1:{self.lookupd.http_port}"


@pytest.fixture(scope="session")
def lookupd_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LookupStack]:
    lookupd = lookupd_process()
    with lookupd:
        registered = nsqd_process(
            tmp_path_factory.mktemp("nsqd_lookupd"),
            *NSQD_FLAGS,
            f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}",
        )
        with registered:
            yield LookupStack(lookupd, registered)


@pytest.fixture(autouse=True)
def _no_tool_left_running() -> Iterator[None]:
    yield
    while RUNNING:
        RUNNING[-1].kill()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver().start()
    yield server
    server.stop()
