"""The suite loads nsqpy's test kit as a pytest plugin (``nsqpy.testing.pytest_plugin``): the
shared fixtures (``clock``, ``nsqd``, ``nsqd_servers``, ``data_path``, ``start_nsqd``) and
the teardown after every test that closes the connections it left open. The kit's own
``assert`` statements (``subscriber``, ``publish``) are rewritten to show their values."""

import os

import pytest

pytest.register_assert_rewrite("nsqpy.testing")

pytest_plugins = ["nsqpy.testing.pytest_plugin"]


@pytest.fixture
def preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The position of every ``os.pread`` made from here on (what was read from a disk)."""
    reads: list[int] = []
    pread = os.pread

    def counted(fd: int, n: int, at: int) -> bytes:
        reads.append(at)
        return pread(fd, n, at)

    monkeypatch.setattr(os, "pread", counted)
    return reads
