"""The test kit's pytest fixtures, in one place. Load it from a ``conftest.py``::

    pytest_plugins = ["nsqpy.testing.pytest_plugin"]

- ``clock``: a ``FakeClock``.
- ``nsqd``: an in-process ``NsqdServer`` on ``clock``, data under ``tmp_path``, started.
- ``nsqd_servers``: ``NsqdServers`` on ``tmp_path`` and ``clock``, to start, restart and
  stop servers with other options; all stopped at the end.
- ``data_path``: ``tmp_path / "data"``, created.
- ``start_nsqd``: ``start_nsqd(*flags, data=..., env=..., nofile=...)`` starts the nsqd
  program on loopback ports (data under ``data_path`` unless ``data`` is given) and returns
  it started; every process started is killed at the end, also when the test fails.
- ``certs``: a CA, a server certificate for 127.0.0.1 and a client certificate signed by
  it, as files (``nsqpy.testing.certs.make_certs``), made once per session.
- after every test (autouse), the wires opened with ``WireClient`` and ``AsyncWire`` are
  closed.

A fixture of the same name in a test's own ``conftest.py`` or module takes precedence.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from nsqpy.nsqd.server import NsqdServer
from nsqpy.testing.certs import CertFiles, make_certs
from nsqpy.testing.clock import FakeClock
from nsqpy.testing.inprocess import NsqdServers, nsqd_options
from nsqpy.testing.processes import DaemonProcess, StartNsqd, nsqd_process
from nsqpy.testing.wire import AsyncWire, close_test_connections


@pytest.fixture(autouse=True)
def _close_sync_connections() -> Iterator[None]:
    yield
    close_test_connections()


@pytest.fixture(autouse=True)
async def _close_async_wires() -> AsyncIterator[None]:
    yield
    await AsyncWire.close_all()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def nsqd(tmp_path: Path, clock: FakeClock) -> AsyncIterator[NsqdServer]:
    server = NsqdServer(nsqd_options(tmp_path), clock=clock)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def nsqd_servers(tmp_path: Path, clock: FakeClock) -> AsyncIterator[NsqdServers]:
    servers = NsqdServers(tmp_path, clock)
    yield servers
    await servers.stop_all()


@pytest.fixture
def data_path(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def start_nsqd(data_path: Path) -> Iterator[StartNsqd]:
    started: list[DaemonProcess] = []

    def start(
        *flags: str,
        data: Path | None = None,
        env: dict[str, str] | None = None,
        nofile: int | None = None,
        timeout: float = 20.0,
    ) -> DaemonProcess:
        proc = nsqd_process(data or data_path, *flags, env=env, nofile=nofile)
        started.append(proc)
        return proc.start(timeout)

    yield start
    for proc in started:
        proc.kill()


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertFiles:
    return make_certs(tmp_path_factory.mktemp("certs"))
